"""The runner: evaluates what a strategy proposes, within a budget, through the results store.

Strategies only propose (tools/search/strategies.py); the runner turns a configuration into a request,
answers it from the results store when this exact measurement exists (so a re-run or a resumed
run evaluates nothing twice), otherwise sends it to the evaluation worker and stores the result,
failures included. Budgets count proposals, reused or not, so a resumed search retraces the same
path and ends where the uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from astra_kernels.tools.concurrency import map_in_threads, stop_point
from astra_kernels.tools.measuring.evaluation import EvaluationRequest, EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from .strategies import Strategy, make_strategy


class Evaluator(Protocol):
    """What the runner needs of an EvaluationWorker: a device description and evaluate()."""

    device: dict

    def evaluate(self, request: EvaluationRequest) -> EvaluationResult: ...


class Budget(BaseModel):
    evaluations: int | None = None
    seconds: float | None = None
    # Evaluations the time limit cannot cut short: at a large shape one evaluation takes seconds
    # (its float64 checks), and a share of the time alone left searches of two candidates.
    at_least: int = 0


class Trial(BaseModel):
    config: dict[str, int]
    status: str
    median_us: float | None = None
    fraction_of_copy_bandwidth: float | None = None
    reused: bool = False
    message: str = ""
    registers: int | None = None  # the compile's, and the CTAs an SM holds: the agent's profiler evidence
    occupancy_blocks_per_sm: int | None = None
    spread: float | None = None  # the timing's (max - min) / median over its samples; None in older reports


class RoundSummary(BaseModel):
    """One round of a search in rounds: what the planner chose, and what the round found."""

    index: int
    action: str  # "start" (given configurations, index -1), "first", or the planner's "narrow" / "widen"
    reasons: list[str] = Field(default_factory=list)
    pool: int
    evaluated: int = 0
    best_us: float | None = None


class Finalist(BaseModel):
    """One of a search's fastest configurations, measured again (retime_finalists)."""

    config: dict[str, int]
    search_us: float  # its time in the search, the best of which is biased low by the picking
    retimed_us: list[float] = Field(default_factory=list)  # one per round of the fresh run
    statuses: list[str] = Field(default_factory=list)

    @property
    def retimed_median_us(self) -> float | None:
        return statistics.median(self.retimed_us) if self.retimed_us else None


def measured(trials: list[Trial]) -> int:
    """Trials that measured something: a replay's "unrecorded" answers are refusals, not
    evaluations (the budget counts them, so a resumed search retraces its path, but a report's
    counts leave them out, and its rounds and its table must agree: 45 in the table and 111 in the
    rounds below it, before)."""
    return sum(t.status != "unrecorded" for t in trials)


class SearchOutcome(BaseModel):
    strategy: str
    trials: list[Trial] = Field(default_factory=list)
    rounds: list[RoundSummary] = Field(default_factory=list)
    best_config: dict[str, int] | None = None
    best_us: float | None = None
    # The finalists re-timed before the winner was named, and what that decided (retime_finalists);
    # empty in reports from before it, and where fewer than two configurations were correct.
    finalists: list[Finalist] = Field(default_factory=list)
    retime_note: str = ""
    seconds: float = 0.0
    stopped_by: Literal["exhausted", "evaluations", "seconds"] = "exhausted"

    @property
    def fresh_evaluations(self) -> int:
        return sum(not t.reused for t in self.trials)


class StoredEvaluator:
    """The worker behind the results store: a hit is returned without touching the GPU."""

    def __init__(self, worker: Evaluator, store: ResultsStore, run_id: str = ""):
        self.worker = worker
        self.store = store
        self.run_id = run_id

    def has(self, request: EvaluationRequest) -> bool:
        """Whether this exact measurement is stored (so asking for it touches no GPU)."""
        return self.store.has(evaluation_key(request, self.worker.device["name"]))

    def __call__(self, request: EvaluationRequest, **labels) -> tuple[EvaluationResult, bool]:
        stop_point()  # every evaluation of a search, a cross-measurement or a check comes here
        key = evaluation_key(request, self.worker.device["name"])
        if (stored := self.store.get(key)) is not None:
            return stored, True
        result = self.worker.evaluate(request)
        if result.status not in ("unrecorded", "lost"):  # a replay's refusal, a lost worker: no measurement
            self.store.put(key, request, result, run_id=self.run_id, **labels)
        return result, False


