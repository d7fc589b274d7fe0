"""Profiler evidence for the model: per shape class, what the kernel holding each shape does on the
GPU and which bottleneck that names, as a kernel engineer reads it off a profiler.

These facts come from the project's own probes, and the prompt says so: the launch geometry (the
candidate's template at its configuration, instantiated for the shape and the GPU), the compile's
registers and CTAs per SM where the evaluation reported them, the measured time against the
kernel's own read/write-mix floor and the launch floor. Nsight Compute's counters (achieved
occupancy, warp-stall reasons, L2 hit rate) come from tools/measuring/nsight.py where ncu is
installed and the run measures on a GPU here: the profiler node measures the slowest shape of each
class for its holder (nsight_profiles), and the prompt shows them beside these. A shape class is the shapes
the floors call latency-bound, or bandwidth-bound (floors.ShapeRow.bound); each class gets the
ranges of its shapes and the bottleneck named at each, counted:

- at the floor: within 90% of the mix's bandwidth (bandwidth-bound), or within the launch floors
  a latency-bound shape is done at (floors.LATENCY_DONE_RATIO);
- launch cost: a latency-bound shape at up to 2x the launch floor, where a faster kernel body
  saves little;
- too few CTAs: at most half as many CTAs as SMs, each thread moving 64 bytes or more, so most
  SMs idle while the rest stream (a latency-bound shape's usual cause, and a bandwidth-bound one's
  where rows are few and long; at 128 rows of a norm on 132 SMs a CTA a row is what the measured
  winners keep, so not below half; with less work a thread, few CTAs are all launch overhead);
- a partial last wave: between one and four waves with the last less than half full, so part of
  the GPU idles at the end of each launch;
- each thread's chain of dependent steps: a latency-bound shape past the launch cost whose CTAs
  fill the SMs: its time is one thread's loads, reduction and stores in sequence, so fewer dependent
  steps or more independent loads a thread, not bandwidth;
- low occupancy: under a quarter of the SM's threads resident (the compile's CTAs per SM, or the
  grid's depth where it is shallower), too few loads in flight to hide memory latency;
- memory latency not hidden: none of the above, yet short of the floor: more bytes in flight per
  thread (wider vectors, more independent loads) or fewer dependent steps.

Why: the model saw times and floors only; a rewrite's direction (split rows, group rows, unroll,
fewer registers) follows from which of these holds, and the planner chose blind (issue 43).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import Counter
from dataclasses import dataclass

from astra_kernels.evaluators import replayed
from astra_kernels.nodes.state import AgentState, Candidate
from astra_kernels import suite
from astra_kernels.tools.measuring import nsight
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.templating.template import Exclusion, TemplateError

from . import measure
from .floors import LATENCY_DONE_RATIO, ShapeRow

# Threads an SM holds at most, by architecture (the CUDA programming guide's table); an unknown
# architecture shows CTAs per SM without a fraction.
MAX_THREADS_PER_SM = {"sm_70": 2048, "sm_75": 1024, "sm_80": 2048, "sm_86": 1536, "sm_89": 1536, "sm_90": 2048,
                      "sm_100": 2048, "sm_120": 1536}
AT_FLOOR_FRACTION = 0.9  # of the mix's bandwidth: what is left is noise and the probe's own margin
LAUNCH_COST = 2.0  # launch floors: below this, a faster body saves at most one launch floor
LOW_OCCUPANCY = 0.25  # of the SM's threads resident
BUSY_THREAD_BYTES = 64  # bytes a thread moves, below which few CTAs are not the bottleneck


@dataclass(frozen=True)
class ShapeEvidence:
    """One shape: its holder's time against the floors, and its launch on the GPU."""

    label: str
    holder: str  # "candidate 3 (tune)"
    row: ShapeRow
    ctas: int | None = None
    threads: int | None = None
    ctas_per_sm: int | None = None  # the compile's occupancy, where the evaluation reported it
    registers: int | None = None
    sms: int | None = None
    max_threads_per_sm: int | None = None
    bytes_moved: int | None = None  # the spec's bytes at this shape

    @property
    def bound(self) -> str | None:
        return self.row.bound()

    @property
    def mix_fraction(self) -> float | None:
        return self.row.floor_us / self.row.us if self.row.floor_us and self.row.us else None

    @property
    def launch_multiple(self) -> float | None:
        return self.row.us / self.row.launch_floor_us if self.row.us and self.row.launch_floor_us else None

    @property
    def waves(self) -> float | None:
        """CTAs over what the GPU holds at once; None where the compile's CTAs per SM is unknown (a
        tuned holder's search keeps no occupancy), never guessed as one."""
        if not self.ctas or not self.sms or not self.ctas_per_sm:
            return None
        return self.ctas / (self.sms * self.ctas_per_sm)

    @property
    def occupancy(self) -> float | None:
        """The share of an SM's threads this launch keeps resident at most: the compile's CTAs per
        SM, or fewer where the grid does not fill the GPU that deep."""
        if not (self.ctas_per_sm and self.threads and self.max_threads_per_sm and self.ctas and self.sms):
            return None
        resident = min(self.ctas_per_sm, math.ceil(self.ctas / self.sms))
        return min(1.0, resident * self.threads / self.max_threads_per_sm)

    def busy_threads(self) -> bool:
        """Whether each thread moves at least BUSY_THREAD_BYTES (four 16-byte vectors): only then did
        the measured winners spread the work over more CTAs (silu_and_mul 1x4096: 96 bytes a thread in
        one CTA, the tables' pick 16 CTAs). Below, they did the opposite: rotary_embedding at 16 tokens
        moves 38 bytes a thread in 40 CTAs of 128 and its picks run 64 threads a CTA, at one token 5
        CTAs for 40. Unknown bytes or threads: assumed busy."""
        if not (self.bytes_moved and self.ctas and self.threads):
            return True
        return self.bytes_moved / (self.ctas * self.threads) >= BUSY_THREAD_BYTES

    def bottleneck(self) -> str:
        launch, mix = self.launch_multiple, self.mix_fraction
        if self.bound is None:
            return "not judged (a time or a floor unknown)"
        if self.bound == "bandwidth-bound" and mix is not None and mix >= AT_FLOOR_FRACTION:
            return "at the floor"
        if self.bound == "latency-bound" and launch is not None and launch <= LATENCY_DONE_RATIO:
            return "at the floor"
        if self.bound == "latency-bound" and launch is not None and launch <= LAUNCH_COST:
            return "launch cost"
        if self.ctas is not None and self.sms and self.ctas * 2 <= self.sms and self.busy_threads():
            return "too few CTAs"
        if self.bound == "latency-bound":
            return "each thread's chain of dependent steps"
        waves = self.waves
        if waves is not None and 1 < waves < 4 and 0 < waves - math.floor(waves) < 0.5:
            return "a partial last wave"
        if self.occupancy is not None and self.occupancy < LOW_OCCUPANCY:
            return "low occupancy"
        return "memory latency not hidden"


