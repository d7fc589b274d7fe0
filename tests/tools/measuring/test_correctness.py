import ml_dtypes
import numpy as np
import pytest

from astra_kernels.tools.measuring.correctness import POISON_BYTE, compare, outputs_differ, unchanged
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES, Tolerance
from astra_kernels.tools.toolchain.timing import rotation_count

BF16 = DEFAULT_TOLERANCES["bf16"]


def bf16(values):
    return np.asarray(values, dtype=np.float64).astype(ml_dtypes.bfloat16)


def test_rounded_reference_passes():
    ref = np.random.default_rng(0).standard_normal((64, 128))
    check = compare("y", bf16(ref), ref, BF16)
    assert check.passed, check.detail
    assert 0 < check.norm_error < 5e-3


def test_one_wrong_element_fails_and_is_located():
    ref = np.random.default_rng(1).standard_normal((8, 16))
    out = bf16(ref)
    out[3, 5] = bf16(ref[3, 5] + 1.0)
    check = compare("y", out, ref, BF16)
    assert not check.passed
    assert "(3, 5)" in check.detail and "1 of 128" in check.detail


def test_poisoned_unwritten_elements_fail_as_nan():
    ref = np.random.default_rng(2).standard_normal(100)
    out = bf16(ref)
    raw = out.view(np.uint8)
    raw[20:40] = POISON_BYTE  # elements 10..19 never written
    check = compare("y", out, ref, BF16)
    assert not check.passed and "NaN" in check.detail and "(10,)" in check.detail
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3"):
        from astra_kernels.tools.toolchain.dtypes import numpy_dtype
        poisoned = np.full(4, POISON_BYTE, np.uint8).view(numpy_dtype(name))
        assert np.isnan(poisoned.astype(np.float64)).all(), name


def test_nan_in_reference_must_be_matched_and_inf_exactly():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare("y", ref.astype(np.float32), ref, DEFAULT_TOLERANCES["fp32"]).passed
    wrong = np.array([np.nan, 1e30, -np.inf, 1.0], np.float32)
    assert not compare("y", wrong, ref, DEFAULT_TOLERANCES["fp32"]).passed


def test_norm_bound_catches_a_uniform_bias():
    ref = np.random.default_rng(3).standard_normal(4096)
    tol = Tolerance(rtol=0.1, atol=0.1, max_norm_error=1e-3)
    check = compare("y", (ref + 0.05).astype(np.float32), ref, tol)
    assert not check.passed and "norm" in check.detail


@pytest.mark.parametrize("case", ["pass", "bad nan", "inf mismatch", "non-finite", "tolerance", "norm"])
def test_a_comparison_in_pieces_names_what_one_pass_would(monkeypatch, case):
    """Large outputs are compared in pieces on threads; counts, first and worst positions and
    norms must come out as if the array had been one piece, whichever pieces hold the faults."""
    from astra_kernels.tools.measuring import correctness

    rng = np.random.default_rng(4)
    ref = rng.standard_normal((37, 29))
    ref[2, 3], ref[30, 1] = np.nan, np.inf
    out = ref.astype(np.float32)
    if case == "bad nan":
        out[5, 7] = out[33, 2] = np.nan
    elif case == "inf mismatch":
        out[30, 1] = 1.0
    elif case == "non-finite":
        out[20, 20] = np.inf
    elif case == "tolerance":
        out[4, 4] += 0.5
        out[36, 28] += 2.0
    elif case == "norm":
        out += 2e-5
    tol = Tolerance(rtol=1e-4, atol=1e-4, max_norm_error=1e-5)
    monkeypatch.setattr(correctness, "_PIECE", 1 << 30)
    whole = compare("y", out, ref, tol)
    monkeypatch.setattr(correctness, "_PIECE", 7)
    pieces = compare("y", out, ref, tol)
    assert whole.passed == (case == "pass")
    assert pieces.passed == whole.passed and pieces.max_abs_error == whole.max_abs_error
    assert pieces.detail.split("relative norm error")[0] == whole.detail.split("relative norm error")[0]
    if whole.norm_error is not None:
        assert pieces.norm_error == pytest.approx(whole.norm_error, rel=1e-12)


def test_integers_compare_exactly():
    ref = np.arange(10, dtype=np.int32)
    assert compare("i", ref.copy(), ref, DEFAULT_TOLERANCES["fp32"]).passed
    off = ref.copy()
    off[7] = 8
    check = compare("i", off, ref, DEFAULT_TOLERANCES["fp32"])
    assert not check.passed and "(7,)" in check.detail


def test_unchanged_and_fresh_outputs():
    a = np.arange(6, dtype=np.float32)
    assert unchanged("x", a, a.copy()).passed
    b = a.copy()
    b[0] = 9
    assert not unchanged("x", a, b).passed
    exp1, exp2 = {"y": a}, {"y": a + 1}
    assert outputs_differ({"y": a}, {"y": a + 1}, exp1, exp2).passed
    assert not outputs_differ({"y": a}, {"y": a.copy()}, exp1, exp2).passed
    assert outputs_differ({"y": a}, {"y": a.copy()}, exp1, {"y": a}).passed  # same reference: fine


@pytest.mark.parametrize("set_bytes,expected", [(1 << 30, 2), (1 << 20, 256), (1, 4096), (100 << 20, 3)])
def test_rotation_keeps_l2_cold(set_bytes, expected):
    assert rotation_count(set_bytes) == expected


