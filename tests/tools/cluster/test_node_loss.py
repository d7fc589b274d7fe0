"""A node removed mid-run: a two-node local cluster (a second raylet on this machine), one stand-in
GPU on the head and two on the other node. Its workers are lost with it, no replacement finds a free
GPU, and what they held is asked again of the head's worker: the run ends with every evaluation stored."""

from __future__ import annotations

import threading
import time

import pytest

from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.measuring.results import ResultsStore

from support import cluster_replay as replay

ray = replay.need_ray()


@pytest.fixture
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
    node = cluster.add_node(num_cpus=1, num_gpus=2)
    try:
        with connected(cluster.address):
            cluster.wait_for_nodes()
            yield cluster, node
    finally:
        cluster.shutdown()


def test_a_lost_node_s_work_goes_to_the_others(two_nodes, tmp_path):
    cluster, node = two_nodes
    _, rows_one = replay.one_worker_run(tmp_path / "one.sqlite")
    done: dict = {}
    with WorkerPool(3, recordings=[replay.recording()], pace=10.0, start_timeout_s=20) as pool, \
            ResultsStore(tmp_path / "r.sqlite") as store:
        assert len({s.device["pid"] for s in pool.slots}) == 3
        view = pool.view("NVIDIA H200")
        thread = threading.Thread(target=lambda: done.update(report=replay.tune(view, store, parallel=3)))
        thread.start()
        deadline = time.monotonic() + 120
        while sum(s["done"] for s in pool.status()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.remove_node(node)
        thread.join(600)
        assert not thread.is_alive()
        report = done["report"]
        assert [s.label for s in report.shapes] == [replay.FOLDER.spec.label(s) for s in replay.SHAPES]
        deadline = time.monotonic() + 120
        while pool.starting and time.monotonic() < deadline:  # the replacements' start timeouts
            time.sleep(0.1)
        assert len(pool.live()) == 1  # the head's worker; the node's two found no GPU to restart on
        assert sum("no replacement" in line for line in pool.lost) == 2, pool.lost
        # what the lost node held was asked again of the head's worker: nothing is missing
        assert replay.rows(store) == rows_one and store.count(status="lost") == 0
