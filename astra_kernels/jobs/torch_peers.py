"""A kernel's PyTorch peer measured by the project's protocol, inside the evaluation worker.

The bar for a tuned kernel is the faster of SGLang's kernel and what a user gets for free: the
same math in plain PyTorch, eager or under torch.compile. Such a number means something only
when taken like ours: the same seeded inputs checked against the same float64 reference and
tolerance, then CUDA-graph replay over rotating input sets that keep L2 cold (or one set, for the
warm regime), in the same process
and on the same GPU. `measure_peer` runs in the worker (EvaluationWorker.call), beside the
context our kernels use; PyTorch shares that primary context.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from astra_kernels.tools.measuring.correctness import Check, compare, unchanged
from astra_kernels.tools.measuring.draws import seeded_case
from astra_kernels.tools.toolchain.timing import Timing, rotation_count, time_torch_graph

from . import torch_tensors as peers
from astra_kernels import suite

MODES = ("eager", "compile")


class PeerResult(BaseModel):
    kernel: str
    label: str
    mode: str  # "eager" or "compile"; "exported" for an exported kernel timed the same way
    status: str  # "ok", "incorrect", "unavailable" (no PyTorch with CUDA), "failed"
    message: str = ""
    checks: list[Check] = Field(default_factory=list)
    timing: Timing | None = None
    compile_seconds: float | None = None
    torch_version: str = ""

    @property
    def median_us(self) -> float | None:
        return self.timing.median_us if self.status == "ok" and self.timing else None


def torch_cuda() -> str | None:
    """PyTorch's version when it is importable with CUDA, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__ if torch.cuda.is_available() else None


