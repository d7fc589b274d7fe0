"""NVRTC compilation without a GPU: resources, errors, the cache and parallel compiles."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_many, compile_source
from astra_kernels.tools.toolchain.compile_cache import CompileCache
from astra_kernels.tools.errors import CompileError, KernelNotFoundError, UnknownArchError

SCALE = (Path(__file__).parents[2] / "support" / "cuda" / "scale_bf16.cu").read_text()
DEFINES = {"SCALE_THREADS": 256, "SCALE_BIAS": "0.5f"}

SPILLER = r"""
extern "C" __global__ void spiller(const float* x, float* y, int n) {
    float acc[96];
    #pragma unroll
    for (int j = 0; j < 96; ++j) acc[j] = x[j * n + threadIdx.x];
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < 96; ++j) s += acc[j] * acc[(j * 7) % 96];
    y[threadIdx.x] = s;
}
"""

SHARED = r"""
extern "C" __global__ void tile(const float* x, float* y) {
    __shared__ float t[1024];
    t[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = t[1023 - threadIdx.x];
}
"""


def test_bf16_kernel_compiles_offline_with_resources(tmp_path):
    module = compile_source(SCALE, CompileOptions(arch="sm_90", defines=DEFINES), cache=False)
    assert module.arch == "sm_90"
    assert module.cubin[:4] == b"\x7fELF"
    info = module.kernel("scale_bf16")
    assert 0 < info.resources.registers <= 255
    assert [p.size for p in info.params] == [8, 8, 4, 4]
    assert not info.resources.spills


def test_shared_memory_and_registers_reported():
    info = compile_source(SHARED, CompileOptions(arch="sm_80"), cache=False).kernel("tile")
    assert info.resources.shared_bytes == 4096
    assert info.resources.barriers == 1


def test_register_cap_causes_reported_spills():
    free = compile_source(SPILLER, CompileOptions(arch="sm_90"), cache=False).kernel("spiller")
    capped = compile_source(
        SPILLER, CompileOptions(arch="sm_90", max_registers=32), cache=False
    ).kernel("spiller")
    assert capped.resources.registers <= 32
    assert capped.resources.spills and not free.resources.spills


def test_defines_change_the_binary():
    a = compile_source(SCALE, CompileOptions(arch="sm_90", defines=DEFINES), cache=False)
    b = compile_source(
        SCALE, CompileOptions(arch="sm_90", defines={**DEFINES, "SCALE_BIAS": "2.0f"}), cache=False
    )
    assert a.cubin != b.cubin
    assert "-DSCALE_BIAS=0.5f" in a.options and "--use_fast_math" not in a.options
    fast = CompileOptions(arch="sm_90", fast_math=True, defines=DEFINES)
    assert "--use_fast_math" in fast.nvrtc_flags("sm_90")


def test_compile_error_names_the_line():
    broken = SCALE.replace("__float2bfloat16(", "__float2bfloat16_typo(")
    with pytest.raises(CompileError) as info:
        compile_source(broken, CompileOptions(arch="sm_90", defines=DEFINES), cache=False)
    err = info.value
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "_typo" in text)
    assert f"line {line}" in str(err)
    assert "__float2bfloat16_typo" in err.log
    assert any(d.line == line and d.severity == "error" for d in err.diagnostics)
    assert ">" in str(err)  # the excerpt marks the failing line


def test_missing_define_is_a_compile_error():
    with pytest.raises(CompileError, match="SCALE_THREADS|SCALE_BIAS"):
        compile_source(SCALE, CompileOptions(arch="sm_90"), cache=False)


def test_unknown_kernel_name_lists_the_real_ones():
    module = compile_source(SCALE, CompileOptions(arch="sm_90", defines=DEFINES), cache=False)
    with pytest.raises(KernelNotFoundError, match="scale_bf16"):
        module.kernel("scale_fp16")


@pytest.mark.parametrize("arch", ["sm_99", "sm_9", "banana", "compute_90"])
def test_unknown_arch(arch):
    with pytest.raises(UnknownArchError):
        compile_source(SCALE, CompileOptions(arch=arch, defines=DEFINES), cache=False)


def test_headers_for_fp16_and_fp8_resolve():
    src = r"""
    #include <cuda_fp16.h>
    #include <cuda_fp8.h>
    extern "C" __global__ void q(const __half* x, __nv_fp8_e4m3* y) {
        y[threadIdx.x] = __nv_fp8_e4m3(__half2float(x[threadIdx.x]));
    }"""
    assert "q" in compile_source(src, CompileOptions(arch="sm_90"), cache=False).kernels


def test_cache_makes_a_repeat_free_and_separates_options(tmp_path):
    cache = CompileCache(tmp_path)
    opts = CompileOptions(arch="sm_90", defines=DEFINES)
    first = compile_source(SCALE, opts, cache=cache)
    start = time.perf_counter()
    second = compile_source(SCALE, opts, cache=cache)
    assert not first.cached and second.cached
    assert second.cubin == first.cubin
    assert second.kernels == first.kernels
    assert time.perf_counter() - start < first.compile_seconds  # a read, not a compile
    other = compile_source(SCALE, opts.model_copy(update={"max_registers": 32}), cache=cache)
    assert not other.cached


def test_cache_remembers_compile_errors_and_survives_corruption(tmp_path):
    cache = CompileCache(tmp_path)
    broken = "extern \"C\" __global__ void k() { undefined_thing(); }"
    for _ in range(2):
        with pytest.raises(CompileError, match="undefined_thing"):
            compile_source(broken, CompileOptions(arch="sm_90"), cache=cache)
    opts = CompileOptions(arch="sm_90", defines=DEFINES)
    compile_source(SCALE, opts, cache=cache)
    for blob in tmp_path.rglob("*.bin"):
        blob.write_bytes(b"garbage")
    again = compile_source(SCALE, opts, cache=cache)
    assert not again.cached and again.cubin[:4] == b"\x7fELF"


def test_compile_many_parallel_matches_serial_and_keeps_errors(tmp_path):
    variants = [
        (SCALE, CompileOptions(arch="sm_90", defines={"SCALE_THREADS": t, "SCALE_BIAS": "1.0f"}))
        for t in (64, 128, 256, 512)
    ]
    variants.append((SCALE, CompileOptions(arch="sm_90")))  # missing defines: an error outcome
    parallel = compile_many(variants, workers=2, cache=False)
    serial = compile_many(variants, workers=1, cache=False)
    assert [o.index for o in parallel] == list(range(5))
    assert all(o.module is not None for o in parallel[:4])
    assert parallel[4].module is None and parallel[4].error_type == "CompileError"
    assert parallel[4].diagnostics
    for p, s in zip(parallel[:4], serial[:4]):
        assert p.module.kernels == s.module.kernels
    with pytest.raises(UnknownArchError):
        compile_many([(SCALE, CompileOptions(arch="sm_1"))], cache=False)


def test_the_compiler_process_ignores_a_partial_package_in_the_working_directory(tmp_path, monkeypatch):
    """Started from a checkout (whose astra_kernels/ holds only part of the package), the compiler
    child still imports what this process imports: it runs with -P, never the working directory."""
    from astra_kernels.tools.toolchain.compiler_process import CompilerProcess

    (tmp_path / "astra_kernels").mkdir()
    (tmp_path / "astra_kernels" / "__init__.py").write_text("raise ImportError('the checkout, not the package')\n")
    monkeypatch.chdir(tmp_path)
    child = CompilerProcess(start_timeout_s=120)
    try:
        module = child.compile(SCALE, CompileOptions(arch="sm_90", defines=DEFINES), name="scale.cu", cache_dir=None,
                               timeout_s=120)
    finally:
        child.close()
    assert "scale_bf16" in module.kernels
