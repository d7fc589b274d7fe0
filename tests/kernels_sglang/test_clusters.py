"""Rows split over thread-block clusters (the norm templates' CLUSTER): offered only where
clusters exist, launched as whole clusters, and built as cluster kernels."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.templating.template import Exclusion, Instance

NORMS = ["rmsnorm", "fused_add_rmsnorm"]
# (read as each template reads it: template.point sets a parameter only one norm has at its default)
SPLIT = {"ROW_THREADS": 64, "ROWS": 1, "VEC": 8, "ITEMS": 2, "PRELOAD_W": 0, "REG_CAP": 128, "CLUSTER": 4, "HINT": 0, "STATIC_ROW": 0}


@pytest.mark.parametrize("name", NORMS)
def test_split_rows_launch_whole_clusters_on_hopper(name):
    folder = suite.load(name)
    env = suite.environment(folder.spec, {"T": 16, "H": 4096}, "bf16", "default", arch="sm_90")
    instance = folder.template.instantiate(folder.template.point(SPLIT), env)
    assert isinstance(instance, Instance), instance
    assert instance.grid == (16 * 4,) and instance.block == (64,)


@pytest.mark.parametrize("name", NORMS)
def test_no_cluster_configuration_before_sm_90(name):
    folder = suite.load(name)
    env = suite.environment(folder.spec, {"T": 16, "H": 4096}, "bf16", "default", arch="sm_80")
    excluded = folder.template.instantiate(folder.template.point(SPLIT), env)
    assert isinstance(excluded, Exclusion) and "sm_90" in excluded.reason
    runs = [c for c in folder.template.all_configs() if isinstance(folder.template.instantiate(c, env), Instance)]
    assert runs and all(c["CLUSTER"] == 1 for c in runs)


@pytest.mark.parametrize("name", NORMS)
def test_split_needs_a_warp_of_vectors_per_cta(name):
    folder = suite.load(name)
    env = suite.environment(folder.spec, {"T": 1, "H": 1000}, "bf16", "default", arch="sm_90")
    excluded = folder.template.instantiate(folder.template.point({**SPLIT, "CLUSTER": 8}), env)  # 125 vectors over 8 CTAs
    assert isinstance(excluded, Exclusion) and "at least a warp" in excluded.reason


@pytest.mark.parametrize("name", NORMS)
def test_cluster_kernel_compiles_with_distributed_shared_memory(name):
    folder = suite.load(name)
    request = suite.request(folder, "template", {"T": 16, "H": 4096}, "bf16", config=folder.template.point(SPLIT),
                            arch="sm_90")
    module = compile_source(request.source, request.options, cache=False)
    info = module.kernel(folder.template.kernel)
    assert not info.resources.spills and 0 < info.resources.registers <= 128
    assert info.resources.shared_bytes >= 4  # the CTA's partial sum that the cluster reads
    assert module.cubin
