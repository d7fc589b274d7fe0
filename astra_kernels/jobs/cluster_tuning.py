"""`astra tune --ray`: several kernels, each at all its shapes, over every GPU of a Ray cluster.

Each GPU kind of the cluster tunes every kernel for itself (a table is only ever the measurements
of one kind: tuned/<kind>/), its kernels and their shapes all at once on threads of this driver,
their evaluations queued for that kind's workers (tools/cluster/pool.py) and their compiles sent to
the cluster's CPUs as tasks. Every shape's search is the one a single GPU would run (the same
proposals in the same order), so the tables are the same up to the timing spread. This driver
alone writes the results stores: workers send back results, and each becomes a row here as it
arrives, so a re-run skips what is stored and a killed run resumes.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_kernels import suite
from astra_kernels.suite.tuned_tables import device_key
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.tools.cluster.compiling import RayCompileExecutor
from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.concurrency import map_in_threads
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.measuring.replay import recorded_devices
from astra_kernels.tools.search.runner import StoredEvaluator
from astra_kernels.tools.toolchain.compiler import compiling_with
from . import tuning


@dataclass(frozen=True)
class KernelJob:
    """One kernel to tune: its folder, shapes, dtype, variant and the shapes its table is verified at."""

    folder: suite.KernelFolder
    shapes: list[dict[str, int]]
    dtype: str
    variant: str = "default"
    verify: tuple[dict[str, int], ...] = ()
    recording: str | None = None  # a replay's: the recording of this kernel the workers answer from


def tune_on_cluster(pool: WorkerPool, jobs: list[KernelJob], stores: dict[str, ResultsStore], *,
                    compile_on_cluster: bool = True, starts: dict[tuple[str, str], DispatchTable] | None = None,
                    **options) -> dict[tuple[str, str], tuning.TuneReport]:
    """Tune every job on every GPU kind of `pool`; reports by (GPU kind, kernel). `stores`: each
    kernel's results store (by name); `starts`: by (GPU kind, kernel), the table whose picks that
    kind's search measures first (tuning.tune's `start`: the table shipped for that kind, say);
    `options`: tuning.tune's (strategy, budget, rounds, seed, sample, max_spill_bytes, l2). With
    `compile_on_cluster`, compiles are tasks on the cluster's CPUs (else this host's cores)."""
    # A replay tunes a kernel only on the GPU kinds its recording holds: on another, every
    # evaluation would be unrecorded (silu_and_mul's H200 recording beside rmsnorm's H100 one).
    held = {job.recording: set(recorded_devices(job.recording)) for job in jobs if job.recording}
    work = [(kind, job) for kind in pool.kinds for job in jobs if not job.recording or kind in held[job.recording]]

    def run(item) -> tuple[tuple[str, str], tuning.TuneReport]:
        kind, job = item
        view = pool.view(kind, job.recording)  # the workers hold every kernel's recording; its report names its own
        evaluator = StoredEvaluator(view, stores[job.folder.spec.name], run_id=f"tune-{job.folder.spec.name}")
        report = tuning.tune(job.folder, view, evaluator, shapes=job.shapes, dtype=job.dtype, variant=job.variant,
                             verify=list(job.verify), parallel=max(len(job.shapes), len(job.verify), 1),
                             start=(starts or {}).get((kind, job.folder.spec.name)), **options)
        return (kind, job.folder.spec.name), report

    def run_all() -> dict[tuple[str, str], tuning.TuneReport]:
        return dict(map_in_threads(run, work, len(work)))

    if compile_on_cluster:
        with compiling_with(RayCompileExecutor()):
            return run_all()
    return run_all()


def kind_folder(kind: str, kinds: list[str]) -> str:
    """A GPU kind's folder below out/KERNEL when a cluster has several `kinds`, named as the shipped
    tables name theirs (tuned/h200/) where no other kind of the cluster shares that name (an H100
    SXM beside an H100 PCIe), else the device's whole name made a path."""
    key = device_key(kind)
    if key and sum(device_key(k) == key for k in kinds) == 1:
        return key.lower()
    return "".join(c if c.isalnum() else "-" for c in kind.lower()).strip("-")
