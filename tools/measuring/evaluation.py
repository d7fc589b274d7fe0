"""One evaluation, start to finish, inside the worker: compile, check, time.

This is the protocol every number in the project comes from (docs/design.md, "Measuring a kernel"):
fresh seeded inputs for each check, outputs poisoned with NaN, read-only inputs verified
unchanged, a second draw at the first's addresses that must change the outputs, then CUDA-graph
timing over rotating input sets against the copy-bandwidth floor measured in the same process.

An optimiser is rewarded by this timer, so the protocol is built not to be gamed (issue 39,
docs/reliability.md "Measurement an optimiser cannot game"): the rotating sets hold several
distinct seeded draws, each set's outputs are filled with finite values before every replay and
checked after the last, the module's `__device__` variables must read the same after the last
launch as before the first (device_state.py), and a time under the physical floor of its bytes,
beyond the spread, is no result ("invalid").
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from astra_kernels.tools.toolchain import pdl
from astra_kernels.tools.toolchain.nvrtc import CompileOptions, KernelInfo
from astra_kernels.tools.toolchain.compiler import compile_source
from . import device_checks, device_state, draws
from .correctness import POISON_BYTE, Check, floor_verdict, fresh_outputs, timed_verdict, unchanged_verdict
from .device_checks import RangeTable, ResidentCase
from astra_kernels.tools.toolchain.device import Device, DeviceArena, DeviceBuffer, Kernel
from astra_kernels.tools.errors import (
    AstraError, CompileError, CompileTimeoutError, KernelNotFoundError, LaunchArgumentError, LaunchError,
    ToolchainError,
)
from .guards import GUARD_BYTES, GuardedBuffers
from .problem import Case, Problem
from .regimes import L2Regime
from astra_kernels.tools.toolchain.ceiling import copy_bandwidth, mix_bandwidth, mix_ratio
from astra_kernels.tools.toolchain.timing import (
    CapturedWork, Timing, fill_async, rotation_count, time_graph, time_stream,
)
from astra_kernels.tools.toolchain.targets import STATIC_SHARED_LIMIT

Status = Literal[
    "ok", "compile_error", "incorrect", "invalid", "launch_error", "crashed", "timeout",
    "compile_timeout",  # NVRTC ran past the worker's compile deadline; its process was killed
    "unrecorded",  # a replay (tools/measuring/replay.py) has no measurement of this candidate: nothing ran
    "lost",  # the cluster's worker running it was lost (its process or node, tools/cluster/): no verdict on it
    "toolchain_error",  # the compiler itself could not run (not the candidate's fault): never stored
]


@dataclass(frozen=True)
class LaunchShape:
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int = 0

    @property
    def threads(self) -> int:
        n = 1
        for d in self.block:
            n *= d
        return n


@dataclass
class EvaluationRequest:
    """A candidate kernel and what to do with it."""

    source: str
    kernel: str
    launch: LaunchShape
    problem: Problem
    options: CompileOptions = field(default_factory=CompileOptions)
    check: bool = True
    time: bool = True
    seeds: tuple[int, int] = (1, 2)
    replays: int = 10
    min_launches: int = 20
    stream_timing: bool = True
    input_layout: Literal["arena", "separate"] = "arena"
    pdl: bool = False  # launch as a programmatic dependent of the previous grid (tools/toolchain/pdl.py)
    l2: L2Regime = "cold"
    label: str = ""
    # A finalist's re-timing (runner.retime_finalists): round N of a fresh measurement of a
    # configuration already measured, keyed apart from it (results.evaluation_key) only when set.
    retime: int = 0


class EvaluationResult(BaseModel):
    """Everything measured about one candidate; `status` says how far it got."""

    status: Status
    message: str = ""
    label: str = ""
    kernel: str = ""
    device: str = ""
    arch: str = ""
    kernel_info: KernelInfo | None = None
    compile_seconds: float | None = None
    compile_cached: bool | None = None
    checks: list[Check] = Field(default_factory=list)
    timing: Timing | None = None
    stream_timing: Timing | None = None
    occupancy_blocks_per_sm: int | None = None
    bytes_moved: int = 0
    copy_bandwidth_gbs: float | None = None
    floor_us: float | None = None
    fraction_of_copy_bandwidth: float | None = None
    # The physical floor: bytes moved over the best streaming of the kernel's own read/write mix
    # on this device (tools/toolchain/ceiling.py), which a read-heavy kernel can beat the copy floor toward.
    mix: tuple[int, int] | None = None  # (READS, WRITES) of the probe
    mix_bandwidth_gbs: float | None = None
    mix_floor_us: float | None = None
    fraction_of_mix_bandwidth: float | None = None
    wall_seconds: float = 0.0
    # Where the wall time went, by phase (compile, check, time, floor: the floor's probes are
    # measured once per device and cached): a host cost that grows when several workers share a
    # machine shows up here, not in the GPU's times. Empty in recordings from before it was kept.
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    fatal: bool = False  # the worker's CUDA context can no longer be trusted
    # Where it was measured: the machine (a cluster's node) and its GPU there, as that node numbers
    # them; empty in recordings from before clusters. A time is only compared within one `device`.
    host: str = ""
    gpu: str = ""

    @property
    def correct(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


class _Buffers:
    """One full set of device buffers for a problem, in parameter order: its own allocations,
    or given ones (views into an arena)."""

    def __init__(self, problem: Problem, given: list[DeviceBuffer] | None = None):
        buffers = given if given is not None else [DeviceBuffer(p.nbytes) for p in problem.buffers]
        self.by_name: dict[str, DeviceBuffer] = {p.name: b for p, b in zip(problem.buffers, buffers)}

    def args(self, problem: Problem) -> list:
        return [self.by_name[p.name] if p.is_buffer else p.scalar() for p in problem.params]

    def close(self) -> None:
        for buf in self.by_name.values():
            buf.close()


def _draw(problem: Problem, seed: int) -> Callable[[], Case]:
    """The seeded draw, made (or taken from the host's cache) only when called: on the GPU, the
    checks need the host's copy only to upload it or for an output compared on the host."""
    return functools.partial(draws.seeded_case, problem, seed)


def _resident(device: Device, problem: Problem, seed: int) -> ResidentCase:
    """The seeded draw on the GPU (device_checks.py), drawn on the host only where the GPU lacks it."""
    return device_checks.on(device).resident(draws.case_key(problem, seed), problem, _draw(problem, seed))


def _run_case(device: Device, kernel: Kernel, request: EvaluationRequest, seed: int, resident: ResidentCase,
              guarded: GuardedBuffers) -> tuple[list[Check], dict[str, DeviceBuffer]]:
    """Launch once on a seeded draw (`resident`: it on the GPU), in `guarded`'s buffers (between
    guard bands, tools/measuring/guards.py, in the request's layout), and check it on the GPU
    (device_checks.py); return (checks, a device copy of each output as written). The caller
    closes the copies and the buffers."""
    problem = request.problem
    draw = _draw(problem, seed)
    gpu = device_checks.on(device)
    buffers = _Buffers(problem, guarded.buffers)
    kept: dict[str, DeviceBuffer] = {}
    try:
        for p in problem.buffers:
            if p.role in ("in", "inout"):
                buffers.by_name[p.name].copy_from(resident.inputs[p.name], p.nbytes)
            else:
                buffers.by_name[p.name].fill_bytes(POISON_BYTE)
        launch = request.launch
        device.launch(kernel, launch.grid, launch.block, buffers.args(problem), launch.shared_bytes,
                      pdl=request.pdl)
        device.synchronize()
        checks: list[Check] = []
        for p in problem.buffers:
            got = buffers.by_name[p.name]
            if p.role == "in":
                checks.append(unchanged_verdict(p.name, not gpu.differ(got, resident.inputs[p.name], p.nbytes)))
            else:
                kept[p.name] = DeviceBuffer(p.nbytes)
                kept[p.name].copy_from(got, p.nbytes)
                checks.append(gpu.compare_output(p, got, resident, draw, problem.tolerance(p.dtype)))
        if (bands := guarded.check()) is not None:
            checks.append(bands)
        return checks, kept
    except BaseException:
        _close(kept)
        raise


def _close(buffers: dict[str, DeviceBuffer] | None) -> None:
    for buffer in (buffers or {}).values():
        buffer.close()


def _check(device: Device, kernel: Kernel, request: EvaluationRequest, guard_bytes: int = GUARD_BYTES
           ) -> tuple[list[Check], dict[str, DeviceBuffer], list[ResidentCase]]:
    """Both seeded draws; returns the checks, the first draw's outputs (device copies, which the
    caller closes), which the timed launches (on that draw's inputs) must reproduce, and the two
    draws on the GPU. Both are on the GPU before the first launch, so a launch that writes into
    either is seen by the checksums after the second.

    The second draw runs in the first's buffers, at the same addresses, with new content and its
    outputs poisoned again: a kernel that keeps a result by address (returns early when it sees
    pointers it has served) leaves them unwritten, and fails there."""
    gpu = device_checks.on(device)
    first_seed, second_seed = request.seeds
    resident_a = _resident(device, request.problem, first_seed)
    resident_b = _resident(device, request.problem, second_seed)
    guarded = GuardedBuffers(request.problem.buffers, request.input_layout, guard_bytes)
    try:
        checks_a, out_a = _run_case(device, kernel, request, first_seed, resident_a, guarded)
    except BaseException:
        guarded.close()
        raise
    try:
        try:
            checks_b, out_b = _run_case(device, kernel, request, second_seed, resident_b, guarded)
        finally:
            guarded.close()
        try:
            nbytes = {p.name: p.nbytes for p in request.problem.buffers}
            host_draws = _draw(request.problem, first_seed), _draw(request.problem, second_seed)
            fresh = fresh_outputs(
                out_a,
                references_differ=lambda name: gpu.references_differ(resident_a, resident_b, name, *host_draws),
                outputs_same=lambda name: not gpu.differ(out_a[name], out_b[name], nbytes[name]))
            changed = device_checks.intact_check([resident_a, resident_b], gpu)
        finally:
            _close(out_b)
    except BaseException:
        _close(out_a)
        raise
    for c in checks_a:
        c.name = f"{c.name} (seed {first_seed})"
    first_passed = all(c.passed for c in checks_a)
    for c in checks_b:
        c.name = f"{c.name} (seed {second_seed})"
        if first_passed and not c.passed and c.name != f"guard bands (seed {second_seed})":
            c.detail += (f" (this draw ran at the same addresses as seed {first_seed}'s, which passed, with new "
                         "content: a kernel that keeps results by address fails here)")
    # a changed resident draw first: it is why the checks compared against it failed too
    return ([changed] if changed else []) + checks_a + checks_b + [fresh], out_a, [resident_a, resident_b]


def _rotating_sets(problem: Problem, count: int, layout: str) -> tuple[list[_Buffers], DeviceArena | None]:
    """`count` buffer sets, packed in one arena (as a framework's allocator would place them) or
    each buffer its own allocation."""
    if layout == "separate":
        return [_Buffers(problem) for _ in range(count)], None
    sizes = [p.nbytes for p in problem.buffers]
    arena = DeviceArena(sizes * count)
    n = len(sizes)
    return [_Buffers(problem, arena.buffers[i * n:(i + 1) * n]) for i in range(count)], arena


# The rotating sets hold this many distinct seeded draws (set i the draw i % count), fewer where
# there are fewer sets: the checks' two, then draws of further seeds. A kernel that memoises on a
# few input words, or on a hash of its input, finds other content from one set to the next, and
# each set's outputs are checked against its own draw's reference. Where the sets are few (a large
# shape: two sets of a 2.8 GB draw), they are the checks' two draws and cost nothing more; where
# they are many, the draws are small.
DISTINCT_DRAWS = 4
# From this many rotating sets (each then 16 MB or less), _time copies, fills and compares them a
# table of ranges at a time (device_checks.RangeTable): topk_softmax's few-token shapes rotate 4096
# sets, and a driver call and a synchronisation for each buffer of each set made an evaluation 1.2 s
# on an H200 (a sweep of 246 shapes: 70 minutes).
RANGES_FROM = 16
DRAW_STRIDE = 7919  # a further draw's seed: the first seed plus a multiple of this (a prime)
# Bytes every output of every rotating set is filled with before each replay: finite in every float
# type (0x3C3C is 0.0115 in bf16 and 1.06 in fp16, 0x3C is 1.5 in fp8 e4m3), so a kernel that skips
# work when its output holds values (not NaN) finds values there and is seen leaving them. Which
# one is seeded by the request, so no kernel can test for one fixed pattern.
FILL_BYTES = (0x3C, 0x3D, 0x3E, 0x41)


def timing_seeds(seeds: tuple[int, int], sets: int) -> list[int]:
    """The seeds of the draws the rotating sets hold: the checks' two first, then the first seed
    plus multiples of DRAW_STRIDE, DISTINCT_DRAWS in all or one per set where there are fewer."""
    count = max(1, min(sets, DISTINCT_DRAWS))
    chosen = list(dict.fromkeys(seeds))
    k = 1
    while len(chosen) < count:
        candidate = seeds[0] + DRAW_STRIDE * k
        if candidate not in chosen:
            chosen.append(candidate)
        k += 1
    return chosen[:count]


def request_draws(request: EvaluationRequest) -> list[tuple[Problem, int]]:
    """The seeded draws an evaluation of `request` uses: its checks' two, then its timing's
    (timing_seeds), as draws.prefetch takes them."""
    sets = rotation_count(request.problem.set_bytes, request.l2)
    seeds = dict.fromkeys([*request.seeds, *timing_seeds(request.seeds, sets)])
    return [(request.problem, seed) for seed in seeds]


def fill_byte(seeds: tuple[int, int]) -> int:
    """The byte the outputs are filled with before each replay (FILL_BYTES), chosen by the seeds."""
    return FILL_BYTES[(seeds[0] * 31 + seeds[1]) % len(FILL_BYTES)]


def _time(device: Device, kernel: Kernel, request: EvaluationRequest,
          checked: dict[str, DeviceBuffer] | None = None, drawn: list[ResidentCase] | None = None
          ) -> tuple[Timing, Timing | None, Check | None]:
    """Graph-replayed and stream timings over enough input sets to keep L2 cold (or over one set,
    left resident in L2 by the launch before, for `l2="warm"`).

    The sets hold distinct seeded draws (timing_seeds), and before every replay each set's outputs
    are filled with finite values (fill_byte): no replay starts with the last one's results in its
    outputs, so a kernel that returns early when its output is already written leaves the fill.
    Given the checked launch's outputs (device copies), every set's outputs must after the last
    replay hold its draw's correct outputs: the checked launch's bytes for the first draw, a
    comparison with the reference for the others (correctness.timed_verdict, on the GPU); the
    verdict comes back third, or the "resident draws" check if the timed launches changed a draw
    kept on the GPU (the ones timed, or those of `drawn`: the checks' two).
    """
    problem = request.problem
    sets_needed = rotation_count(problem.set_bytes, request.l2)
    launches = max(sets_needed, request.min_launches)
    gpu = device_checks.on(device)
    seeds = timing_seeds(request.seeds, sets_needed)
    # the checks' draws, checksummed after their launches: not looked up (and checksummed) again
    known = dict(zip(request.seeds, drawn or []))
    residents = [known.get(seed) or _resident(device, problem, seed) for seed in seeds]
    host_draws = [_draw(problem, seed) for seed in seeds]
    outs = [p for p in problem.buffers if p.role == "out"]
    sets, arena = _rotating_sets(problem, sets_needed, request.input_layout)
    fill: CapturedWork | None = None
    # many small sets: their copies, fills and comparisons each one launch over a table of ranges
    ranged = sets_needed >= RANGES_FROM
    out_table: RangeTable | None = None
    try:
        if ranged:
            with RangeTable([(b.by_name[p.name].ptr, residents[i % len(seeds)].inputs[p.name].ptr, p.nbytes)
                             for i, b in enumerate(sets) for p in problem.buffers if p.role in ("in", "inout")]) as t:
                gpu.copy_ranges(t)
            if checked is not None:
                with RangeTable([(b.by_name[p.name].ptr, p.nbytes) for b in sets for p in problem.buffers
                                 if p.role not in ("in", "inout")]) as t:
                    gpu.fill_ranges_async(t, POISON_BYTE)
                    device.synchronize()
            out_table = RangeTable([(b.by_name[p.name].ptr, p.nbytes) for b in sets for p in outs])
        else:
            for index, buffers in enumerate(sets):
                for p in problem.buffers:
                    if p.role in ("in", "inout"):
                        buffers.by_name[p.name].copy_from(residents[index % len(seeds)].inputs[p.name], p.nbytes)
                    elif checked is not None:
                        buffers.by_name[p.name].fill_bytes(POISON_BYTE)
        arg_lists = [b.args(problem) for b in sets]
        launch = request.launch
        byte = fill_byte(request.seeds)
        if outs:
            def refill() -> None:
                if out_table is not None:
                    gpu.fill_ranges_async(out_table, byte)
                else:
                    for b in sets:
                        for p in outs:
                            fill_async(device, b.by_name[p.name].ptr, byte, p.nbytes)
                if request.l2 == "cold":
                    gpu.evict_l2_async()  # the fill's dirty lines out of L2: a cold replay starts cold

            fill = CapturedWork(device, refill)

        if request.pdl:
            def enqueue(i: int) -> None:
                device.launch(kernel, launch.grid, launch.block, arg_lists[i % sets_needed], launch.shared_bytes,
                              pdl=True)
        else:  # the parameters packed once, each launch writing its set's pointers: 4096 launches
            # packed one by one were half of a few-token evaluation's host time (an H200, 2026-11-28)
            prepared = device.prepare(kernel, launch.grid, launch.block, arg_lists[0], launch.shared_bytes)
            pointers = [[a.ptr for a in args if isinstance(a, DeviceBuffer)] for args in arg_lists]

            def enqueue(i: int) -> None:
                prepared(pointers[i % sets_needed], device.stream)

        graph = time_graph(device, enqueue, launches=launches, input_sets=sets_needed,
                           replays=request.replays, before_replay=fill.launch if fill else None)
        if checked is None or not outs:
            stream = (time_stream(device, enqueue, launches=launches, input_sets=sets_needed)
                      if request.stream_timing else None)
            return graph, stream, None
        device.synchronize()  # the checks' copies run on the legacy stream, which does not wait for ours
        params = {p.name: p for p in outs}
        count = len(seeds)

        def reference_of(index: int, name: str) -> DeviceBuffer | None:
            """What is known correct for this set's draw: the checked launch's outputs for the first
            draw, the first set of the draw (judged before it) for the others."""
            if index % count == 0:
                return checked[name]
            return None if index < count else sets[index % count].by_name[name]

        if ranged:  # every set's comparison in one launch, looked up in the verdict's order
            keys = [(i, name) for i in range(len(sets)) for name in params if reference_of(i, name) is not None]
            with RangeTable([(sets[i].by_name[name].ptr, reference_of(i, name).ptr, params[name].nbytes)
                             for i, name in keys]) as t:
                differing = dict(zip(keys, gpu.ranges_differ(t)))

            def same(index: int, name: str, got: DeviceBuffer) -> bool:
                return differing.get((index, name)) is False
        else:
            def same(index: int, name: str, got: DeviceBuffer) -> bool:
                reference = reference_of(index, name)
                return reference is not None and not gpu.differ(got, reference, params[name].nbytes)

        verdict = timed_verdict(
            ({p.name: b.by_name[p.name] for p in outs} for b in sets), len(sets), same=same,
            judge=lambda index, name, got: gpu.compare_output(
                params[name], got, residents[index % count], host_draws[index % count],
                problem.tolerance(params[name].dtype)),
            draws=count)
        # stream timing after the verdict: its launches leave the outputs written, and the verdict
        # is about the graph's last replay, which started from the fill
        stream = (time_stream(device, enqueue, launches=launches, input_sets=sets_needed)
                  if request.stream_timing else None)
        watched = [r for i, r in enumerate(residents + list(drawn or [])) if all(r is not o for o in (residents + list(drawn or []))[:i])]
        verdict = device_checks.intact_check(watched, gpu) or verdict
        return graph, stream, verdict
    finally:
        if fill is not None:
            fill.close()
        if out_table is not None:
            out_table.close()
        for buffers in sets:
            buffers.close()
        if arena is not None:
            arena.close()


def evaluate(device: Device, request: EvaluationRequest, *, compile_timeout_s: float | None = None,
             guard_bytes: int = GUARD_BYTES) -> EvaluationResult:
    """Run the protocol; every failure becomes a result with a status, never an exception.

    `compile_timeout_s` compiles in a child process killed at that deadline (compiler_process.py);
    `guard_bytes=0` drops the guard bands, for memcheck's run (sanitizer.py), which needs buffers
    of exact size.
    """
    started = time.perf_counter()
    phases = _PhaseClock()
    checked, drawn = None, None  # the checked launch's outputs and the checks' draws, on the GPU
    result = EvaluationResult(
        status="ok", label=request.label, kernel=request.kernel, device=device.properties.name,
        arch=device.properties.arch, bytes_moved=request.problem.bytes_moved,
    )
    try:
        options = request.options
        if options.arch is None:
            options = options.model_copy(update={"arch": device.properties.arch})
        source = request.source
        if request.pdl:
            if not pdl.supported(options.arch):
                raise LaunchArgumentError(f"programmatic dependent launch needs sm_90 or newer, not {options.arch}")
            source = pdl.dependent_source(source, request.kernel)
        with phases("compile"):
            module = compile_source(source, options, timeout_s=compile_timeout_s)
        result.compile_seconds = module.compile_seconds
        result.compile_cached = module.cached
        result.kernel_info = module.kernel(request.kernel)
        kernel = device.load(module, request.kernel)
        # the module's __device__ variables as loaded, before any launch (device_state.py)
        variables = device_state.writable_globals(module.cubin)
        module_handle = getattr(kernel, "module", None)
        state_before = device_state.snapshot(module_handle, variables) if variables and module_handle else {}
        device.check_launch(kernel, request.launch.grid, request.launch.block, request.launch.shared_bytes)
        if request.launch.shared_bytes > STATIC_SHARED_LIMIT:
            device.set_dynamic_shared(kernel, request.launch.shared_bytes)
        result.occupancy_blocks_per_sm = device.occupancy(
            kernel, request.launch.threads, request.launch.shared_bytes
        )
        if request.check:
            with phases("check"):
                result.checks, checked, drawn = _check(device, kernel, request, guard_bytes)
            if not result.correct:
                failed = [c for c in result.checks if not c.passed]
                result.status = "incorrect"
                result.message = "; ".join(f"{c.name}: {c.detail}" for c in failed[:3])
                return result
        if request.time:
            with phases("time"):
                result.timing, result.stream_timing, timed = _time(device, kernel, request, checked, drawn)
            if timed is not None:
                result.checks.append(timed)
                if not timed.passed:  # the times stay, as evidence: they timed a kernel doing nothing
                    result.status, result.message = "incorrect", f"{timed.name}: {timed.detail}"
            problem = request.problem
            with phases("floor"):
                bandwidth = copy_bandwidth(device)
                result.copy_bandwidth_gbs = bandwidth / 1e9
                if problem.bytes_moved:  # the empty kernel's launch floor moves nothing: no mix to stream
                    result.floor_us = problem.bytes_moved / bandwidth * 1e6
                    result.fraction_of_copy_bandwidth = result.floor_us / result.timing.median_us
                    result.mix = mix_ratio(problem.read_bytes, problem.write_bytes)
                    mixed = mix_bandwidth(device, *result.mix)
                    result.mix_bandwidth_gbs = mixed / 1e9
                    result.mix_floor_us = problem.bytes_moved / mixed * 1e6
                    result.fraction_of_mix_bandwidth = result.mix_floor_us / result.timing.median_us
            # Cold L2 only: a warm set is read from L2, which an honest kernel may beat HBM's floor from.
            if request.l2 == "cold" and result.mix_floor_us:
                floor = floor_verdict(result.timing, result.mix_floor_us)
                if not floor.passed:
                    result.checks.append(floor)
                    if result.status == "ok":
                        result.status, result.message = "invalid", f"{floor.name}: {floor.detail}"
        if state_before and (request.check or request.time):
            state = device_state.state_verdict(state_before, device_state.snapshot(module_handle, variables))
            if not state.passed:
                result.checks.append(state)
                if result.status == "ok":
                    result.status, result.message = "incorrect", f"{state.name}: {state.detail}"
    except CompileTimeoutError as exc:
        result.status, result.message = "compile_timeout", str(exc)
    except CompileError as exc:
        result.status, result.message = "compile_error", str(exc)
    except (KernelNotFoundError, LaunchArgumentError) as exc:
        result.status, result.message = "invalid", str(exc)
    except LaunchError as exc:
        # A fault in a kernel is sticky and the context is done for; a launch or load the driver
        # refused leaves it usable, and the worker need not be replaced for it.
        result.status, result.message = "launch_error", str(exc)
        result.fatal = device.context_error() is not None
    except ToolchainError as exc:  # every candidate would fail the same way: the worker raises it
        result.status, result.message = "toolchain_error", str(exc)
    except AstraError as exc:
        result.status, result.message = "invalid", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in a case factory or here: report it, keep the worker honest
        result.status, result.fatal = "crashed", True
        result.message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
    finally:
        _close(checked)
        result.phase_seconds = phases.seconds
        result.wall_seconds = time.perf_counter() - started
    return result


class _PhaseClock:
    """Seconds per named phase of one evaluation: `with clock("check"):` times a block (a phase
    that raises is still counted, up to where it raised)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        since = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - since, 6)
