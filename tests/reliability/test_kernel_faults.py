"""Kernel faults that need no GPU to show: a compile that never ends, work handed to another
stream, and the NumPy side of the guard bands, the timed-output check and memcheck's report.

Their GPU halves, through the worker and the results store, are in test_kernel_faults_on_gpu.py.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import time
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest

from support import faulty
from astra_kernels.tools.toolchain import compiler_process
from astra_kernels.tools.measuring import correctness, device_checks, draws, sanitizer
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.toolchain.device import DeviceBuffer
from astra_kernels.tools.toolchain.compile_cache import CompileCache
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_many, compile_source
from astra_kernels.tools.toolchain.nvrtc import key_and_flags
from astra_kernels.tools.measuring.correctness import POISON_BYTE, timed_outputs
from astra_kernels.tools.errors import CompileError, CompileTimeoutError
from astra_kernels.tools.measuring.evaluation import evaluate
from astra_kernels.tools.measuring.guards import ALIGN, GUARD_BYTES, describe, pattern, plan
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES

OPTIONS = CompileOptions(arch="sm_90")
DEADLINE_S = 3.0
# A compile that ends, as a bound on how long a cut-off one took: the child's start (an
# interpreter, the NVRTC bindings) plus the deadline, with room for a loaded CI machine. The
# endless source would take about 13 minutes on this project's 2-core CI machine.
CUT_OFF_WITHIN_S = 45.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_compile_that_never_ends_is_cut_off_and_the_next_compile_works(tmp_path):
    cache = CompileCache(tmp_path)
    endless = faulty.endless_source()
    started = time.perf_counter()
    with pytest.raises(CompileTimeoutError, match=rf"did not finish within {DEADLINE_S:g} s.*killed"):
        compile_source(endless, OPTIONS, cache=cache, timeout_s=DEADLINE_S)
    assert time.perf_counter() - started < CUT_OFF_WITHIN_S
    child = compiler_process._SHARED
    assert child.kills >= 1 and child.pid is None  # the compiling process is gone
    assert cache.get(key_and_flags(endless, OPTIONS, "kernel.cu")[0]) is None  # a timeout is not cached

    short = compile_source(faulty.endless_source(lines=3), OPTIONS, cache=cache, timeout_s=60)
    assert "scale" in short.kernels  # the same source, only shorter, is valid: its length is the fault
    assert child.pid is not None and _alive(child.pid)


def test_compile_many_reports_a_timeout_as_that_variant_s_outcome():
    variants = [(faulty.endless_source(), OPTIONS),
                (faulty.SCALE_SOURCE, OPTIONS.model_copy(update={"defines": {"VARIANT": 0}}))]
    first, second = compile_many(variants, workers=1, cache=False, timeout_s=DEADLINE_S)
    assert first.module is None and first.error_type == "CompileTimeoutError", first
    assert second.module is not None and "scale" in second.module.kernels, second.error


def test_the_evaluation_records_a_compile_timeout_and_stays_usable():
    """evaluate() as the worker runs it: the status names the fault and nothing is fatal."""
    device = SimpleNamespace(properties=SimpleNamespace(name="no device needed", arch="sm_90"))
    request = faulty.scale_request(0, source=faulty.endless_source())
    result = evaluate(device, request, compile_timeout_s=DEADLINE_S)
    assert result.status == "compile_timeout", result.message
    assert f"did not finish within {DEADLINE_S:g} s" in result.message
    assert not result.fatal and result.timing is None


def test_work_handed_to_another_stream_does_not_compile_or_load():
    """A device-side launch onto cudaStreamFireAndForget is the CUDA form of KernelBench's
    other-stream cheat; whole-program NVRTC does not declare it, and relocatable code, which
    would, is refused because nothing here links cudadevrt."""
    options = OPTIONS.model_copy(update={"defines": {"VARIANT": 10}})
    with pytest.raises(CompileError, match="cudaStreamFireAndForget"):
        compile_source(faulty.FAULTS_SOURCE, options, cache=False)
    relocatable = options.model_copy(update={"extra": ["-rdc=true"]})
    for attempt in ("compiled", "from the cache"):
        with pytest.raises(CompileError, match="relocatable device code"):
            compile_source(faulty.FAULTS_SOURCE, relocatable)
    outcome, = compile_many([(faulty.FAULTS_SOURCE, relocatable)], workers=1)
    assert outcome.module is None and "relocatable" in outcome.error


def test_guard_plan_keeps_alignment_and_bands_flush_against_each_buffer():
    sizes = [1, 511, 512, 2_000_006, 3]
    slots = plan([(f"b{i}", n) for i, n in enumerate(sizes)])
    assert slots[0].start == 0
    for slot, size in zip(slots, sizes):
        assert slot.offset % ALIGN == 0 and slot.nbytes == size
        assert slot.before == GUARD_BYTES and GUARD_BYTES <= slot.after < GUARD_BYTES + ALIGN
        assert slot.end % ALIGN == 0
    for left, right in zip(slots, slots[1:]):
        assert left.end == right.start  # packed, nothing unguarded between two buffers
    with pytest.raises(ValueError, match="multiple of 512"):
        plan([("x", 4)], guard_bytes=1000)
    unguarded = plan([("x", 3), ("y", 5)], guard_bytes=0)
    assert [s.offset for s in unguarded] == [0, ALIGN]  # DeviceArena's packing


def test_a_changed_band_is_named_by_buffer_side_and_offset():
    slot = plan([("y", 2_000_006)])[0]
    before, after = pattern(slot.before).copy(), pattern(slot.after).copy()
    assert describe("output 'y'", slot, before, after) == []
    after[0:2] ^= 0xFF  # y[n] of a bf16 output: the byte just past the end and the next
    before[-2:] ^= 0x01  # y[-1]
    found = describe("output 'y'", slot, before, after)
    assert len(found) == 2
    assert found[0] == "output 'y': 2 of the 65536 bytes before its start changed, from byte -2 to -1"
    assert found[1].startswith(f"output 'y': 2 of the {slot.after} bytes after its end changed, "
                               "from byte +0 to +1 past it (offset 2000006 of a 2000006-byte buffer)")
    far = pattern(slot.after).copy()
    far[4096] ^= 0x10
    assert "at byte +4096 past it" in describe("output 'y'", slot, pattern(slot.before), far)[0]


def test_the_pattern_differs_from_what_the_fault_kernels_write():
    """The GPU tests write bf16 1.0 (bytes 80 3f) beside a buffer; the band must not already hold it."""
    one = np.array([1.0], dtype="float32").view(np.uint32) >> 16  # bf16 bits of 1.0
    written = np.frombuffer(np.uint16(one[0]).tobytes(), np.uint8)
    slot = plan([("y", 2 * ((1 << 18) + 3))])[0]
    assert not np.array_equal(pattern(slot.before)[-2:], written)
    assert not np.array_equal(pattern(slot.after)[:2], written)
    assert len(np.unique(pattern(GUARD_BYTES))) == 256  # no single byte value hides a write


def test_timed_outputs_fail_for_a_set_no_timed_launch_wrote():
    tol = {"y": DEFAULT_TOLERANCES["fp32"]}
    expected = {"y": np.linspace(-1, 1, 64)}
    checked = {"y": expected["y"].astype(np.float32)}
    unwritten = np.full(64 * 4, POISON_BYTE, np.uint8).view(np.float32)
    good = ({"y": checked["y"].copy()} for _ in range(3))
    assert timed_outputs(good, 3, checked, expected, tol).passed
    sets = [{"y": checked["y"].copy()}, {"y": unwritten}, {"y": checked["y"].copy()}]
    verdict = timed_outputs(iter(sets), 3, checked, expected, tol)
    assert not verdict.passed
    assert "input set 1 (of 3)" in verdict.detail and "NaN" in verdict.detail
    jitter = {"y": checked["y"] + np.float32(1e-7)}  # another summation order: within tolerance
    assert timed_outputs(iter([jitter]), 1, checked, expected, tol).passed


MEMCHECK_OUTPUT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 2 bytes
=========     at scale+0x1d0 in kernel.cu:19
=========     by thread (3,0,0) in block (1024,0,0)
=========     Address 0x7f3a00480006 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a00400000 of size 524294 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call to cuStreamSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""


def test_memcheck_output_is_read_into_errors_and_a_count():
    errors, count = sanitizer.parse_memcheck(MEMCHECK_OUTPUT)
    assert count == 2 and len(errors) == 2
    assert errors[0].startswith("Invalid __global__ write of size 2 bytes | at scale+0x1d0 in kernel.cu:19")
    assert "by thread (3,0,0) in block (1024,0,0)" in errors[0] and "Host Frame" not in errors[0]
    assert "CUDA_ERROR_LAUNCH_FAILED" in errors[1]
    assert sanitizer.parse_memcheck("========= ERROR SUMMARY: 0 errors\n") == ([], 0)


def test_sanitize_says_plainly_when_compute_sanitizer_is_absent(monkeypatch):
    monkeypatch.setattr(sanitizer, "find_compute_sanitizer", lambda: None)
    report = sanitizer.sanitize(faulty.scale_request(7, n=4099, source=faulty.FAULTS_SOURCE))
    assert not report.available and report.clean is None
    assert "compute-sanitizer is not installed" in report.message


class _HostDriver:
    """Just enough of the CUDA driver for DeviceBuffer, with host memory for device memory: a
    pointer is a real host address, so emulated kernels can write where a real one would,
    guard bands included. Every allocation has slack on both sides, so an emulated stray write
    never corrupts the test process."""

    SLACK = 1 << 16

    def __init__(self):
        from cuda.bindings import driver

        self.CUresult = driver.CUresult
        self._ok = driver.CUresult.CUDA_SUCCESS
        self._arrays: dict[int, np.ndarray] = {}

    def cuMemAlloc(self, nbytes):
        array = np.zeros(int(nbytes) + 2 * self.SLACK, np.uint8)
        ptr = array.ctypes.data + self.SLACK
        self._arrays[ptr] = array
        return self._ok, ptr

    def cuMemFree(self, ptr):
        self._arrays.pop(int(ptr), None)
        return (self._ok,)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (self._ok,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (self._ok,)

    def cuMemcpyDtoD(self, dst, src, nbytes):
        ctypes.memmove(int(dst), int(src), int(nbytes))
        return (self._ok,)

    def cuMemsetD8(self, ptr, byte, nbytes):
        ctypes.memset(int(ptr), int(byte), int(nbytes))
        return (self._ok,)

    def cuCtxSynchronize(self):
        return (self._ok,)


def _at(ptr: int, dtype, count: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(ptr), dtype=dtype)


class _ScaleOnHost:
    """`scale` and its faulty variants, emulated on the host in the way FAULTS_SOURCE writes them."""

    def __init__(self, fault: str):
        self.fault, self.launches = fault, 0
        self.served: set[tuple[int, int]] = set()
        self.memo: tuple[bytes, np.ndarray] | None = None
        self.memo_hits = 0
        self.checks: _HostChecks | None = None  # where "writes into the checks' memory" writes

    def __call__(self, x_buf, y_buf, n, alpha):
        import ml_dtypes

        n = int(n)
        self.launches += 1
        x, y = _at(x_buf.ptr, ml_dtypes.bfloat16, n), _at(y_buf.ptr, ml_dtypes.bfloat16, n + 1)
        if self.fault == "works only while checked" and self.launches > 2:
            return
        if self.fault == "skips when its output holds values" and not np.isnan(y[:n].astype(np.float32)).any():
            return
        if self.fault == "keeps results by address":  # a memo of the addresses served, as a __device__ table
            if (x_buf.ptr, y_buf.ptr) in self.served:
                return
            self.served.add((x_buf.ptr, y_buf.ptr))
        if self.fault == "memoises on its first input words":  # a one-entry memo, keyed as a cheat would
            key = x[:8].tobytes()
            if self.memo is not None and self.memo[0] == key:
                self.memo_hits += 1
                y[:n] = self.memo[1]
                return
        y[:n] = (x.astype(np.float32) * np.float32(alpha)).astype(ml_dtypes.bfloat16)
        if self.fault == "memoises on its first input words":
            self.memo = (x[:8].tobytes(), y[:n].copy())
        if self.fault == "writes past its output":
            y[n] = 1.0
        if self.fault == "writes in front of its input":
            _at(x_buf.ptr - 2, ml_dtypes.bfloat16, 1)[0] = 1.0
        if self.checks is not None:  # far past the bands: into the draws the checks keep on the GPU
            kept = list(self.checks._resident.values())
            second = [r for key, r in self.checks._resident.items() if key[-1] == 2]  # the seed-2 draw
            hit = {"writes into the checks' memory": kept,
                   "writes into the other draw, once": second if self.launches == 1 else [],
                   "writes into the other draw while timed": second if self.launches > 2 else []}.get(self.fault, [])
            for resident in hit:
                target = next(iter(resident.inputs.values()))
                _at(target.ptr, np.uint8, 1)[0] += 1


class _HostChecks(device_checks.DeviceChecks):
    """device_checks.DeviceChecks with its three kernels done in NumPy on the fake's host memory;
    the rest (resident draws and their checksums, the verdicts) is the real code."""

    def __init__(self, device):
        self.device, self.resident_bytes, self._resident = device, 1 << 30, OrderedDict()

    def findings(self, got, ref, count, dtype, tol):
        return correctness.findings(_at(got.ptr, numpy_dtype(dtype), count), _at(ref.ptr, np.float64, count), tol)

    def differ(self, a, b, nbytes):
        return not np.array_equal(_at(a.ptr, np.uint8, nbytes), _at(b.ptr, np.uint8, nbytes))

    def evict_l2_async(self):
        """Emptying L2 changes no value: nothing to emulate."""

    @staticmethod
    def _rows(table, width):
        return _at(table.buffer.ptr, np.uint64, table.count * width).reshape(-1, width).tolist() if table.count else []

    def copy_ranges(self, table):
        for to, source, nbytes in self._rows(table, 3):
            ctypes.memmove(to, source, nbytes)

    def fill_ranges_async(self, table, byte):
        for to, nbytes in self._rows(table, 2):
            ctypes.memset(to, byte, nbytes)

    def ranges_differ(self, table):
        return [not np.array_equal(_at(a, np.uint8, nbytes), _at(b, np.uint8, nbytes))
                for a, b, nbytes in self._rows(table, 3)]

    def checksum(self, buffer):
        words = _at(buffer.ptr, np.uint64, buffer.nbytes // 8)
        return int((words * (2 * np.arange(words.size, dtype=np.uint64) + 1)).sum(dtype=np.uint64))


class _HostDevice:
    """The Device interface evaluate() uses, launching an emulated kernel."""

    def __init__(self, kernel: _ScaleOnHost):
        self.kernel = kernel
        self.properties = SimpleNamespace(name="host fake", arch="sm_90")
        self.stream = None  # no stream: each launch runs at once

    def load(self, module, name):
        return SimpleNamespace(name=name, info=module.kernel(name))

    def check_launch(self, kernel, grid, block, shared=0):
        pass

    def occupancy(self, kernel, threads, shared=0):
        return 1

    def launch(self, kernel, grid, block, args, shared=0, stream=None, pdl=False):
        self.kernel(*args)

    def prepare(self, kernel, grid, block, args, shared=0):
        """Device.prepare's launch: the same arguments, each buffer at the pointer the call gives."""
        def launch(pointers, stream):
            given = iter(pointers)
            self.kernel(*[DeviceBuffer.view(next(given), a.nbytes) if isinstance(a, DeviceBuffer) else a for a in args])
        return launch

    def synchronize(self, stream=None):
        pass

    def context_error(self):
        return None


