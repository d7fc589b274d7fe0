"""The PDL version of a kernel: the prologue lands at the top of the named kernel's body only, the
result compiles for sm_90 (griddepcontrol) and still for sm_80 (guarded), and the results store
tells a PDL measurement from a plain one while plain keys stay what they were."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.toolchain import pdl
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.nvrtc import _nvrtc_compile, key_and_flags
from astra_kernels.tools.measuring.results import evaluation_key

TWO = r"""
extern "C" __global__ void __launch_bounds__(128, 2) first(float* x) { x[0] = 1.f; }
extern "C" __global__ void second(float* __restrict__ y,
                                  int n /* (not a body) */)
{
    if (n) y[0] = 2.f;
}
"""


def test_the_prologue_opens_the_named_kernel_only():
    out = pdl.dependent_source(TWO, "second")
    assert out.count("griddepcontrol.wait") == 1
    body = out.index("int n /* (not a body) */)")
    assert body < out.index("griddepcontrol.launch_dependents") < out.index("griddepcontrol.wait") < out.index("if (n)")
    assert out.index("x[0] = 1.f") < body  # first() untouched
    with pytest.raises(pdl.PdlError, match="no definition of __global__ third"):
        pdl.dependent_source(TWO, "third")


@pytest.mark.parametrize("kernel", ["silu_and_mul", "rmsnorm", "fused_add_rmsnorm", "merge_attn_states"])
@pytest.mark.parametrize("which", ["baseline", "template"])
def test_suite_kernels_compile_pdl_ready(kernel, which):
    folder = suite.load(kernel)
    shape = (folder.spec.shapes.get("astra") or folder.spec.shapes["serving"])[0]
    request = suite.request(folder, which, shape, "bf16", "default", None, sms=132, arch="sm_90")
    source = pdl.dependent_source(request.source, request.kernel)
    for arch in ("sm_90", "sm_80"):
        module = compile_source(source, request.options.model_copy(update={"arch": arch}))
        assert module.kernel(request.kernel).resources.registers > 0
    _key, flags, _arch = key_and_flags(source, request.options.model_copy(update={"arch": "sm_90"}), "k.cu")
    ok, log, _cubin, ptx = _nvrtc_compile(source, "k.cu", flags, request.options.headers)
    assert ok, log
    assert "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx


def test_pdl_measurements_key_apart_and_plain_keys_do_not_move():
    folder = suite.load("rmsnorm")
    request = suite.request(folder, "baseline", {"T": 1, "H": 4096}, "bf16", "default", None, sms=132, arch="sm_90")
    plain = evaluation_key(request, "NVIDIA H200")
    request.pdl = True
    assert evaluation_key(request, "NVIDIA H200") != plain
    request.pdl = False
    assert evaluation_key(request, "NVIDIA H200") == plain


@pytest.mark.parametrize("arch, ok", [("sm_90", True), ("sm_90a", True), ("sm_100", True), ("sm_89", False), ("", False)])
def test_supported(arch, ok):
    assert pdl.supported(arch) is ok