@functools.lru_cache(maxsize=64)
def _parsed(kernel: str, source: str):
    """A candidate's template, parsed once for all the shapes it holds."""
    return measure.parse_candidate(kernel, source)


def launch_geometry(kernel: str, candidate: Candidate, config: dict[str, int], shape: dict[str, int], dtype: str,
                    sms: int, arch: str | None) -> tuple[int, int] | None:
    """(CTAs, threads per CTA) of the candidate at `config` for the shape on this GPU; None where
    its template does not parse or excludes the shape."""
    folder = suite.load(kernel)
    which = "baseline" if candidate.origin == "baseline" else "template"
    try:  # the launch exactly as the candidate's evaluation would be asked for (suite.request)
        request = suite.request(folder, which, shape, dtype, config=(config or None) if which == "template" else None,
                                sms=sms, arch=arch, source=None if which == "baseline" else _parsed(kernel, candidate.source))
    except (TemplateError, ValueError):
        return None
    if isinstance(request, Exclusion):
        return None
    return math.prod(request.launch.grid), math.prod(request.launch.block)


def _candidates(state: AgentState) -> dict[int, Candidate]:
    """Every candidate the state keeps, by id: the baseline, the best and the finished ones."""
    return {c["id"]: Candidate.model_validate(c)
            for c in [state.get("baseline"), state.get("best"), *(state.get("history") or [])] if c}


