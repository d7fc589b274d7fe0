"""What the cluster tests share: Ray (or a skip naming how to install it), a local cluster whose
GPUs are stand-ins, and a one-worker run of the same tuning to compare a cluster's with.

The stand-in GPUs answer from silu_and_mul's shipped H200 recording (RecordedWorker), so the
tables a cluster run writes can be compared with a single worker's, row for row.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from astra_kernels.jobs import tuning
from astra_kernels import suite
from astra_kernels.suite import recordings
from astra_kernels.tools.measuring.replay import RecordedWorker
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import StoredEvaluator

KERNEL = "silu_and_mul"
FOLDER = suite.load(KERNEL)
SHAPES = FOLDER.spec.shapes["astra"][:3]


def _recorded_configs(per_shape: int = 12) -> list[dict[str, int]]:
    """The first configurations the recording measured at each of SHAPES: a space in which most
    evaluations have a recorded answer (a random sample of the 2160 would have almost none)."""
    path = recordings.resolve("recorded", KERNEL)
    with gzip.open(path, "rb") as packed, tempfile.NamedTemporaryFile(suffix=".sqlite") as copy:
        shutil.copyfileobj(packed, copy)
        copy.flush()
        with ResultsStore(copy.name, read_only=True) as store:
            found = {}
            for shape in SHAPES:
                for row in store.rows(kernel=KERNEL, which="template", shape=shape)[:per_shape]:
                    found.setdefault(json.dumps(row["config"], sort_keys=True), row["config"])
    return list(found.values())


# Every candidate, in the space's order: the search proposes the same configurations whatever any
# one evaluation answered, so a run that lost one and a re-run of it end where an uninterrupted run does.
OPTIONS = dict(strategy="exhaustive", configs=_recorded_configs())
REQUEST = tuning.TuneRequest(FOLDER, SHAPES, "bf16", verify=SHAPES, **OPTIONS)


def need_ray():
    return pytest.importorskip("ray", reason="the cluster tests need Ray: pip install 'astra-kernels[ray]'")


def recording() -> str:
    return str(recordings.resolve("recorded", KERNEL))


def tune(worker, store: ResultsStore, parallel: int = 1) -> tuning.TuneReport:
    return tuning.tune(REQUEST, worker, StoredEvaluator(worker, store, run_id=f"tune-{KERNEL}"), parallel=parallel)


def one_worker_run(path: Path) -> tuple[tuning.TuneReport, dict]:
    """The same tuning with one local worker (no Ray) into a fresh store: the report and the rows."""
    with RecordedWorker(recording()) as worker, ResultsStore(path) as store:
        return tune(worker, store), rows(store)


def rows(store: ResultsStore) -> dict:
    """The store by key: what was measured, less where (a cluster's rows name their host and GPU)."""
    found = {}
    for row in store.rows():
        result = {k: v for k, v in row["result"].items() if k not in ("host", "gpu")}
        found[row["key"]] = (row["status"], row["median_us"], row["which"], json.dumps(result, sort_keys=True))
    return found


def comparable(report: tuning.TuneReport, *, reuse: bool = True) -> dict:
    """The report less its dates and wall times (and, with reuse=False, which trials a store answered)."""
    data = json.loads(report.model_dump_json())
    data.pop("date")
    data.pop("seconds")
    if data.get("dispatch"):
        data["dispatch"].pop("tuned_date")  # the run's date, where no recording gave one
    for shape in data["shapes"]:
        shape["search"].pop("seconds")
        if not reuse:
            for trial in shape["search"]["trials"]:
                trial.pop("reused")
    return data