@pytest.fixture
def host_gpu(monkeypatch):
    """evaluate() on host memory: the real buffers, guard bands and checks; the timing
    replaced by a few plain launches of the emulated kernel."""
    from astra_kernels.tools.toolchain import driver
    from astra_kernels.tools.measuring import evaluation
    from astra_kernels.tools.toolchain.timing import Timing

    host = _HostDriver()
    monkeypatch.setattr(driver, "api", lambda: host)

    def launches_only(_device, enqueue, *, launches, input_sets, before_replay=None, **_):
        for _replay in range(2):  # two replays, each after the outputs' fill, as on the GPU
            if before_replay is not None:
                before_replay()
            for i in range(launches):
                enqueue(i)
        return Timing(median_us=1.0, min_us=1.0, max_us=1.0, spread=0.0, samples_us=[1.0],
                      launches_per_replay=launches, input_sets=input_sets, method="host fake")

    monkeypatch.setattr(evaluation, "time_graph", launches_only)

    class Immediate:  # timing.CapturedWork without a stream: the work runs at each launch()
        def __init__(self, _device, enqueue):
            self.enqueue = enqueue

        def launch(self):
            self.enqueue()

        def close(self):
            pass

    monkeypatch.setattr(evaluation, "CapturedWork", Immediate)
    monkeypatch.setattr(evaluation, "fill_async", lambda _device, ptr, byte, nbytes: ctypes.memset(ptr, byte, nbytes))
    monkeypatch.setattr(evaluation, "time_stream", launches_only)
    monkeypatch.setattr(evaluation, "rotation_count", lambda set_bytes, l2="cold": 3)
    monkeypatch.setattr(evaluation, "copy_bandwidth", lambda _device: 1e12)
    monkeypatch.setattr(evaluation, "mix_bandwidth", lambda _device, reads, writes: 1e12)
    checks: dict[int, _HostChecks] = {}
    monkeypatch.setattr(device_checks, "on", lambda device: checks.setdefault(id(device), _HostChecks(device)))
    yield host
    # Freed here, by this test's fake driver: collected later, a resident buffer would free its
    # address in a later test's fake, where a live allocation may have come to sit at it.
    for held in checks.values():
        while held._resident:
            held._resident.popitem()[1].close()


