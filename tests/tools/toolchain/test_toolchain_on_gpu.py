"""The toolchain on a real GPU: the protocol's checks, its timings, and fault isolation."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import ml_dtypes
import numpy as np
import pytest

from support import faulty
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.measuring import probes
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_source

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker(timeout_s=120) as w:
        yield w


def test_correct_kernel_passes_every_check_and_is_timed(worker):
    result = worker.evaluate(faulty.scale_request(0))
    assert result.status == "ok", result.message
    names = [c.name for c in result.checks]
    assert any("unchanged" in n for n in names) and "fresh outputs" in names
    assert result.correct
    t = result.timing
    assert t.method == "graph" and t.input_sets >= 2 and t.launches_per_replay >= t.input_sets
    assert 0 < t.min_us <= t.median_us <= t.max_us
    assert result.stream_timing is not None and result.stream_timing.method == "stream"
    assert result.occupancy_blocks_per_sm >= 1
    assert 0 < result.fraction_of_copy_bandwidth < 1.2
    assert result.kernel_info.resources.registers > 0
    # where the wall time went: each phase timed, none longer than the whole
    assert set(result.phase_seconds) == {"compile", "check", "time", "floor"}
    assert all(s > 0 for s in result.phase_seconds.values())
    assert sum(result.phase_seconds.values()) <= result.wall_seconds


@pytest.mark.parametrize("variant,needle", [
    (1, "outside"),            # wrong math
    (2, "NaN"),                # an unwritten element keeps its poison
    (3, "modified its input"),
])
def test_wrong_kernels_are_rejected_with_the_reason(worker, variant, needle):
    result = worker.evaluate(faulty.scale_request(variant))
    assert result.status == "incorrect"
    assert needle in result.message
    assert result.timing is None  # an incorrect kernel is never timed


def test_cached_output_is_caught(worker):
    result = worker.evaluate(faulty.scale_request(6, n=4099, kernel="scale_cached"))
    assert result.status == "incorrect"
    failed = {c.name for c in result.checks if not c.passed}
    assert "fresh outputs" in failed and "y (seed 2)" in failed


def test_illegal_address_kills_only_the_worker(worker):
    before = worker.restarts
    first_pid = worker.pid
    result = worker.evaluate(faulty.scale_request(4))
    assert result.status == "launch_error" and result.fatal
    assert "ILLEGAL_ADDRESS" in result.message or "illegal" in result.message.lower()
    after = worker.evaluate(faulty.scale_request(0))
    assert after.status == "ok" and after.correct
    assert worker.restarts == before + 1 and worker.pid != first_pid


def test_hang_times_out_and_the_next_evaluation_is_correct(worker):
    result = worker.evaluate(faulty.scale_request(5), timeout_s=20)
    assert result.status == "timeout" and "killed" in result.message
    after = worker.evaluate(faulty.scale_request(0))
    assert after.status == "ok" and after.correct


def test_ctrl_c_is_the_parents_and_an_interrupted_request_gets_a_fresh_worker(worker, capfd):
    """A notebook's interrupt sends SIGINT to the whole process group. The worker child holds it
    back (tools/toolchain/processes.py): no traceback of its own, no request cut in half, and it
    goes on serving. The parent, interrupted while a request is in flight, ends that worker (a
    late answer must never be read as the next request's), and the next request gets a fresh one."""
    first_pid = worker.pid
    os.kill(first_pid, signal.SIGINT)
    time.sleep(1.0)
    assert worker._process.is_alive() and "KeyboardInterrupt" not in capfd.readouterr().err
    served = worker.evaluate(faulty.scale_request(0))
    assert served.status == "ok" and served.correct and worker.pid == first_pid
    slow = faulty.scale_request(0, source=faulty.SCALE_SOURCE + "\n" + faulty.endless_source())  # compiles for long
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.evaluate(slow)
    finally:
        timer.cancel()
    after = worker.evaluate(faulty.scale_request(0))
    assert after.status == "ok" and after.correct and worker.pid != first_pid


def test_bad_requests_are_invalid_not_fatal(worker):
    request = faulty.scale_request(0)
    wrong_name = dataclasses.replace(request, kernel="scale_typo")
    result = worker.evaluate(wrong_name)
    assert result.status == "invalid" and "scale_typo" in result.message and not result.fatal
    short = dataclasses.replace(request, problem=dataclasses.replace(
        request.problem, params=request.problem.params[:3]))
    result = worker.evaluate(short)
    assert result.status == "invalid" and "takes 4 arguments" in result.message
    broken = dataclasses.replace(request, source=request.source.replace("__float2bfloat16(", "oops("))
    result = worker.evaluate(broken)
    assert result.status == "compile_error" and "line" in result.message


def test_dynamic_shared_memory_above_48k(worker):
    result = worker.evaluate(faulty.dynamic_shared_request())
    assert result.status == "ok", result.message
    assert result.correct


def test_copy_probe_within_ten_percent_of_copy_bandwidth_at_1gb(worker):
    result = worker.evaluate(probes.copy_request(1 << 30), timeout_s=300)
    assert result.status == "ok", result.message
    assert result.correct
    assert result.fraction_of_copy_bandwidth >= 0.9, (
        f"copy kernel at {result.timing.median_us:.1f} us is "
        f"{result.fraction_of_copy_bandwidth:.1%} of {result.copy_bandwidth_gbs:.0f} GB/s"
    )


@pytest.mark.parametrize("reads,writes", [(2, 1), (3, 2), (1, 4)])
def test_mix_probe_checks_and_its_floor_is_measured(worker, reads, writes):
    """The mix probe is correct at an odd size under both of its launches, and an evaluation of a
    2:1 kernel reports the mix floor beside the copy floor (the figures: bench/copy_ceiling.py)."""
    for request in probes.mix_requests(3 * 1000 * 16 + 48, 1000 * 16, reads, writes):
        result = worker.evaluate(request)
        assert result.status == "ok" and result.correct, result.message
        assert result.mix == (reads, writes) and result.mix_floor_us > 0 and result.mix_bandwidth_gbs > 0


def test_warm_l2_times_one_input_set(worker):
    request = dataclasses.replace(faulty.scale_request(0), l2="warm")
    result = worker.evaluate(request)
    assert result.status == "ok" and result.correct, result.message
    assert result.timing.input_sets == 1 and result.timing.median_us > 0


def test_in_process_buffers_round_trip_bf16_and_fp8():
    from astra_kernels.tools.toolchain.device import Device

    device = Device(0)
    rng = np.random.default_rng(7)
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float16):
        host = rng.standard_normal(1001).astype(dtype)
        buffer = device.upload(host)
        back = buffer.download(host.dtype, host.shape)
        assert back.tobytes() == host.tobytes()
        buffer.close()
    module = compile_source(probes.COPY_SOURCE, CompileOptions())
    assert module.arch == device.properties.arch
    kernel = device.load(module, "copy_vec4")
    assert device.occupancy(kernel, 512) >= 1


