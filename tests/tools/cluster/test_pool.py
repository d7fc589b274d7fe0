"""The pool's own contract: closing it stops every evaluation waiting on it at once (a Ctrl-C's
path: the threads still searching end instead of running out their budgets)."""

from __future__ import annotations

import threading
import time

import pytest

from astra_kernels.jobs.tuning import _Requests
from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.errors import WorkerError
from astra_kernels.tools.search.hardware import limits_for

from support import cluster_replay as replay

ray = replay.need_ray()


@pytest.fixture(scope="module")
def cluster():
    with connected(None, num_gpus=1, num_cpus=2) as resources:
        yield resources


def test_closing_the_pool_stops_what_waits_on_it(cluster):
    baseline = _Requests(replay.FOLDER, "bf16", "default", limits_for("sm_90", None, None)).request(
        "baseline", replay.SHAPES[0])
    raised: list = []

    def evaluate(view):
        try:
            view.evaluate(baseline)
        except WorkerError as exc:
            raised.append(str(exc))

    with WorkerPool(1, recordings=[replay.recording()], pace=600.0) as pool:  # a 60 s answer
        view = pool.view("NVIDIA H200")
        threads = [threading.Thread(target=evaluate, args=(view,)) for _ in range(2)]  # one runs, one waits
        for thread in threads:
            thread.start()
        while not any(s["state"] == "busy" for s in pool.status()):
            time.sleep(0.05)
        started = time.monotonic()
        pool.close()
        for thread in threads:
            thread.join(30)
        assert not any(t.is_alive() for t in threads) and time.monotonic() - started < 30
    assert raised == ["the cluster's workers were stopped"] * 2


def test_no_gpu_in_the_cluster_is_one_line(cluster):
    with pytest.raises(WorkerError, match="no GPU to put an evaluation worker on"):
        WorkerPool(0)


def test_replay_workers_draw_nothing_so_nothing_waits_for_one(cluster):
    """A GPU worker draws a problem's inputs and reference the first time it meets it, and the pool
    sends the problem back to it (test_matching.py); a replay worker draws nothing, so its
    evaluations go to whichever is idle and no problem is booked as drawn anywhere."""
    requests = _Requests(replay.FOLDER, "bf16", "default", limits_for("sm_90", None, None))
    first, second = (requests.request("baseline", shape) for shape in replay.SHAPES[:2])
    with WorkerPool(2, recordings=[replay.recording()], gpus_per_worker=0.5) as pool:
        view = pool.view("NVIDIA H200")
        for request in (first, second, second, first):
            assert view.evaluate(request).status == "ok"
        assert [slot.drawn for slot in pool.slots] == [set(), set()]
        assert sum(slot.done for slot in pool.slots) == 4