def front_evidence(state: AgentState) -> list[ShapeEvidence]:
    """The evidence at every shape of the front, for the kernel holding it."""
    folder = suite.load(state["kernel"])
    spec = folder.spec
    gpu = state.get("gpu") or {}
    device = gpu.get("device") or {}
    sms, arch = device.get("multiprocessors"), device.get("arch")
    known = _candidates(state)
    shapes = {spec.label(s): s for s in state.get("shapes") or []}
    rows = []
    for label, entry in (state.get("front") or {}).items():
        candidate = known.get(entry["candidate"])
        measured = next((m for m in candidate.measurements if m.label == label), None) if candidate else None
        geometry = (launch_geometry(state["kernel"], candidate, entry.get("config") or {}, shapes[label],
                                    state["dtype"], sms or suite.DEFAULT_SMS, arch)
                    if candidate is not None and label in shapes else None)
        moved = suite.problem(folder, shapes[label], state["dtype"]).bytes_moved if label in shapes else None
        rows.append(ShapeEvidence(
            label=label, holder=f"candidate {entry['candidate']} ({entry['origin']})", bytes_moved=moved,
            row=ShapeRow(label, entry["median_us"], entry.get("floor_us"), gpu.get("launch_floor_us")),
            ctas=geometry[0] if geometry else None, threads=geometry[1] if geometry else None,
            ctas_per_sm=getattr(measured, "occupancy_blocks_per_sm", None),
            registers=getattr(measured, "registers", None), sms=sms,
            max_threads_per_sm=MAX_THREADS_PER_SM.get(arch or "")))
    return rows


def _span(values: list[float], form: str) -> str:
    low, high = min(values), max(values)
    return form.format(low) if form.format(low) == form.format(high) else f"{form.format(low)}-{form.format(high)}"


def local_gpu(context, kernel: str) -> EvaluationWorker | None:
    """The run's worker where it measures on a GPU of this machine (ncu wraps a process here); None
    for a replay, a cluster or a scripted evaluator."""
    worker = measure.stored_evaluator(context, kernel).worker
    return worker if isinstance(worker, EvaluationWorker) and not replayed(worker) else None


def nsight_profiles(state: AgentState, context) -> dict[str, dict]:
    """Nsight Compute's counters at the slowest shape of each class, for the kernel holding it there
    (tools/measuring/nsight.py), where the run measures on a local GPU and `context.nsight` is on; a
    shape already profiled for the same holder is not profiled again. By shape label: the holder,
    the counters as a line of facts, and what ncu said."""
    worker = local_gpu(context, state["kernel"]) if context.nsight else None
    if worker is None:
        return {}
    spec = suite.load(state["kernel"]).spec
    shapes = {spec.label(s): s for s in state.get("shapes") or []}
    done, known, found = state.get("nsight") or {}, _candidates(state), {}
    rows = [r for r in front_evidence(state) if r.label in shapes and r.row.us]
    for bound in ("latency-bound", "bandwidth-bound"):
        members = [r for r in rows if r.bound == bound]
        if not members:
            continue
        label = max(members, key=lambda r: r.row.us).label
        entry = state["front"][label]
        holder = known.get(entry["candidate"])
        if holder is None or done.get(label, {}).get("candidate") == entry["candidate"]:
            continue
        pinned = holder.model_copy(update={"configs": {label: entry.get("config") or {}}})
        try:  # evidence only: whatever stops ncu is a line of the report, never the run's end
            _, planned = measure.requests(context, state["kernel"], state["dtype"], [shapes[label]], pinned)
            request = planned[0][3]
            if isinstance(request, Exclusion):
                continue
            report = nsight.profile(request, device_index=worker.device_index)
        except Exception as exc:
            report = nsight.NsightReport(available=True, message=f"Nsight Compute could not run: "
                                         f"{type(exc).__name__}: {str(exc)[:300]}")
        found[label] = {"candidate": entry["candidate"], "origin": entry["origin"], "facts": report.facts(),
                        "message": report.message}
        if not report.available:
            break  # not installed: the same answer at every shape
    return found


