"""Comparing a kernel's outputs with the float64 reference, and the checks that catch cheating.

Each check is a named outcome so the generator can be told exactly what failed: which output,
how many elements, the worst one and where.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from .problem import Tolerance


class Check(BaseModel):
    name: str
    passed: bool
    detail: str = ""
    max_abs_error: float | None = None
    norm_error: float | None = None


# Repeated, this byte reads as NaN in every float type (all exponent and mantissa bits set), so
# an output element the kernel never wrote fails the comparison.
POISON_BYTE = 0xFF


# Elements per piece of a comparison: a piece's float64 temporaries (2 MB each) stay in the CPU's
# caches, and the pieces run on a thread pool (NumPy's loops release the GIL). A large shape's
# outputs are compared for every candidate of a search, and 134M elements in whole-array passes
# took 7.5 s an output on the H200 node; that, not the GPU, set how fast large shapes tuned.
_PIECE = 1 << 18
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="compare")
    return _POOL


@dataclass
class Findings:
    """What a comparison found, or one piece of it: `_merge` combines pieces in order, so the verdict
    and every index it names are those of a single pass over the whole array. The GPU's comparison
    (device_checks.py) fills the same fields, -1 meaning none found, and `verdict` reads either."""

    bad_nan: int = 0
    first_bad_nan: int = -1
    inf_mismatch: int = 0
    first_inf_mismatch: int = -1
    first_nonfinite: int = -1
    max_abs: float = 0.0
    diff_sq: float = 0.0
    ref_sq: float = 0.0
    failing: int = 0
    worst: int = -1
    worst_excess: float = -np.inf


def _piece(got: np.ndarray, ref: np.ndarray, start: int, tol: Tolerance) -> Findings:
    """One piece's findings; a stage that fails stops the piece, as it stops the whole verdict."""
    found = Findings()
    got = got.astype(np.float64)
    ref = ref if ref.dtype == np.float64 else ref.astype(np.float64)
    all_finite = bool(np.isfinite(ref).all())
    ref_nan = None if all_finite else np.isnan(ref)
    bad_nan = np.isnan(got) if ref_nan is None else np.isnan(got) & ~ref_nan
    if bad_nan.any():
        found.bad_nan, found.first_bad_nan = int(bad_nan.sum()), start + int(np.argmax(bad_nan))
        return found
    if all_finite:
        finite_ref = ref
        diff = np.subtract(got, ref)
        np.abs(diff, out=diff)
    else:
        finite = np.isfinite(ref)
        inf_mismatch = ~finite & ~ref_nan & (got != ref)
        if inf_mismatch.any():
            found.inf_mismatch = int(inf_mismatch.sum())
            found.first_inf_mismatch = start + int(np.argmax(inf_mismatch))
            return found
        finite_ref = np.where(finite, ref, 0.0)
        diff = np.where(finite, np.abs(got - finite_ref), 0.0)
    nonfinite = ~np.isfinite(diff)
    if nonfinite.any():
        found.first_nonfinite = start + int(np.argmax(nonfinite))
        return found
    excess = np.abs(finite_ref)
    excess *= -tol.rtol
    excess -= tol.atol
    excess += diff  # diff - (atol + rtol * |ref|)
    found.max_abs = float(diff.max()) if diff.size else 0.0
    squares = np.square(diff)  # not np.dot: BLAS threads inside the pool's threads oversubscribe
    found.diff_sq = float(squares.sum())
    found.ref_sq = float(np.square(finite_ref, out=squares).sum())
    found.failing = int(np.count_nonzero(excess > 0))
    if excess.size:
        at = int(np.argmax(excess))
        found.worst, found.worst_excess = start + at, float(excess[at])
    return found


def _merge(pieces: list[Findings]) -> Findings:
    total = Findings()
    for p in pieces:
        for count, first in (("bad_nan", "first_bad_nan"), ("inf_mismatch", "first_inf_mismatch")):
            if getattr(p, count):
                setattr(total, count, getattr(total, count) + getattr(p, count))
                if getattr(total, first) < 0:
                    setattr(total, first, getattr(p, first))
        if p.first_nonfinite >= 0 and total.first_nonfinite < 0:
            total.first_nonfinite = p.first_nonfinite
        total.max_abs = max(total.max_abs, p.max_abs)
        total.diff_sq += p.diff_sq
        total.ref_sq += p.ref_sq
        total.failing += p.failing
        if p.worst_excess > total.worst_excess:
            total.worst, total.worst_excess = p.worst, p.worst_excess
    return total


