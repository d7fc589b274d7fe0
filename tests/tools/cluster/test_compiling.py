"""Compiles as Ray tasks: compile_many inside `compiling_with(RayCompileExecutor())` gives what it
gives on this host's processes, errors included, and keeps every module in the driver's cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_kernels.tools.cluster.compiling import RayCompileExecutor
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.toolchain.compile_cache import CompileCache
from astra_kernels.tools.toolchain.compiler import compile_many, compiling_with
from astra_kernels.tools.toolchain.nvrtc import CompileOptions

from support import cluster_replay

ray = cluster_replay.need_ray()

SCALE = (Path(__file__).parents[2] / "support" / "cuda" / "scale_bf16.cu").read_text()


@pytest.fixture(scope="module")
def cluster():
    with connected(None, num_cpus=2) as resources:
        yield resources


def test_compiles_on_the_cluster_equal_compiles_here(cluster, tmp_path):
    variants = [(SCALE, CompileOptions(defines={"SCALE_THREADS": t, "SCALE_BIAS": "0.5f"})) for t in (64, 128, 256)]
    variants.append(("this is not CUDA", CompileOptions()))
    here = compile_many(variants, cache=False, workers=2)
    cache = CompileCache(tmp_path / "cache")
    with compiling_with(RayCompileExecutor()):
        there = compile_many(variants, cache=cache)
    assert [o.module.cubin if o.module else None for o in there] == [o.module.cubin if o.module else None for o in here]
    assert there[-1].module is None and there[-1].error_type == "CompileError" and "line" in there[-1].error
    assert [o.module.kernels["scale_bf16"].resources for o in there[:3]] == [
        o.module.kernels["scale_bf16"].resources for o in here[:3]]
    # the driver kept each module: without the cluster, the cache answers them all
    again = compile_many(variants[:3], cache=cache, workers=1)
    assert all(o.module is not None and o.module.cached for o in again)