def measure_peer(device, kernel: str, shape: dict[str, int], dtype: str, variant: str = "default",
                 mode: str = "compile", l2: str = "cold", seed: int = 1, replays: int = 10) -> PeerResult:
    """Check the peer once against the reference, then time it in the `l2` regime (as
    EvaluationRequest.l2); `device` is the worker's Device (unused but for its context, which
    PyTorch shares)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    folder = suite.load(kernel)
    problem = suite.problem(folder, shape, dtype, variant)
    result = PeerResult(kernel=kernel, label=problem.label, mode=mode, status="ok")
    version = torch_cuda()
    if version is None:
        result.status, result.message = "unavailable", "PyTorch with CUDA is not installed here"
        return result
    result.torch_version = version
    import torch

    try:
        forward = suite.load_peer(kernel).forward
        case = seeded_case(problem, seed)  # shared with the evaluations of this shape
        first, scalars = peers.arguments(problem, case.inputs, "cuda")
        if mode == "compile":
            started = time.perf_counter()
            forward = compiled(kernel)
            forward({n: t.clone() for n, t in first.items()}, scalars, variant)  # compiles, on a copy
            torch.cuda.synchronize()
            result.compile_seconds = time.perf_counter() - started

        _check_and_time(result, problem, forward, case, first, scalars, variant, l2, replays)
    except Exception as exc:  # a peer that does not compile or run is a result, not a crash
        result.status, result.message = "failed", f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        torch.cuda.empty_cache()
    return result


def compiled(kernel: str):
    """The kernel's peer under torch.compile as measure_peer times it and build_peer builds it ahead
    (one owner, so the two compile the same graph under the same settings and share a cache entry).
    Each shape is a fresh compile: without a reset Dynamo counts every shape as a recompilation of
    the same function and, past its limit, silently runs it eagerly."""
    import torch

    torch._dynamo.reset()
    return torch.compile(suite.load_peer(kernel).forward, fullgraph=True, dynamic=False)


def build_peer(kernel: str, shape: dict[str, int], dtype: str, variant: str = "default", device_index: int = 0) -> None:
    """Compile the peer at `shape` and run it once on zeros of its inputs, in this process, on GPU
    `device_index`: Inductor's FX-graph cache and Triton's kernel cache, on disk and shared by the
    user's processes, then hold what measure_peer's compile of the same shape builds, and it loads
    that instead of building it again (peer_builds.py runs this in child processes ahead of a
    benchmark). The cache is keyed by the graph, its inputs' shapes, strides and dtypes, and the
    compiler's settings, never by the values, so zeros build what the seeded draws would.

    The launch configurations Inductor picks by timing a Triton kernel's candidates at its first
    call are not kept (`autotune_local_cache` off, which the cache key leaves out): picked here, on
    a GPU the other children share, they would be a busy GPU's choice; the worker times the
    candidates itself at its first call, on its idle GPU, as it did before builds ahead."""
    import torch
    import torch._inductor.config as inductor

    inductor.autotune_local_cache = False
    torch.cuda.set_device(device_index)
    problem = suite.problem(suite.load(kernel), shape, dtype, variant)
    tensors = {p.name: torch.zeros(p.shape, dtype=peers.torch_dtype(p.dtype), device="cuda")
               for p in problem.buffers if p.role != "out"}
    compiled(kernel)(tensors, peers.scalars(problem), variant)
    torch.cuda.synchronize()


def measure_exported(device, folder: str, shape: dict[str, int], l2: str = "cold", seed: int = 1,
                     replays: int = 10) -> PeerResult:
    """An exported kernel (`astra export`'s folder), called as a user calls it (its Python callable
    on torch tensors, outputs allocated per call), under the peers' own checks and timing. Beside
    measure_peer's, a kernel and its peer timed by one harness: where the worker's time of a
    kernel and the peer's differ, this says how much is the harness's (bench/harness_parity.py).
    The dtype and variant are the export's table's."""
    from astra_kernels.runtime.exported_kernel import load_callable

    try:  # an export that does not load is a result too, so a batch of them goes on
        kernel = load_callable(folder)
        spec = kernel.spec
        problem = suite.problem(suite.load(spec.name), shape, kernel.table.dtype, kernel.table.variant)
    except Exception as exc:
        return PeerResult(kernel=str(folder), label=str(folder), mode="exported", status="failed",
                          message=f"{type(exc).__name__}: {exc}"[:2000])
    variant = kernel.table.variant
    result = PeerResult(kernel=spec.name, label=problem.label, mode="exported", status="ok")
    version = torch_cuda()
    if version is None:
        result.status, result.message = "unavailable", "PyTorch with CUDA is not installed here"
        return result
    result.torch_version = version
    import torch

    outputs = [p for p in problem.buffers if p.role == "out"]
    given = set(kernel.given)

    def forward(tensors: dict, scalars: dict, variant: str) -> dict:
        made = {p.name: torch.empty(p.shape, dtype=peers.torch_dtype(p.dtype), device="cuda") for p in outputs}
        kernel(*[tensors.get(a.name, made.get(a.name)) for a in spec.args if a.role != "scalar"],
               **{name: scalars[name] for name in given})
        return made

    try:
        case = seeded_case(problem, seed)
        first, scalars = peers.arguments(problem, case.inputs, "cuda")
        _check_and_time(result, problem, forward, case, first, scalars, variant, l2, replays)
    except Exception as exc:
        result.status, result.message = "failed", f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        torch.cuda.empty_cache()
    return result


def _check_and_time(result: PeerResult, problem, forward, case, first: dict, scalars: dict, variant: str, l2: str,
                    replays: int) -> None:
    """Check `forward` once against the reference, then time it as CUDA-graph replay in the `l2`
    regime, into `result`."""
    result.checks = _check(problem, forward, case, scalars, variant)
    if not all(c.passed for c in result.checks):
        failed = [c for c in result.checks if not c.passed]
        result.status = "incorrect"
        result.message = "; ".join(f"{c.name}: {c.detail}" for c in failed[:3])
        return
    count = rotation_count(problem.set_bytes, l2)
    calls = RotatingCalls(forward, [{name: t.clone() for name, t in first.items()} for _ in range(count)],
                          scalars, variant)
    try:
        result.timing = time_torch_graph(calls, launches=max(count, 20), input_sets=count, replays=replays,
                                         before_replay=_l2_eviction() if l2 == "cold" else None)
    finally:
        calls.release()


def _l2_eviction(device: str = "cuda", l2_bytes: int | None = None):
    """What a cold replay of ours is preceded by (DeviceChecks.evict_l2_async: a read of twice L2's
    size), for a peer's replays: each then starts with L2 holding only clean lines, as ours does,
    rather than the last replay's dirty outputs. Without it a peer was timed in other conditions
    than ours (its replays began with the writes of the replay before still to go back to memory)."""
    import torch

    l2_bytes = l2_bytes or torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    scratch = torch.zeros(2 * l2_bytes // 4, dtype=torch.float32, device=device)
    sink = torch.empty((), dtype=torch.float32, device=device)
    return lambda: torch.sum(scratch, dim=0, out=sink)


class RotatingCalls:
    """`forward` called on input set i % count at launch i, its outputs rotating with the inputs as
    the worker's arena rotates them: launch i writes the memory launch i - count wrote.

    A peer allocates its outputs itself (from the graph's private pool during capture), so where
    they land is the caching allocator's choice, which reuses the block freed last. Launch i - count's
    outputs are released just before launch i, so launch i's are allocated into them; those bytes
    were last touched `count` launches (at least the cold rotation's bytes) ago. Keeping only the
    first `count` launches' outputs and dropping the rest, as this harness once did, let every later
    launch write the block the launch before it had written: still in L2 wherever the outputs fit
    there, so at the shapes with fewer sets than launches a peer wrote warm while ours wrote cold
    (silu_and_mul 128x28672 on an H100: 8%, docs/performance.md entry 19).

    Exact for a peer whose call allocates only its outputs (torch.compile's fused kernels, one
    output or several); an eager peer's temporaries are allocated first and may take the released
    blocks, so its outputs then land where an earlier launch's temporaries were.
    """

    def __init__(self, forward, sets: list[dict], scalars: dict, variant: str):
        self.forward, self.sets, self.scalars, self.variant = forward, sets, scalars, variant
        self.held: list[object] = [None] * len(sets)

    def __call__(self, i: int) -> object:
        slot = i % len(self.sets)
        self.held[slot] = None  # back to the pool first, so this launch's outputs take its place
        self.held[slot] = self.forward(self.sets[slot], self.scalars, self.variant)
        return self.held[slot]

    def release(self) -> None:
        self.sets, self.held = [], []


def _check(problem, forward, case, scalars, variant) -> list[Check]:
    """Outputs and in-place arguments against the float64 reference; inputs left unchanged."""
    tensors, _ = peers.arguments(problem, case.inputs, "cuda")
    got = peers.results(problem, tensors, forward(tensors, scalars, variant))
    return [unchanged(p.name, case.inputs[p.name], peers.to_numpy(tensors[p.name])) if p.role == "in"
            else compare(p.name, got[p.name], case.expected[p.name], problem.tolerance(p.dtype))
            for p in problem.buffers]
