"""The checks' comparisons on the GPU (tools/measuring/device_checks.py) give the host's verdicts.

Every evaluation's correctness checks now run there, so each verdict of correctness.compare (a
pass, a located wrong element, NaN, an infinite value, a non-finite error, a norm-only failure, an
element exactly at the tolerance) is computed both ways on the same arrays and must agree word for
word; only the norms' sums add in another order, so their digits may differ in the last place.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from astra_kernels.tools.measuring import device_checks
from astra_kernels.tools.measuring.correctness import POISON_BYTE, compare
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES, Tolerance
from astra_kernels.tools.toolchain.device import Device, DeviceBuffer

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32, "fp64": np.float64}


@pytest.fixture(scope="module")
def gpu():
    return device_checks.on(Device(0))


def _scenarios(dtype: str, n: int):
    """(name, output, reference, tolerance) for every stage of the verdict."""
    rng = np.random.default_rng(n)
    ref = rng.standard_normal(n) * 3
    store = DTYPES[dtype]
    tol = DEFAULT_TOLERANCES[dtype]
    yield "rounded", ref.astype(store), ref, tol
    wrong = ref.astype(store)
    wrong[n // 3] = store(ref[n // 3] + 5)
    yield "one wrong", wrong, ref, tol
    tie = ref.astype(store)
    tie[[n // 4, n - 1]] = store(0.0)
    tie_ref = ref.copy()
    tie_ref[[n // 4, n - 1]] = 64.0  # the same excess at two elements: the first is named
    yield "tied worst", tie, tie_ref, tol
    poisoned = ref.astype(store)
    poisoned.view(np.uint8)[poisoned.itemsize * (n // 2):] = POISON_BYTE
    yield "unwritten", poisoned, ref, tol
    special = ref.copy()
    special[::97] = np.inf
    special[5::101] = -np.inf
    special[7::89] = np.nan
    got = special.astype(store)
    yield "matching nan and inf", got, special, tol
    flipped = got.copy()
    flipped[::97][-1] = store(-np.inf)
    yield "inf mismatch", flipped, special, tol
    overflow = ref.astype(store)
    overflow[n - 2] = store(np.inf)
    yield "infinite output", overflow, ref, tol
    at_edge = np.full(n, 2.0)
    edge = at_edge.copy()  # |out - ref| exactly atol + rtol * |ref| where representable: passes
    exact = Tolerance(rtol=0.25, atol=0.5, max_norm_error=1.0)
    edge[1::2] = 3.0
    yield "at the tolerance", edge.astype(store), at_edge, exact
    beyond = edge.copy()
    beyond[n // 2] = 3.5
    yield "past the tolerance", beyond.astype(store), at_edge, exact
    norm_only = Tolerance(rtol=0.1, atol=0.1, max_norm_error=1e-6)
    yield "norm only", (ref * (1 + 1e-3)).astype(store), ref, norm_only


def _comparable(detail: str) -> str:
    return re.sub(r"relative norm error \S+", "relative norm error N", detail)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [1, 257, 2_999_997])
def test_the_gpu_s_verdict_is_the_host_s(gpu, dtype, n):
    for name, out, ref, tol in _scenarios(dtype, n):
        if n == 1 and name in ("tied worst",):
            continue
        shape = (n,) if n % 7 else (7, n // 7)
        out, ref = out.reshape(shape), ref.reshape(shape)
        host = compare("y", out, ref, tol)
        got, reference = DeviceBuffer(out.nbytes), DeviceBuffer(ref.nbytes)
        try:
            got.upload(out)
            reference.upload(np.ascontiguousarray(ref, dtype=np.float64))
            device = gpu.compare("y", got, reference, shape, dtype, tol)
        finally:
            got.close()
            reference.close()
        assert device.passed == host.passed, (name, host.detail, device.detail)
        assert _comparable(device.detail) == _comparable(host.detail), name
        assert device.max_abs_error == host.max_abs_error, name
        if host.norm_error is not None:
            assert device.norm_error == pytest.approx(host.norm_error, rel=1e-9, abs=1e-300), name


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("nbytes", [1, 15, 16, 4099, 1 << 22])
def test_bytes_differ_sees_one_changed_byte_anywhere(gpu, offset, nbytes):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes + offset, dtype=np.uint8)
    a, b = DeviceBuffer(nbytes + offset), DeviceBuffer(nbytes + offset)
    try:
        a.upload(data)
        b.upload(data)
        va, vb = DeviceBuffer.view(a.ptr + offset, nbytes), DeviceBuffer.view(b.ptr + offset, nbytes)
        assert not gpu.differ(va, vb, nbytes)
        for at in {0, nbytes // 2, nbytes - 1}:
            changed = data.copy()
            changed[offset + at] ^= 0x40
            b.upload(changed)
            assert gpu.differ(va, vb, nbytes), at
        b.upload(data)
        assert not gpu.differ(va, vb, nbytes)
    finally:
        a.close()
        b.close()


def test_a_changed_resident_draw_fails_the_candidate_and_is_uploaded_again(gpu):
    from astra_kernels.tools.measuring import probes
    from astra_kernels.tools.measuring.draws import case_key, seeded_case

    problem = probes.copy_request(1 << 16).problem
    case = seeded_case(problem, 1)
    key = case_key(problem, 1)
    resident = gpu.resident(key, problem, lambda: case)
    assert gpu.resident(key, problem, lambda: case) is resident and gpu.intact(resident)
    assert device_checks.intact_check([resident], gpu) is None
    buffer = next(iter(resident.inputs.values()))
    DeviceBuffer.view(buffer.ptr + 1000, 1).upload(np.array([0x5A], dtype=np.uint8))  # a wild write
    assert not gpu.intact(resident)
    failed = device_checks.intact_check([resident], gpu)
    assert failed is not None and not failed.passed and "outside its buffers" in failed.detail
    again = gpu.resident(key, problem, lambda: case)  # forgotten: a fresh upload, intact
    assert again is not resident and gpu.intact(again)
    host = next(iter(case.inputs.values()))
    back = next(iter(again.inputs.values())).download(host.dtype, host.shape)
    assert np.array_equal(back, host)


def test_the_checksum_is_the_position_weighted_sum_of_words(gpu):
    words = np.random.default_rng(5).integers(0, 2**63, 1_000_003, dtype=np.uint64)
    buffer = DeviceBuffer(words.nbytes)
    try:
        buffer.upload(words)
        expected = int((words * (2 * np.arange(words.size, dtype=np.uint64) + 1)).sum(dtype=np.uint64))
        assert gpu.checksum(buffer) == expected
        swapped = words.copy()
        swapped[[10, 11]] = swapped[[11, 10]]  # the same words in another order: another sum
        buffer.upload(swapped)
        assert gpu.checksum(buffer) != expected
    finally:
        buffer.close()


def test_the_range_kernels_copy_fill_and_compare_every_row_of_a_table(gpu):
    """The rotating sets' copies, fills and comparisons in one launch each (evaluation.RANGES_FROM):
    rows of odd sizes and offsets, one of them long enough to span several blocks."""
    from astra_kernels.tools.measuring.device_checks import RangeTable

    sizes = [1, 3, 16, 255, 4099, 1 << 20, 7]
    rng = np.random.default_rng(7)
    data = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    source = [DeviceBuffer(n + 1) for n in sizes]
    target = [DeviceBuffer(n + 1) for n in sizes]
    try:
        for buffer, array in zip(source, data):
            buffer.upload(np.concatenate([[0x11], array]).astype(np.uint8))
        for buffer in target:
            buffer.fill_bytes(0xEE)
        with RangeTable([(t.ptr + 1, s.ptr + 1, n) for t, s, n in zip(target, source, sizes)]) as table:
            gpu.copy_ranges(table)
        for buffer, array in zip(target, data):  # each row copied whole, the byte before it untouched
            back = buffer.download(np.uint8, (array.size + 1,))
            assert back[0] == 0xEE and np.array_equal(back[1:], array)
        pairs = [(t.ptr + 1, s.ptr + 1, n) for t, s, n in zip(target, source, sizes)]
        with RangeTable(pairs) as table:
            assert gpu.ranges_differ(table) == [False] * len(sizes)
        for row in (0, 4, 5):  # one byte changed in some rows: those rows, and only those, differ
            at = sizes[row] - 1
            DeviceBuffer.view(target[row].ptr + 1 + at, 1).upload(np.array([data[row][at] ^ 0x40], dtype=np.uint8))
        with RangeTable(pairs) as table:
            assert gpu.ranges_differ(table) == [i in (0, 4, 5) for i in range(len(sizes))]
        with RangeTable([(t.ptr + 1, n) for t, n in zip(target, sizes)]) as table:
            gpu.fill_ranges_async(table, 0x3C)
            gpu.device.synchronize()
        for buffer, n in zip(target, sizes):
            back = buffer.download(np.uint8, (n + 1,))
            assert back[0] == 0xEE and (back[1:] == 0x3C).all()
    finally:
        for buffer in [*source, *target]:
            buffer.close()