def test_worker_keeps_draws_up_to_its_byte_budget_and_always_the_last_two(monkeypatch):
    """Candidates share their seeded draws; the worker computes each once, also when the
    candidates of many shapes come interleaved (a cluster's worker), until the draws kept pass
    CASES_KEPT_BYTES; the oldest go first, the last two stay whatever their size."""
    from astra_kernels.tools.measuring import draws, probes

    monkeypatch.setattr(draws, "_CASES", type(draws._CASES)())
    problems = [probes.copy_request(1 << n).problem for n in (12, 13, 14)]
    first = {(i, seed): draws.seeded_case(p, seed) for i, p in enumerate(problems) for seed in (1, 2)}
    assert first[0, 1].inputs["src"].tobytes() != first[0, 2].inputs["src"].tobytes()
    for (i, seed), case in first.items():  # interleaved: every draw still kept
        assert draws.seeded_case(problems[i], seed) is case
    sizes = {key: draws.case_bytes(case) for key, case in first.items()}
    # a budget that holds the two largest draws and no more: the others, least recently used, go
    monkeypatch.setattr(draws, "CASES_KEPT_BYTES", sizes[2, 1] + sizes[2, 2])
    draws.seeded_case(problems[2], 1)
    new = draws.seeded_case(probes.copy_request(1 << 15).problem, 1)  # larger than the budget
    assert list(draws._CASES.values()) == [first[2, 1], new]  # the last two, over budget or not
    assert draws.seeded_case(problems[0], 1) is not first[0, 1]  # pushed out, drawn again


@pytest.mark.parametrize("set_bytes", [1, 1 << 20, 1 << 30])
def test_warm_l2_replays_one_set(set_bytes):
    assert rotation_count(set_bytes, "warm") == 1


def test_draws_kept_are_a_share_of_the_host_s_memory_split_among_its_gpus(monkeypatch, tmp_path):
    """Without CASES_KEPT_BYTES set, a worker keeps draws up to a quarter of the host's memory over
    its GPUs (each runs a worker), never under 4 GiB: silu_and_mul 16384x28672's two draws alone are
    5.6 GB."""
    from astra_kernels.tools.measuring import draws

    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (256 << 30) // 4096}
    monkeypatch.setattr(draws.os, "sysconf", lambda name: pages[name])
    gpus = tmp_path / "gpus"
    for bus in ("0000:18:00.0", "0000:2a:00.0"):
        (gpus / bus).mkdir(parents=True)
    monkeypatch.setattr(draws, "HOST_GPUS", gpus)
    monkeypatch.setattr(draws, "CGROUP_MEMORY", tmp_path / "no cgroup")
    assert draws.cases_kept_bytes() == (256 << 30) // 8
    (tmp_path / "memory.max").write_text(f"{64 << 30}\n")  # a container's limit counts
    monkeypatch.setattr(draws, "CGROUP_MEMORY", tmp_path / "memory.max")
    assert draws.cases_kept_bytes() == (64 << 30) // 8
    (tmp_path / "memory.max").write_text("max\n")
    assert draws.cases_kept_bytes() == (256 << 30) // 8
    monkeypatch.setattr(draws, "HOST_GPUS", tmp_path / "none")  # no NVIDIA driver here: one share
    assert draws.cases_kept_bytes() == (256 << 30) // 4
    pages["SC_PHYS_PAGES"] = (8 << 30) // 4096
    assert draws.cases_kept_bytes() == 4 << 30
    monkeypatch.setattr(draws, "CASES_KEPT_BYTES", 12345)
    assert draws.cases_kept_bytes() == 12345


def test_the_gpu_s_partial_findings_merge_as_one_pass_would():
    """device_checks.merged: each block's counts and sums added, its first indices' lowest (none
    found is all ones), the largest excess at the lowest index among equals."""
    from astra_kernels.tools.measuring.device_checks import FOUND_WORDS, NONE, merged

    rows = np.zeros((3, FOUND_WORDS), dtype=np.uint64)
    doubles = rows.view(np.float64)
    rows[:, 0] = [0, 2, 1]
    rows[:, 1] = [NONE, 40, 7]
    rows[:, 2] = 0
    rows[:, 3] = NONE
    rows[:, 4] = [NONE, 41, NONE]
    rows[:, 5] = [1, 0, 3]
    rows[:, 6] = [9, 5, 2]
    doubles[:, 7] = [0.5, 0.25, 0.75]
    doubles[:, 8] = [1.0, 2.0, 3.0]
    doubles[:, 9] = [4.0, 5.0, 6.0]
    doubles[:, 10] = [0.125, 0.5, 0.5]  # a tie between blocks: the lower element index wins
    found = merged(rows)
    assert (found.bad_nan, found.first_bad_nan, found.inf_mismatch, found.first_inf_mismatch) == (3, 7, 0, -1)
    assert (found.first_nonfinite, found.failing, found.worst, found.worst_excess) == (41, 4, 2, 0.5)
    assert (found.max_abs, found.diff_sq, found.ref_sq) == (0.75, 6.0, 15.0)
    empty = np.zeros((1, FOUND_WORDS), dtype=np.uint64)
    empty[0, [1, 3, 4, 6]] = NONE
    empty.view(np.float64)[0, 10] = -np.inf
    assert merged(empty).worst == -1 and merged(empty).first_bad_nan == -1