# Strategies whose next proposal never depends on a score: several can be asked at once and
# measured side by side (a cluster's workers), and the search is still the same sequence.
UNINFORMED = frozenset({"exhaustive", "random"})


def search(strategy: Strategy, request_for: Callable[[dict[str, int]], EvaluationRequest],
           evaluate: Callable[..., tuple[EvaluationResult, bool]], budget: Budget, *,
           labels: Callable[[dict[str, int]], dict] | None = None,
           progress: Callable[[Trial], None] | None = None, parallel: int = 1) -> SearchOutcome:
    """Ask, evaluate, tell, until the strategy has nothing left or a budget runs out.

    A configuration scores its graph-replayed median time when it is correct; anything else
    (compile error, wrong output, crash, timeout) scores None and can never be the best.
    `parallel`: for a strategy that does not learn from scores (UNINFORMED), this many proposals
    are measured at once; a learning one is asked one at a time whatever it is.
    """
    outcome = SearchOutcome(strategy=strategy.name)
    started = time.perf_counter()
    batch = parallel if strategy.name in UNINFORMED else 1
    pending: list[dict[str, int]] = []
    answers: list[tuple[EvaluationResult, bool]] = []
    while True:
        stop_point()  # a store's answers take no time: a search of them would not otherwise notice a stop
        if budget.evaluations is not None and len(outcome.trials) >= budget.evaluations:
            outcome.stopped_by = "evaluations"
            break
        if (budget.seconds is not None and time.perf_counter() - started >= budget.seconds
                and len(outcome.trials) >= budget.at_least):
            outcome.stopped_by = "seconds"
            break
        if not pending:
            room = batch if budget.evaluations is None else min(batch, budget.evaluations - len(outcome.trials))
            while len(pending) < room and (asked := strategy.ask()) is not None:
                pending.append(asked)
            answers = map_in_threads(lambda c: evaluate(request_for(c), **(labels(c) if labels else {})),
                                     pending, len(pending))
        if not pending:
            break
        config, (result, reused) = pending.pop(0), answers.pop(0)
        ok = result.status == "ok" and result.timing is not None
        score = result.timing.median_us if ok else None
        trial = Trial(config=config, status=result.status, median_us=score, reused=reused,
                      fraction_of_copy_bandwidth=result.fraction_of_copy_bandwidth,
                      message=result.message[:300],
                      registers=info.resources.registers if (info := getattr(result, "kernel_info", None)) else None,
                      occupancy_blocks_per_sm=getattr(result, "occupancy_blocks_per_sm", None),
                      spread=getattr(result.timing, "spread", None) if ok else None)
        outcome.trials.append(trial)
        strategy.tell(config, score)
        if score is not None and (outcome.best_us is None or score < outcome.best_us):
            outcome.best_us, outcome.best_config = score, config
        if progress:
            progress(trial)
    outcome.seconds = time.perf_counter() - started
    return outcome


class RoundPlan(BaseModel):
    """What the next round of a search measures, and why (rounds.plan_round decides it)."""

    action: Literal["narrow", "widen", "stop"]
    reasons: list[str]
    candidates: list[dict[str, int]]


class RoundPlanner(Protocol):
    def __call__(self, trials: list[Trial]) -> RoundPlan: ...


