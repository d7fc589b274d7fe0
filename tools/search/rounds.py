"""The rule-based planner between search rounds: measured facts narrow or widen the space.

A round of search measures some candidates; before the next, the planner reads those
measurements (time, fraction of copy bandwidth) beside what was known of each candidate before
it ran (CTAs launched, occupancy, registers) and picks the next round's candidates, with its
reasons in words a report can show. The rules, first match wins:

- nothing left untried: stop;
- nothing correct yet: widen to every untried candidate;
- launch-starved: the best is well under the copy bandwidth and launches fewer CTAs than the GPU
  has SMs, so the GPU is mostly idle: try only candidates that launch more CTAs;
- occupancy-limited: the best is under the bandwidth with few resident warps (latency is not
  hidden): try only candidates with more resident warps;
- narrow: every configuration within a few percent of the best agrees on some parameters' values:
  try only untried candidates within one value step of those values;
- and when a rule leaves no untried candidate: widen to all of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from .runner import RoundPlan, Trial
from .space import FeasibleConfig

STARVED_FRACTION = 0.6  # under this fraction of copy bandwidth with an idle GPU: more CTAs
HIDDEN_FRACTION = 0.8  # under this fraction with few resident warps: more warps
FEW_WARPS = 0.5  # resident warps over the SM's maximum
NEAR_BEST = 0.05  # "within a few percent of the best"


def _key(config: dict[str, int]) -> tuple:
    return tuple(sorted(config.items()))


def _ctas(candidate: FeasibleConfig) -> int:
    return math.prod(candidate.grid)


def plan_round(candidates: Sequence[FeasibleConfig], measured: Sequence[Trial], multiprocessors: int) -> RoundPlan:
    """The next round's candidates (never one already measured) and why."""
    tried = {_key(m.config) for m in measured}
    untried = [c for c in candidates if _key(c.config) not in tried]
    if not untried:
        return RoundPlan(action="stop", reasons=["every candidate has been measured"], candidates=[])
    correct = [m for m in measured if m.median_us is not None]
    if not correct:
        return _widen(untried, "no configuration measured so far is correct")
    best = min(correct, key=lambda m: m.median_us)
    by_key = {_key(c.config): c for c in candidates}
    mine = by_key.get(_key(best.config))
    fraction = best.fraction_of_copy_bandwidth or 0.0
    described = f"the best so far ({best.median_us:.2f} us, {fraction:.0%} of copy bandwidth"

    if mine is not None and fraction < STARVED_FRACTION and _ctas(mine) < multiprocessors:
        picked = [c for c in untried if _ctas(c) > _ctas(mine)]
        reason = (f"{described}) launches {_ctas(mine)} CTAs on {multiprocessors} SMs: "
                  f"try the {len(picked)} untried candidates that launch more")
        return _narrowed(picked, untried, reason)
    if mine is not None and fraction < HIDDEN_FRACTION and mine.occupancy.fraction < FEW_WARPS:
        picked = [c for c in untried if c.occupancy.warps_per_sm > mine.occupancy.warps_per_sm]
        reason = (f"{described}) keeps {mine.occupancy.warps_per_sm} warps resident per SM "
                  f"({mine.occupancy.limiter} limit): try the {len(picked)} untried candidates with more")
        return _narrowed(picked, untried, reason)

    near = [m for m in correct if m.median_us <= best.median_us * (1 + NEAR_BEST)]
    allowed, notes = {}, []
    for name in sorted(best.config):
        values = sorted({c.config[name] for c in candidates})
        used = sorted({m.config[name] for m in near})
        steps = {values[j] for v in used for i in [values.index(v)] for j in (i - 1, i, i + 1)
                 if 0 <= j < len(values)}
        if len(steps) < len(values):
            allowed[name] = steps
            notes.append(f"{name} in {sorted(steps)}")
    picked = [c for c in untried if all(c.config[n] in vs for n, vs in allowed.items())]
    if not allowed:
        return _widen(untried, f"the {len(near)} configurations within {NEAR_BEST:.0%} of {described}) "
                               "share no parameter values")
    reason = (f"the {len(near)} configurations within {NEAR_BEST:.0%} of {described}) agree: "
              f"{', '.join(notes)} ({len(picked)} untried candidates)")
    return _narrowed(picked, untried, reason)


def _narrowed(picked: list[FeasibleConfig], untried: list[FeasibleConfig], reason: str) -> RoundPlan:
    if not picked:
        return _widen(untried, reason + "; none is left there")
    return RoundPlan(action="narrow", reasons=[reason], candidates=[c.config for c in picked])


def _widen(untried: list[FeasibleConfig], reason: str) -> RoundPlan:
    return RoundPlan(action="widen", reasons=[f"{reason}: widen to all {len(untried)} untried candidates"],
                     candidates=[c.config for c in untried])
