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

import dataclasses

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


def tune_on_cluster(pool: WorkerPool, requests: list[tuning.TuneRequest], stores: dict[str, ResultsStore], *,
                    recordings: dict[str, str] | None = None, compile_on_cluster: bool = True,
                    starts: dict[tuple[str, str], DispatchTable] | None = None,
                    ontos: dict[tuple[str, str], DispatchTable] | None = None
                    ) -> dict[tuple[str, str], tuning.TuneReport]:
    """Tune every request on every GPU kind of `pool`; reports by (GPU kind, kernel). `stores`: each
    kernel's results store (by name); `recordings`: a replay's, each kernel's recording (by name)
    the workers answer it from; `starts`: by (GPU kind, kernel), the table whose picks that kind's
    search measures first where the request names none (the table shipped for that kind, say);
    `ontos`: by (GPU kind, kernel), the table that kind's table is tuned onto where the request names
    none (TuneRequest.onto).
    With `compile_on_cluster`, compiles are tasks on the cluster's CPUs (else this host's cores)."""
    # A replay tunes a kernel only on the GPU kinds its recording holds: on another, every
    # evaluation would be unrecorded (silu_and_mul's H200 recording beside rmsnorm's H100 one).
    recordings = recordings or {}
    held = {path: set(recorded_devices(path)) for path in recordings.values()}
    work = [(kind, request) for kind in pool.kinds for request in requests
            if (path := recordings.get(request.folder.spec.name)) is None or kind in held[path]]

    def run(item) -> tuple[tuple[str, str], tuning.TuneReport]:
        kind, request = item
        name = request.folder.spec.name
        view = pool.view(kind, recordings.get(name))  # the workers hold every kernel's recording; its report names its own
        evaluator = StoredEvaluator(view, stores[name], run_id=f"tune-{name}")
        if request.start is None and (kind, name) in (starts or {}):
            request = dataclasses.replace(request, start=starts[(kind, name)])
        if request.onto is None and (kind, name) in (ontos or {}):
            request = dataclasses.replace(request, onto=ontos[(kind, name)])
        report = tuning.tune(request, view, evaluator, parallel=max(len(request.shapes), len(request.verify), 1))
        return (kind, name), report

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