def search_rounds(strategy: str, candidates: list[dict[str, int]],
                  request_for: Callable[[dict[str, int]], EvaluationRequest],
                  evaluate: Callable[..., tuple[EvaluationResult, bool]], budget: Budget, *,
                  rounds: int, plan: RoundPlanner, seed: int = 0,
                  labels: Callable[[dict[str, int]], dict] | None = None,
                  progress: Callable[[Trial], None] | None = None, parallel: int = 1,
                  start: list[dict[str, int]] | None = None) -> SearchOutcome:
    """Searches in rounds, each over the candidates the planner picks from what was measured.
    `parallel`: proposals measured at once where the strategy allows (search's).
    `start`: configurations measured first, in a round of their own that the budget counts and
    caps (those among the candidates, each once, in the order given, at most `budget.evaluations`
    of them; the others are named in the round's reasons; no round where none is a candidate): an
    earlier table's picks and the spec's seeds, so a search of a changed space begins where the
    last one ended, and the planner's narrowing sees them. The first planned round leaves out those
    measured, so none is measured twice.

    The budget is split over `rounds` rounds, each getting an equal share of what is left, so
    an unused share carries forward; when the planned rounds are over and budget is left, the
    planner is asked again until it stops or the budget ends (every round measures at least one
    new candidate, so this ends). An unlimited budget lets the first round try everything.
    """
    outcome = SearchOutcome(strategy=strategy)
    started = time.perf_counter()
    given: list[dict[str, int]] = []
    for config in start or []:
        if config in candidates and config not in given:
            given.append(config)
    firsts = given[:budget.evaluations] if budget.evaluations is not None else given
    if firsts:
        found = search(make_strategy("exhaustive", firsts, seed), request_for, evaluate, Budget(),
                       labels=labels, progress=progress, parallel=parallel)
        outcome.trials += found.trials
        why = ["given configurations, measured before the search",
               *(f"not among the candidates here: {c}" for c in start or [] if c not in candidates),
               *([f"{len(given) - len(firsts)} more left to the search: the budget is {budget.evaluations}"]
                 if len(given) > len(firsts) else [])]
        outcome.rounds.append(RoundSummary(index=-1, action="start", pool=len(firsts), evaluated=measured(found.trials),
                                           best_us=found.best_us, reasons=why))
        outcome.best_us, outcome.best_config = found.best_us, found.best_config
    pool, action, reasons = [c for c in candidates if c not in firsts], "first", []
    for index in itertools.count():
        if index:
            planned = plan(outcome.trials)
            if planned.action == "stop":
                outcome.stopped_by = "exhausted"
                break
            pool, action, reasons = planned.candidates, planned.action, planned.reasons
        left = max(1, rounds - index)
        share = Budget(
            evaluations=None if budget.evaluations is None
            else -(-(budget.evaluations - len(outcome.trials)) // left),
            seconds=None if budget.seconds is None
            else (budget.seconds - (time.perf_counter() - started)) / left,
            at_least=-(-max(0, budget.at_least - len(outcome.trials)) // left),
        )
        if share.evaluations is not None and share.evaluations <= 0:
            outcome.stopped_by = "evaluations"
            break
        if share.seconds is not None and share.seconds <= 0 and share.at_least == 0:
            outcome.stopped_by = "seconds"
            break
        found = search(make_strategy(strategy, pool, seed + index), request_for, evaluate, share,
                       labels=labels, progress=progress, parallel=parallel)
        outcome.trials += found.trials
        outcome.rounds.append(RoundSummary(index=index, action=action, reasons=reasons, pool=len(pool),
                                           evaluated=measured(found.trials), best_us=found.best_us))
        if found.best_us is not None and (outcome.best_us is None or found.best_us < outcome.best_us):
            outcome.best_us, outcome.best_config = found.best_us, found.best_config
    outcome.seconds = time.perf_counter() - started
    return outcome


FINALISTS = 3  # configurations re-timed before a winner is named, at most
RETIME_ROUNDS = 2  # rounds of the fresh run; each measures every finalist once, in the same order
# A configuration contends with the search's best only if its search time lies within this fraction of
# the best's, or within the best's timing spread where that is larger (capped at RETIME_SPREAD_CAP: a
# spread is (max - min) / median of a timing's samples, and one outlying sample makes it large):
# farther off, no re-timing has overturned the order. One threshold for all, so the finalists are the
# fastest few below it. `python3 -P bench/retime_effect.py kernels_sglang/recorded/h200-2026-11-2[89]/*
# --margin 0.02` (the H200 sweep recordings, seven kernels, 872 shapes whose three fastest were re-timed
# whole): the search's time lay within -0.4% and +0.3% of the re-timed one at 90% of the finalists
# (rotary_embedding: -1.4% and +1.3%); the re-timing changed the winner at 34 shapes, by under 0.8%
# but at two (1.2% and 1.4%), and took 20-39% of each tune's evaluation time. With this rule, 285 of
# those 1346 s of re-timing are spent, and the pick is the full re-timing's at every shape but one
# (rotary_embedding's, 0.18% slower).
RETIME_MARGIN = 0.02
RETIME_SPREAD_CAP = 0.10


def contends(best_us: float, best_spread: float | None, us: float, margin: float = RETIME_MARGIN) -> bool:
    """Whether a configuration timed `us` in the search could, re-timed, beat the best one (`best_us`,
    its timing's spread `best_spread`)."""
    return us <= best_us * (1 + retime_threshold(best_spread, margin))


def retime_threshold(best_spread: float | None, margin: float = RETIME_MARGIN) -> float:
    """How far above the best's search time a configuration still contends, as a fraction."""
    return max(margin, min(best_spread or 0.0, RETIME_SPREAD_CAP))


def retime_finalists(outcome: SearchOutcome, request_for: Callable[[dict[str, int]], EvaluationRequest],
                     evaluate: Callable[..., tuple[EvaluationResult, bool]], *,
                     labels: Callable[[dict[str, int]], dict] | None = None, count: int = FINALISTS,
                     rounds: int = RETIME_ROUNDS, margin: float = RETIME_MARGIN) -> SearchOutcome:
    """Name the winner from a fresh, interleaved measurement of the fastest configurations that contend.

    The best median out of hundreds is biased low by about the timing's spread (the winner's curse:
    the one that drew the luckiest noise wins), so the up to `count` fastest configurations whose
    search times lie within `margin` (or the best's spread) of the best's (`contends`) are measured again,
    `rounds` rounds each measuring every finalist once in turn (any drift of the GPU's clocks falls on
    all alike), each a fresh evaluation with the full protocol (`EvaluationRequest.retime`, keyed apart
    from the search's measurement, so the results store answers a re-run but not the search's
    numbers). The winner is the finalist with the best median of its re-timings, and `best_us` that
    median. A finalist whose re-timing is not correct is out. Where none contends with the best, nothing
    is re-timed (RETIME_MARGIN says why that is safe) and `retime_note` says so. Where the re-timing
    cannot be done (a replay holds no record of it, a cluster's worker was lost), the search's winner
    and times stand, said in `retime_note`: a replay answers as the recording did."""
    ranked = sorted((t for t in outcome.trials if t.median_us is not None), key=lambda t: t.median_us)
    finalists: list[Finalist] = []
    runner_up: Trial | None = None
    for trial in ranked:
        if any(f.config == trial.config for f in finalists):
            continue
        if finalists and not contends(ranked[0].median_us, ranked[0].spread, trial.median_us, margin):
            runner_up = trial  # ranked by time: none after it contends either
            break
        finalists.append(Finalist(config=trial.config, search_us=trial.median_us))
        if len(finalists) == count:
            break
    if len(finalists) < 2:
        if finalists and runner_up is not None:
            outcome.retime_note = (f"not re-timed: the next configuration's search time is "
                                   f"{runner_up.median_us / ranked[0].median_us - 1:.2%} above the best's, beyond the "
                                   f"{retime_threshold(ranked[0].spread, margin):.2%} it would have to lie within "
                                   f"(the {margin:.0%} margin, or the best's timing spread where larger)")
        return outcome
    for round_index in range(1, rounds + 1):
        for finalist in finalists:
            request = dataclasses.replace(request_for(finalist.config), retime=round_index)
            result, _ = evaluate(request, **(labels(finalist.config) if labels else {}))
            finalist.statuses.append(result.status)
            if result.status == "ok" and result.timing is not None:
                finalist.retimed_us.append(result.timing.median_us)
    outcome.finalists = finalists
    unmeasured = sorted({s for f in finalists for s in f.statuses if s in ("unrecorded", "lost")})
    if unmeasured:
        outcome.retime_note = (f"finalists not re-timed ({', '.join(unmeasured)}): the search's winner and "
                               "time stand")
        return outcome
    standing = [f for f in finalists if len(f.retimed_us) == rounds]
    if not standing:
        outcome.retime_note = "no finalist was correct when re-timed: the search's winner and time stand"
        return outcome
    best = min(standing, key=lambda f: (f.retimed_median_us, finalists.index(f)))
    dropped = [f for f in finalists if f not in standing]
    outcome.retime_note = (f"{len(finalists)} finalists re-timed in {rounds} interleaved rounds; the winner's "
                           f"search time {best.search_us:.3f} us, re-timed {best.retimed_median_us:.3f} us"
                           + (f"; {len(dropped)} failed when re-timed and are out" if dropped else ""))
    outcome.best_config, outcome.best_us = best.config, best.retimed_median_us
    return outcome