def test_poison_fill_and_upload_land_before_the_kernel_on_the_device_stream():
    """Fills and uploads go through the legacy stream and kernels through a non-blocking one;
    before DeviceBuffer waited for them, a fill could land after the kernel wrote (a correct
    candidate then read as all NaN: seen once in 1377 tuner evaluations on an H200)."""
    from astra_kernels.tools.measuring.correctness import POISON_BYTE
    from astra_kernels.tools.toolchain.device import Device, DeviceBuffer

    device = Device(0)
    kernel = device.load(compile_source(probes.COPY_SOURCE, CompileOptions()), "copy_vec4")
    nbytes = 1 << 20
    src, dst = DeviceBuffer(nbytes), DeviceBuffer(nbytes)
    rng = np.random.default_rng(3)
    try:
        for _ in range(200):
            host = rng.integers(0, 255, nbytes, dtype=np.uint8)
            src.upload(host)
            dst.fill_bytes(POISON_BYTE)
            device.launch(kernel, (64,), (256,), [src, dst, np.uint64(nbytes // 16)])
            device.synchronize()
            assert np.array_equal(dst.download(np.uint8, (nbytes,)), host)
    finally:
        src.close()
        dst.close()


def test_call_runs_in_the_worker_and_failures_come_back_as_errors(worker):
    from astra_kernels.tools.errors import WorkerError

    facts = worker.call(faulty.device_facts, "hello")
    assert facts["tag"] == "hello" and facts["name"] == worker.device["name"] and facts["sms"] > 0
    pid = worker.pid
    with pytest.raises(WorkerError, match="a peer that does not run"):
        worker.call(faulty.raises_in_worker)
    assert worker.pid == pid  # an exception is not a fault: the context is kept
    assert worker.evaluate(faulty.scale_request(0)).status == "ok"


@pytest.mark.parametrize("layout", ["arena", "separate"])
def test_both_input_layouts_check_and_time(worker, layout):
    request = dataclasses.replace(faulty.scale_request(0), input_layout=layout)
    result = worker.evaluate(request)
    assert result.status == "ok", result.message
    assert result.timing.input_sets >= 2 and result.timing.median_us > 0
