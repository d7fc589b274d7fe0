"""A GPU worker holds a CPU of its node (pool.CPUS_PER_GPU_WORKER), so that Ray's compile tasks,
one CPU each, never take every core while the GPUs measure; a replay worker holds none."""

from __future__ import annotations

import pytest

from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.errors import WorkerError

from support import cluster_replay as replay

ray = replay.need_ray()


def test_a_gpu_worker_needs_a_free_cpu_and_a_replay_worker_does_not():
    with connected(None, num_gpus=1, num_cpus=0):
        # the GPU is free, no CPU is: the GPU worker is never placed, and the error says why
        with pytest.raises(WorkerError, match=r"not all placed within 5 s \(each worker takes 1 GPU and 1 CPU of one node: too few free\?\)"):
            WorkerPool(1, start_timeout_s=5)
        # the same cluster places a replay worker (on its GPU, without a CPU) and it answers
        with WorkerPool(1, recordings=[replay.recording()]) as pool:
            assert [s["state"] for s in pool.status()] == ["idle"]
            assert ray.available_resources().get("GPU", 0) == 0