@pytest.mark.parametrize("sets", [3, 16])  # 16: evaluation.RANGES_FROM, the sets copied and compared by tables of ranges
@pytest.mark.parametrize("layout", ["arena", "separate"])
@pytest.mark.parametrize("fault,needles", [
    ("none", []),
    ("writes past its output", ["guard bands", "output 'y'", "after its end", "from byte +0 to +1 past it"]),
    ("writes in front of its input", ["guard bands", "input 'x'", "before its start", "from byte -2 to -1"]),
    # the outputs are filled with finite values before every replay: the kernel leaves those
    ("works only while checked", ["timed outputs", "input set 0 (of 3)", "outside rtol",
                                  "did not do the work the checks saw", "filled with finite values"]),
    ("skips when its output holds values", ["timed outputs", "input set 0 (of 3)", "outside rtol",
                                            "skips work when its output already holds values"]),
    ("keeps results by address", ["y (seed 2)", "NaN", "same addresses as seed 1's",
                                  "keeps results by address"]),
    ("writes into the checks' memory", ["resident draws", "wrote outside its buffers, past the guard bands"]),
    # the second draw is on the GPU before the first launch: a write into it then is seen too
    ("writes into the other draw, once", ["resident draws", "wrote outside its buffers"]),
    ("writes into the other draw while timed", ["resident draws", "wrote outside its buffers"]),
])
def test_the_evaluation_rejects_stray_writes_and_idle_timed_launches(host_gpu, monkeypatch, sets, layout, fault,
                                                                      needles):
    """The wiring of evaluate() itself, on host memory: the bands sit in the request's layout
    and name the buffer, side and offset; outputs poisoned before timing must be rewritten; the
    draw the checks keep on the GPU must come through the launches unchanged. With few rotating
    sets and with as many as are copied, filled and compared a table of ranges at a time."""
    from astra_kernels.tools.measuring import evaluation

    assert evaluation.RANGES_FROM == 16
    monkeypatch.setattr(evaluation, "rotation_count", lambda set_bytes, l2="cold": sets)
    needles = [n.replace("(of 3)", f"(of {sets})") for n in needles]
    request = dataclasses.replace(faulty.scale_request(0, n=4099), input_layout=layout)
    kernel = _ScaleOnHost(fault)
    device = _HostDevice(kernel)
    kernel.checks = device_checks.on(device)
    result = evaluate(device, request)
    names = [c.name for c in result.checks]
    if fault == "none":
        assert result.status == "ok", result.message
        assert {"guard bands (seed 1)", "guard bands (seed 2)", "timed outputs"} <= set(names)
        assert all(c.passed for c in result.checks)
        return
    assert result.status == "incorrect" and not result.fatal
    missing = [n for n in needles if n not in result.message]
    assert not missing, f"{missing} not in {result.message!r}"
    if fault in ("works only while checked", "writes into the other draw while timed",
                 "skips when its output holds values"):
        assert result.timing is not None  # kept as evidence: it timed a kernel doing nothing
    else:
        assert result.timing is None  # rejected before timing