def compare(name: str, out: np.ndarray, expected: np.ndarray, tol: Tolerance) -> Check:
    """Elementwise and norm comparison of one output; NaN where the reference has none fails.

    Integer outputs (indices, counts, raw bits) must match exactly.
    """
    if out.dtype.kind in "iub":
        return _compare_exact(name, out, expected)
    if out.shape != expected.shape:
        return Check(name=name, passed=False, detail=f"shape {out.shape}, expected {expected.shape}")
    got, ref = np.ascontiguousarray(out).reshape(-1), np.ascontiguousarray(expected).reshape(-1)
    return verdict(name, findings(got, ref, tol), out.shape, tol, lambda at: (float(got[at]), float(ref[at])))


def findings(got: np.ndarray, ref: np.ndarray, tol: Tolerance) -> Findings:
    """What comparing two flat arrays finds, in pieces on the thread pool."""
    work = [(got[s:s + _PIECE], ref[s:s + _PIECE], s, tol) for s in range(0, got.size, _PIECE)]
    return _merge(list(_pool().map(lambda args: _piece(*args), work)) if len(work) > 1 else [_piece(*w) for w in work])


def verdict(name: str, found: Findings, shape: tuple[int, ...], tol: Tolerance,
            values_at: Callable[[int], tuple[float, float]]) -> Check:
    """The check one comparison's findings make, wherever they were found (here, or on the GPU by
    tools/measuring/device_checks.py): the first failing stage names itself, else the errors
    against the tolerance. `values_at(flat index)` gives (output, reference) at the worst element."""
    size = math.prod(shape)

    def where(flat: int) -> tuple[int, ...]:
        return tuple(int(i) for i in np.unravel_index(flat, shape))

    if found.bad_nan:
        return Check(name=name, passed=False,
                     detail=f"{found.bad_nan} of {size} elements are NaN (unwritten or invalid), "
                     f"first at {where(found.first_bad_nan)}")
    if found.inf_mismatch:
        return Check(name=name, passed=False,
                     detail=f"{found.inf_mismatch} infinite reference values differ, "
                     f"first at {where(found.first_inf_mismatch)}")
    if found.first_nonfinite >= 0:
        return Check(name=name, passed=False,
                     detail=f"non-finite output where the reference is finite, first at "
                     f"{where(found.first_nonfinite)}")
    ref_norm = math.sqrt(found.ref_sq)
    diff_norm = math.sqrt(found.diff_sq)
    norm_error = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    max_abs = found.max_abs
    if found.failing or norm_error > tol.max_norm_error:
        worst = found.worst
        got_worst, ref_worst = values_at(worst)
        return Check(
            name=name, passed=False, max_abs_error=max_abs, norm_error=norm_error,
            detail=f"{found.failing} of {size} elements outside rtol={tol.rtol} "
            f"atol={tol.atol}; worst at {where(worst)}: got {got_worst!r}, "
            f"expected {ref_worst!r}; relative norm error {norm_error:.3g} "
            f"(limit {tol.max_norm_error})",
        )
    return Check(name=name, passed=True, max_abs_error=max_abs, norm_error=norm_error,
                 detail=f"max abs error {max_abs:.3g}, relative norm error {norm_error:.3g}")


def _compare_exact(name: str, out: np.ndarray, expected: np.ndarray) -> Check:
    if out.shape != expected.shape:
        return Check(name=name, passed=False, detail=f"shape {out.shape}, expected {expected.shape}")
    wrong = out != expected
    if wrong.any():
        first = np.unravel_index(int(np.argmax(wrong)), out.shape)
        return Check(name=name, passed=False,
                     detail=f"{int(wrong.sum())} of {out.size} elements differ, first at "
                     f"{tuple(int(i) for i in first)}: got {out[first]!r}, expected {expected[first]!r}")
    return Check(name=name, passed=True, max_abs_error=0.0, norm_error=0.0, detail="exact")


def raw_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of an array as a flat uint8 view (no copy for contiguous arrays)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def unchanged(name: str, before: np.ndarray, after: np.ndarray) -> Check:
    """A read-only input must come back bit for bit."""
    return unchanged_verdict(name, before.shape == after.shape and np.array_equal(raw_bytes(before), raw_bytes(after)))


def unchanged_verdict(name: str, same: bool) -> Check:
    """`unchanged`'s check, from whether the input came back the same (compared here or on the GPU)."""
    return Check(name=f"{name} unchanged", passed=same,
                 detail="" if same else f"the kernel modified its input {name!r}")


def outputs_differ(first: dict[str, np.ndarray], second: dict[str, np.ndarray],
                   expected_first: dict[str, np.ndarray], expected_second: dict[str, np.ndarray]) -> Check:
    """Two different inputs must give different outputs wherever the reference says they do."""
    return fresh_outputs(
        list(first),
        references_differ=lambda name: not np.array_equal(raw_bytes(expected_first[name]), raw_bytes(expected_second[name])),
        outputs_same=lambda name: np.array_equal(raw_bytes(first[name]), raw_bytes(second[name])))