def describe_evidence(rows: list[ShapeEvidence], profiles: dict[str, dict] | None = None) -> str:
    """Per shape class: the ranges over its shapes, then the bottleneck at each, counted; then
    Nsight Compute's counters where `profiles` (nsight_profiles's, kept in the state) has them."""
    lines = []
    for bound in ("latency-bound", "bandwidth-bound", None):
        members = [r for r in rows if r.bound == bound]
        if not members:
            continue
        name = bound or "not classed (a time or a floor unknown)"
        facts = []
        if launch := [r.launch_multiple for r in members if r.launch_multiple]:
            facts.append(f"{_span(launch, '{:.2f}')}x the launch floor")
        if mix := [r.mix_fraction for r in members if r.mix_fraction]:
            facts.append(f"{_span([100 * m for m in mix], '{:.0f}')}% of the mix's bandwidth")
        if ctas := [r.ctas for r in members if r.ctas]:
            facts.append(f"{_span(ctas, '{:d}')} CTAs of {_span([r.threads for r in members if r.threads], '{:d}')} "
                         "threads" + (f" on {members[0].sms} SMs" if members[0].sms else ""))
        if waves := [r.waves for r in members if r.waves is not None]:
            facts.append(f"{_span(waves, '{:.2f}')} waves")
        if occupancy := [r.occupancy for r in members if r.occupancy is not None]:
            facts.append(f"at most {_span([100 * o for o in occupancy], '{:.0f}')}% of an SM's threads resident")
        elif per_sm := [r.ctas_per_sm for r in members if r.ctas_per_sm]:
            facts.append(f"{_span(per_sm, '{:d}')} CTAs per SM")
        if registers := [r.registers for r in members if r.registers]:
            facts.append(f"{_span(registers, '{:d}')} registers a thread")
        counts = Counter(r.bottleneck() for r in members)
        named = "; ".join(f"{what} at {n} ({', '.join(r.label for r in members if r.bottleneck() == what)})"
                          for what, n in counts.most_common())
        lines.append(f"- {name}, {len(members)} shape{'s' * (len(members) > 1)}: " + ", ".join(facts)
                     + f". Bottleneck: {named}.")
    if not lines:
        return ""
    front = {r.label: r for r in rows}
    measured = {label: p for label, p in (profiles or {}).items() if p.get("facts") and label in front}
    if any(r.bottleneck() == "too few CTAs" for r in rows):
        lines.append("- (too few CTAs: most SMs idle. The measured winners there spread the work over more CTAs or "
                     "more threads, except a row reduction's, which keep one CTA a row: there the chain inside it is "
                     "what is left.)")
    for label, p in measured.items():
        lines.append(f"- Nsight Compute at {label} (candidate {p['candidate']}, {p['origin']}): {p['facts']}.")
    median = statistics.median(r.mix_fraction for r in rows if r.mix_fraction) if any(
        r.mix_fraction for r in rows) else None
    why_not = next((p["message"] for p in (profiles or {}).values() if not p.get("facts") and p.get("message")), "")
    source = ("Nsight Compute measured the slowest shape of each class (its lines below)." if measured else
              "Nsight Compute's counters (achieved occupancy, stall reasons, L2 hit rate) were not collected"
              + (f": {why_not}." if why_not else "."))
    lines.insert(0, "From the project's probes (each shape's holder: its launch geometry, the compile's occupancy "
                    f"where reported, its time against the floors). {source}"
                 + (f" Median over the shapes: {100 * median:.0f}% of the mix's bandwidth." if median else ""))
    return "\n".join(lines)