def test_distinct_draws_per_set_leave_a_content_memo_nothing_to_reuse(host_gpu):
    """Every rotating set a copy of one draw let a kernel that keys a memo on its first input words
    replay it from the second launch on; with distinct seeded draws per set (evaluation.timing_seeds),
    consecutive launches read other content, so a one-entry memo never hits in the timed launches,
    and every set's outputs are checked against their own draw's reference."""
    request = faulty.scale_request(0, n=4099)
    kernel = _ScaleOnHost("memoises on its first input words")
    device = _HostDevice(kernel)
    result = evaluate(device, request)
    assert result.status == "ok", result.message
    assert kernel.memo_hits == 0
    timed = next(c for c in result.checks if c.name == "timed outputs")
    assert timed.passed and "3 distinct draws" in timed.detail


def test_timing_seeds_are_distinct_and_start_with_the_checks_draws():
    from astra_kernels.tools.measuring import evaluation

    assert evaluation.timing_seeds((1, 2), 1) == [1]
    assert evaluation.timing_seeds((1, 2), 2) == [1, 2]
    many = evaluation.timing_seeds((1, 2), 4096)
    assert many[:2] == [1, 2] and len(many) == evaluation.DISTINCT_DRAWS == len(set(many))
    # a second seed equal to a further draw's is not drawn twice
    clash = evaluation.timing_seeds((1, 1 + evaluation.DRAW_STRIDE), 4)
    assert len(set(clash)) == 4 and clash[:2] == [1, 1 + evaluation.DRAW_STRIDE]
    assert evaluation.timing_seeds((5, 5), 3) == [5, 5 + evaluation.DRAW_STRIDE, 5 + 2 * evaluation.DRAW_STRIDE]


