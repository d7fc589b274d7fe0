"""The templates' cache-hint and flat-grid parameters (docs/performance.md entries 12 and 13): every
load width builds, the hints reach the PTX, and a policy needs a GPU that has them."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.templating.template import Exclusion, Instance
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.nvrtc import _nvrtc_compile, key_and_flags

def ptx_of(request) -> str:
    """The PTX NVRTC makes of a request (the module keeps only the cubin)."""
    _, flags, _ = key_and_flags(request.source, request.options, "kernel.cu")
    ok, log, _, ptx = _nvrtc_compile(request.source, "kernel.cu", flags, request.options.headers)
    assert ok, log
    return ptx


NORM = {"ROW_THREADS": 128, "ROWS": 1, "ITEMS": 0, "PRELOAD_W": 0, "REG_CAP": 128, "CLUSTER": 1, "HINT": 1, "STATIC_ROW": 0}


@pytest.mark.parametrize("name", ["rmsnorm", "fused_add_rmsnorm"])
@pytest.mark.parametrize("vec, items, dtype", [(8, 0, "bf16"), (4, 4, "fp16"), (2, 8, "bf16"), (1, 0, "fp16")])
def test_every_load_width_carries_its_l2_policy(name, vec, items, dtype):
    folder = suite.load(name)
    threads = 4096 // vec // items if items else 128  # a held row fits its threads' register slots
    config = folder.template.point({**NORM, "VEC": vec, "ITEMS": items, "PRELOAD_W": int(items > 0), "ROW_THREADS": threads})
    request = suite.request(folder, "template", {"T": 16, "H": 4096}, dtype, config=config, arch="sm_90")
    module = compile_source(request.source, request.options, cache=False)
    assert not module.kernel(folder.template.kernel).resources.spills
    ptx = ptx_of(request)
    assert "createpolicy.fractional.L2::evict_last" in ptx and "L2::cache_hint" in ptx
    plain = suite.request(folder, "template", {"T": 16, "H": 4096}, dtype, config={**config, "HINT": 0}, arch="sm_90")
    assert "L2::cache_hint" not in ptx_of(plain)


@pytest.mark.parametrize("name", ["rmsnorm", "fused_add_rmsnorm"])
def test_no_policy_before_sm_80(name):
    folder = suite.load(name)
    env = suite.environment(folder.spec, {"T": 16, "H": 4096}, "bf16", "default", arch="sm_75")
    excluded = folder.template.instantiate(folder.template.point({**NORM, "VEC": 8}), env)
    assert isinstance(excluded, Exclusion) and "sm_80" in excluded.reason


SILU = {"THREADS": 128, "CHUNKS": 1, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 1, "STREAM": 1}


@pytest.mark.parametrize("static", [0, 1])
@pytest.mark.parametrize("vec, dtype", [(8, "bf16"), (4, "fp32"), (2, "fp16"), (1, "bf16")])
def test_silu_flat_grid_covers_every_vector_and_streams(vec, dtype, static):
    folder = suite.load("silu_and_mul")
    shape = {"T": 3, "D": 1000}
    config = {**SILU, "VEC": vec, "STATIC_D": static}
    instance = folder.template.instantiate(config, suite.environment(folder.spec, shape, dtype, "default"))
    assert isinstance(instance, Instance), instance
    vectors = 3 * 1000 // vec
    assert instance.grid[0] == -(-vectors // (128 * 2)) and instance.grid[1:] in ((), (1,), (1, 1))
    request = suite.request(folder, "template", shape, dtype, config=config, arch="sm_90")
    ptx = ptx_of(request)
    assert "ld.global.cs" in ptx and "st.global.cs" in ptx
    # an output vector's row: a 64-bit division by the row's vectors read at run time, a multiply
    # where the row length is compiled in (STATIC_D: what Inductor's kernel, compiled per shape, does)
    assert ("div.s64" in ptx) == (not static)
    # a flat grid sets neither rows nor chunks
    assert isinstance(folder.template.instantiate({**config, "CHUNKS": 2}, suite.environment(
        folder.spec, shape, dtype, "default")), Exclusion)
