"""Comparing a kernel's outputs with the float64 reference, and the checks that catch cheating.

Each check is a named outcome so the generator can be told exactly what failed: which output,
how many elements, the worst one and where.
"""

from __future__ import annotations

from collections.abc import Iterable

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


def compare(name: str, out: np.ndarray, expected: np.ndarray, tol: Tolerance) -> Check:
    """Elementwise and norm comparison of one output; NaN where the reference has none fails.

    Integer outputs (indices, counts, raw bits) must match exactly.
    """
    if out.dtype.kind in "iub":
        return _compare_exact(name, out, expected)
    got = out.astype(np.float64)
    ref = expected if expected.dtype == np.float64 else expected.astype(np.float64)
    if got.shape != ref.shape:
        return Check(name=name, passed=False, detail=f"shape {got.shape}, expected {ref.shape}")
    # The common case, a reference with no NaN or infinity, in few passes: large outputs are
    # checked for every candidate of a search, and each pass over 16M elements costs ~50 ms.
    all_finite = bool(np.isfinite(ref).all())
    ref_nan = None if all_finite else np.isnan(ref)
    bad_nan = np.isnan(got) if ref_nan is None else np.isnan(got) & ~ref_nan
    if bad_nan.any():
        first = np.unravel_index(int(np.argmax(bad_nan)), got.shape)
        return Check(
            name=name, passed=False,
            detail=f"{int(bad_nan.sum())} of {got.size} elements are NaN (unwritten or invalid), "
            f"first at {tuple(int(i) for i in first)}",
        )
    if all_finite:
        finite_ref = ref
        diff = np.subtract(got, ref)
        np.abs(diff, out=diff)
    else:
        finite = np.isfinite(ref)
        inf_mismatch = ~finite & ~ref_nan & (got != ref)
        if inf_mismatch.any():
            first = np.unravel_index(int(np.argmax(inf_mismatch)), got.shape)
            return Check(name=name, passed=False,
                         detail=f"{int(inf_mismatch.sum())} infinite reference values differ, "
                         f"first at {tuple(int(i) for i in first)}")
        finite_ref = np.where(finite, ref, 0.0)
        diff = np.where(finite, np.abs(got - finite_ref), 0.0)
    if not np.isfinite(diff).all():
        first = np.unravel_index(int(np.argmax(~np.isfinite(diff))), got.shape)
        return Check(name=name, passed=False,
                     detail=f"non-finite output where the reference is finite, first at "
                     f"{tuple(int(i) for i in first)}")
    excess = np.abs(finite_ref)
    excess *= -tol.rtol
    excess -= tol.atol
    excess += diff  # diff - (atol + rtol * |ref|)
    max_abs = float(diff.max()) if diff.size else 0.0
    ref_norm = float(np.linalg.norm(finite_ref))
    norm_error = float(np.linalg.norm(diff)) / ref_norm if ref_norm > 0 else float(np.linalg.norm(diff))
    failing = excess > 0
    if failing.any() or norm_error > tol.max_norm_error:
        worst = np.unravel_index(int(np.argmax(excess)), got.shape)
        return Check(
            name=name, passed=False, max_abs_error=max_abs, norm_error=norm_error,
            detail=f"{int(failing.sum())} of {got.size} elements outside rtol={tol.rtol} "
            f"atol={tol.atol}; worst at {tuple(int(i) for i in worst)}: got {got[worst]!r}, "
            f"expected {ref[worst]!r}; relative norm error {norm_error:.3g} "
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


def _raw(array: np.ndarray) -> np.ndarray:
    """The bytes of an array as a flat uint8 view (no copy for contiguous arrays)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def unchanged(name: str, before: np.ndarray, after: np.ndarray) -> Check:
    """A read-only input must come back bit for bit."""
    same = before.shape == after.shape and np.array_equal(_raw(before), _raw(after))
    return Check(name=f"{name} unchanged", passed=same,
                 detail="" if same else f"the kernel modified its input {name!r}")


def outputs_differ(first: dict[str, np.ndarray], second: dict[str, np.ndarray],
                   expected_first: dict[str, np.ndarray], expected_second: dict[str, np.ndarray]) -> Check:
    """Two different inputs must give different outputs wherever the reference says they do."""
    for name in first:
        if not np.array_equal(_raw(expected_first[name]), _raw(expected_second[name])) and (
            np.array_equal(_raw(first[name]), _raw(second[name]))
        ):
            return Check(name="fresh outputs", passed=False,
                         detail=f"output {name!r} is identical for two different inputs (cached result?)")
    return Check(name="fresh outputs", passed=True)


def timed_outputs(sets: Iterable[dict[str, np.ndarray]], count: int, checked: dict[str, np.ndarray],
                  expected: dict[str, np.ndarray], tolerances: dict[str, Tolerance]) -> Check:
    """After timing, every input set's outputs must be what the checked launch wrote.

    The checks see two launches and the timing thousands, so a kernel that counts its launches
    in a __device__ variable could work only in the first two and be timed doing nothing: for a
    CUDA source, the analogue of KernelBench's work moved to another stream, where the timer
    never sees it. The sets' outputs are poisoned before timing, so a set that no timed launch
    wrote fails here. Equal bytes pass at once; a kernel whose float sums depend on scheduling
    (atomics) gets the tolerance comparison instead.
    """
    for index, outputs in enumerate(sets):
        for name, got in outputs.items():
            if np.array_equal(_raw(got), _raw(checked[name])):
                continue
            verdict = compare(name, got, expected[name], tolerances[name])
            if not verdict.passed:
                return Check(name="timed outputs", passed=False,
                             detail=f"after timing, output {name!r} of input set {index} (of {count}) is not "
                             f"what the checked launch wrote: {verdict.detail}; the timed launches did "
                             "not do the work the checks saw")
    return Check(name="timed outputs", passed=True,
                 detail=f"all {count} input sets hold the checked outputs after timing")