def test_the_fill_byte_is_finite_in_every_float_type():
    import ml_dtypes

    from astra_kernels.tools.measuring import evaluation

    for byte in evaluation.FILL_BYTES:
        for dtype in (ml_dtypes.bfloat16, np.float16, np.float32, np.float64, ml_dtypes.float8_e4m3fn,
                      ml_dtypes.float8_e5m2):
            size = np.dtype(dtype).itemsize
            value = np.frombuffer(bytes([byte]) * size, dtype=dtype)[0]
            assert np.isfinite(np.float64(value)), (hex(byte), dtype)


def test_a_draw_resident_on_the_gpu_is_not_drawn_again_on_the_host(host_gpu, monkeypatch):
    """Once a draw is on the GPU the host need not keep it: the next candidate of the same shape
    is checked against the resident copy even after the host's draws were let go (the serving
    shapes' draws, 36 GB, are more than a worker's share of a host: 2026-11-26's two-H100 run
    drew silu_and_mul 16384x28672 three times, 20 s each)."""
    from astra_kernels.tools.measuring import evaluation

    request = faulty.scale_request(0, n=4099)
    made = []

    def counted(seed, make=request.problem.make_case):
        made.append(seed)
        return make(seed)

    request = dataclasses.replace(request, problem=dataclasses.replace(request.problem, make_case=counted))
    device = _HostDevice(_ScaleOnHost("none"))
    assert evaluate(device, request).status == "ok"
    # the checks' two draws and the timing's third (evaluation.timing_seeds: 3 rotating sets here)
    assert sorted(made) == [1, 2, 1 + evaluation.DRAW_STRIDE]
    monkeypatch.setattr(draws, "_CASES", type(draws._CASES)())  # the host's draws let go
    result = evaluate(device, request)
    assert result.status == "ok" and all(c.passed for c in result.checks)
    assert sorted(made) == [1, 2, 1 + evaluation.DRAW_STRIDE]  # nothing drawn again