def fresh_outputs(names: Iterable[str], references_differ: Callable[[str], bool],
                  outputs_same: Callable[[str], bool]) -> Check:
    """outputs_differ's verdict from its two questions, asked of host arrays or of device buffers."""
    for name in names:
        if references_differ(name) and outputs_same(name):
            return Check(name="fresh outputs", passed=False,
                         detail=f"output {name!r} is identical for two different inputs (cached result?)")
    return Check(name="fresh outputs", passed=True)


def timed_outputs(sets: Iterable[dict[str, np.ndarray]], count: int, checked: dict[str, np.ndarray],
                  expected: dict[str, np.ndarray], tolerances: dict[str, Tolerance]) -> Check:
    """timed_verdict on host arrays: each set's outputs against the checked launch's (one draw)."""
    return timed_verdict(
        sets, count,
        same=lambda index, name, got: np.array_equal(raw_bytes(got), raw_bytes(checked[name])),
        judge=lambda index, name, got: compare(name, got, expected[name], tolerances[name]))


def timed_verdict(sets: Iterable[dict], count: int, same: Callable[[int, str, object], bool],
                  judge: Callable[[int, str, object], Check], draws: int = 1) -> Check:
    """After timing, every input set's outputs must be its draw's correct outputs.

    The checks see two launches and the timing thousands, so a kernel that counts its launches
    in a __device__ variable could work only in the first two and be timed doing nothing: for a
    CUDA source, the analogue of KernelBench's work moved to another stream, where the timer
    never sees it. And a kernel that returns early when its output already holds values would be
    timed doing nothing from the second replay on. The sets' outputs are filled with finite values
    before every replay (evaluation.fill_byte), so a set the last replay did not write fails here,
    whatever the kernel tests its output for. `same(index, name, output)`: bytes equal to what is
    known correct for set `index` pass at once; else `judge(index, name, output)` compares with the
    draw's reference (a kernel whose float sums depend on scheduling, atomics, needs the tolerance).
    `draws`: how many distinct draws the sets hold (set i holds draw i % draws).
    """
    for index, outputs in enumerate(sets):
        for name, got in outputs.items():
            if same(index, name, got):
                continue
            verdict = judge(index, name, got)
            if not verdict.passed:
                return Check(name="timed outputs", passed=False,
                             detail=f"after timing, output {name!r} of input set {index} (of {count}) is not "
                             f"what its draw's checked outputs are: {verdict.detail}; the timed launches did "
                             "not do the work the checks saw (each set's outputs were filled with finite values "
                             "before every replay: a kernel that skips work when its output already holds values, "
                             "or works only in some launches, leaves them)")
    held = f"its draw's ({draws} distinct draws)" if draws > 1 else "the checked"
    return Check(name="timed outputs", passed=True,
                 detail=f"all {count} input sets hold {held} outputs after timing")


# A time under the physical floor by more than this (or the timing's spread, if larger) is flagged:
# the mix probe is the best of several rounds, and no honest kernel of this project has been
# measured above 99% of its mix's bandwidth (docs/benchmarks.md), so 10% leaves room for noise and
# for a probe that streams a mix a little worse than a kernel can, and none for skipped work.
FLOOR_MARGIN = 0.10


def floor_verdict(timing, floor_us: float, margin: float = FLOOR_MARGIN) -> Check:
    """Whether a median time is possible for the bytes its kernel must move: below `floor_us`
    (bytes moved over the measured bandwidth of the kernel's read/write mix) by more than the
    timing's spread or `margin`, it did not move them: it skipped work, or read data some earlier
    launch left in L2, and its time is no result. `timing`: a Timing (median_us, spread)."""
    allowed = floor_us * (1 - max(timing.spread, margin))
    if timing.median_us < allowed:
        return Check(name="physical floor", passed=False,
                     detail=f"faster than its bytes allow: {timing.median_us:.2f} us is "
                     f"{floor_us - timing.median_us:.2f} us under the floor of {floor_us:.2f} us (the bytes it "
                     f"must move over the measured bandwidth of its read/write mix), beyond the timing spread "
                     f"({timing.spread:.1%}) and the {margin:.0%} margin: it cannot have done its work in the "
                     "timed launches (skipped work, or reused what an earlier launch left in L2)")
    return Check(name="physical floor", passed=True,
                 detail=f"{timing.median_us:.2f} us against a floor of {floor_us:.2f} us")
