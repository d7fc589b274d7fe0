"""NVRTC compilation without a GPU: resources, errors, the cache and parallel compiles."""

from __future__ import annotations

import concurrent.futures as futures
import threading
import time
from pathlib import Path

import pytest

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain import compiler
from astra_kernels.tools.toolchain.compiler import compile_many, compile_source
from astra_kernels.tools.toolchain.compile_cache import CompileCache
from astra_kernels.tools.errors import CompileError, KernelNotFoundError, ToolchainError, UnknownArchError

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


class _GatedExecutor(futures.Executor):
    """A cluster's compile executor in threads: counts what it is sent, holds every compile until
    `callers` compile_many calls have claimed their binaries, and fails the first `fail` compiles
    as a lost task would."""

    def __init__(self, callers: int, fail: int = 0, failure: type[BaseException] = ToolchainError):
        self._threads = futures.ThreadPoolExecutor(4)
        self._failure = failure
        self.sent: list[dict] = []
        self.claimed = threading.Semaphore(0)
        self._callers, self._fail, self._lock = callers, fail, threading.Lock()
        self._open = threading.Event()

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self.sent.append(args[2].defines)
            fail, self._fail = self._fail > 0, max(0, self._fail - 1)

        def run():
            self.wait_for_callers()
            if fail:
                raise self._failure("a compile task was lost on the cluster")
            return fn(*args, **kwargs)
        return self._threads.submit(run)

    def wait_for_callers(self) -> None:
        with self._lock:
            if not self._open.is_set():
                for _ in range(self._callers):
                    assert self.claimed.acquire(timeout=60), "the callers never claimed"
                self._open.set()

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)


def _counting_claims(monkeypatch, executor: _GatedExecutor) -> None:
    real = compiler._claim

    def claim(*args):
        answer = real(*args)
        executor.claimed.release()
        return answer
    monkeypatch.setattr(compiler, "_claim", claim)


def _in_threads(calls):
    results: dict[int, object] = {}

    def run(n, call):
        try:
            results[n] = call()
        except BaseException as exc:  # KeyboardInterrupt too: what each call raised is the result
            results[n] = exc
    threads = [threading.Thread(target=run, args=(n, c), daemon=True) for n, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return [results.get(n, "still running") for n in range(len(calls))]


@pytest.fixture(autouse=True)
def _no_compile_left_claimed():
    """Each test starts and must end with no binary claimed by a compile_many call (a process-wide map)."""
    compiler._COMPILING.clear()
    yield
    assert not compiler._COMPILING, compiler._COMPILING


def test_a_binary_asked_for_by_several_calls_at_once_is_compiled_once(tmp_path, monkeypatch):
    """A tune's shapes of one width build their spaces side by side and ask for the same binaries:
    each is compiled once, by the first call to ask; the others take its outcome at their own index."""
    variants = [(SCALE, CompileOptions(arch="sm_90", defines={"SCALE_THREADS": t, "SCALE_BIAS": "1.0f"}))
                for t in (64, 128, 256)]
    executor = _GatedExecutor(callers=3)
    _counting_claims(monkeypatch, executor)
    cache = CompileCache(tmp_path / "cache")
    with compiler.compiling_with(executor):
        answers = _in_threads([lambda: compile_many(variants, cache=cache),
                               lambda: compile_many(variants[::-1], cache=cache),
                               lambda: compile_many(variants[1:], cache=cache)])
    assert sorted(d["SCALE_THREADS"] for d in executor.sent) == [64, 128, 256]
    first, backwards, tail = answers
    assert [o.index for o in backwards] == [0, 1, 2] and [o.index for o in tail] == [0, 1]
    assert [o.module.cubin for o in backwards[::-1]] == [o.module.cubin for o in first]
    assert [o.module.cubin for o in tail] == [o.module.cubin for o in first[1:]]
    assert not compiler._COMPILING
    assert all(o.module.cached for o in compile_many(variants, cache=cache))  # each kept once, in the cache


def test_a_call_waiting_on_a_stopped_compile_compiles_it_itself(tmp_path, monkeypatch):
    """The call that claimed a binary fails (its task lost): it raises, and the call waiting on that
    binary compiles it instead of failing with it or waiting for ever."""
    variant = [(SCALE, CompileOptions(arch="sm_90", defines=DEFINES))]
    executor = _GatedExecutor(callers=2, fail=1)
    _counting_claims(monkeypatch, executor)
    with compiler.compiling_with(executor):
        answers = _in_threads([lambda: compile_many(variant, cache=False), lambda: compile_many(variant, cache=False)])
    lost = [a for a in answers if isinstance(a, ToolchainError)]
    compiled = [a for a in answers if isinstance(a, list)]
    assert len(lost) == 1 and len(compiled) == 1 and compiled[0][0].module is not None
    assert len(executor.sent) == 2 and not compiler._COMPILING


def test_a_call_waiting_on_an_interrupted_compile_stops_too(tmp_path, monkeypatch):
    """Ctrl-C in the call that claimed a binary (stop_compiles killed its pool): the call waiting on
    that binary stops as well, rather than starting compiles of its own that nothing would stop."""
    variant = [(SCALE, CompileOptions(arch="sm_90", defines=DEFINES))]
    executor = _GatedExecutor(callers=2, fail=1, failure=KeyboardInterrupt)
    _counting_claims(monkeypatch, executor)
    with compiler.compiling_with(executor):
        answers = _in_threads([lambda: compile_many(variant, cache=False), lambda: compile_many(variant, cache=False)])
    assert all(isinstance(a, KeyboardInterrupt) for a in answers), answers
    assert len(executor.sent) == 1