def test_unguarded_buffers_have_their_exact_size(host_gpu):
    """memcheck's layout (guard_bytes=0, separate): nothing between a buffer's end and the end
    of its allocation, so a write one element past it is outside any allocation."""
    from astra_kernels.tools.measuring.guards import GuardedBuffers

    params = faulty.scale_request(0, n=4099).problem.buffers
    guarded = GuardedBuffers(params, "separate", guard_bytes=0)
    try:
        sizes = {ptr: array.size - 2 * _HostDriver.SLACK for ptr, array in host_gpu._arrays.items()}
        assert [sizes[b.ptr] for b in guarded.buffers] == [p.nbytes for p in params]
        assert guarded.check() is None
    finally:
        guarded.close()


def test_launch_shapes_beyond_the_limits_are_refused_with_the_limit(monkeypatch):
    """Device.check_launch against an H100's limits, answered by a stand-in driver: each
    refusal names the limit, where the driver itself would say only CUDA_ERROR_INVALID_VALUE."""
    from cuda.bindings import driver as real

    from astra_kernels.tools.toolchain import device as device_module, driver as driver_module
    from astra_kernels.tools.errors import LaunchArgumentError

    limits = {"MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
              "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535}
    kernel_facts = {"MAX_THREADS_PER_BLOCK": 512, "NUM_REGS": 128, "SHARED_SIZE_BYTES": 16384}
    ok = real.CUresult.CUDA_SUCCESS
    fake = SimpleNamespace(
        CUresult=real.CUresult, CUdevice_attribute=real.CUdevice_attribute,
        CUfunction_attribute=real.CUfunction_attribute,
        cuDeviceGetAttribute=lambda a, d: (ok, limits[a.name.removeprefix("CU_DEVICE_ATTRIBUTE_")]),
        cuFuncGetAttribute=lambda a, f: (ok, kernel_facts[a.name.removeprefix("CU_FUNC_ATTRIBUTE_")]),
    )
    monkeypatch.setattr(driver_module, "api", lambda: fake)
    gpu = device_module.Device.__new__(device_module.Device)
    gpu.device = 0
    gpu.properties = SimpleNamespace(max_threads_per_block=1024, max_shared_per_block_optin=232448)
    kernel = SimpleNamespace(name="scale", function=None)

    gpu.check_launch(kernel, (4096,), (256,), 48 * 1024)  # within every limit
    refusals = [
        ((1,), (2048,), 0, "block x of 2048 exceeds the device's 1024"),
        ((1,), (8, 8, 128), 0, "block z of 128 exceeds the device's 64"),
        ((1, 70000), (256,), 0, "grid y of 70000 exceeds the device's 65535"),
        ((1,), (32, 32), 0, "block of 1024 threads exceeds the 512 that scale can run with 128 registers"),
        ((1,), (256,), 1 << 20, "1048576 bytes of dynamic shared memory plus scale's 16384 static exceed "
                                "the device's 232448 per block"),
    ]
    for grid, block, shared, message in refusals:
        with pytest.raises(LaunchArgumentError, match=re.escape(message)):
            gpu.check_launch(kernel, grid, block, shared)
