"""topk_softmax: the reference against a plain-loop implementation, the inputs' planted ties, the
spec and geometry at every shape, and the compile of the baseline and sampled template binaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.kernels_sglang.topk_softmax import reference as ref
from astra_kernels.kernels_sglang.topk_softmax.spec import SPEC
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.templating.template import Exclusion

VARIANTS = ["default", "renormalize"]
DTYPES = ["bf16", "fp16", "fp32"]


def _loops(x: np.ndarray, k: int, variant: str) -> tuple[list[list[float]], list[list[int]]]:
    """Row by row with math.exp and a sort on (-logit, index): the textbook definition."""
    weights, indices = [], []
    for row in x.tolist():
        m = max(row)
        ex = [math.exp(v - m) for v in row]
        total = math.fsum(ex)
        chosen = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        w = [ex[i] / total for i in chosen]
        if variant == "renormalize":
            s = math.fsum(w)
            w = [v / s for v in w]
        weights.append(w)
        indices.append(chosen)
    return weights, indices


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [{"T": 1, "E": 8, "K": 2}, {"T": 12, "E": 6, "K": 6},
                                   {"T": 9, "E": 60, "K": 4}, {"T": 20, "E": 16, "K": 3}])
def test_reference_matches_plain_loops(shape, dtype, variant):
    inputs = ref.make_inputs(np.random.default_rng(3), shape, dtype, variant)
    out = ref.reference(inputs, shape, dtype, variant)
    weights, indices = _loops(inputs["gating"].astype(np.float64), shape["K"], variant)
    assert out["indices"].dtype == np.int32 and out["indices"].shape == (shape["T"], shape["K"])
    assert out["weights"].shape == (shape["T"], shape["K"])
    np.testing.assert_array_equal(out["indices"], np.array(indices))
    np.testing.assert_allclose(out["weights"], np.array(weights), rtol=1e-12, atol=0)


def test_hand_worked_ties_and_zeros():
    shape = {"T": 3, "E": 5, "K": 3}
    g = np.array([[1.0, 3.0, 3.0, 2.0, 3.0],       # a three-way tie on the max: index order
                  [0.5, -0.0, 0.0, -1.0, 0.5],     # ties at both places, -0 equals +0
                  [-2.0, -1.0, -1.0, -1.0, -3.0]],  # the third place is decided by the index
                 dtype=np.float32)
    out = ref.reference({"gating": g}, shape, "fp32", "default")
    np.testing.assert_array_equal(out["indices"], [[1, 2, 4], [0, 4, 1], [1, 2, 3]])
    p0 = np.exp(g[0].astype(np.float64) - 3.0)
    np.testing.assert_allclose(out["weights"][0], p0[[1, 2, 4]] / p0.sum(), rtol=1e-15)
    renorm = ref.reference({"gating": g}, shape, "fp32", "renormalize")["weights"]
    np.testing.assert_allclose(renorm[0], [1 / 3, 1 / 3, 1 / 3], rtol=1e-15)
    np.testing.assert_allclose(renorm.sum(axis=1), 1.0, rtol=1e-15)


def test_selection_is_by_logit_not_by_rounded_probability():
    # fp32 exp maps both logits to exactly 1.0 after the max is subtracted; the exact order of
    # the logits (index 1 is larger) must decide, not the lower index.
    g = np.array([[0.0, 2.0**-30, -5.0, -6.0]], dtype=np.float32)
    assert np.float32(np.exp(np.float32(g[0, 0]) - np.float32(g[0, 1]))) == np.float32(1.0)
    out = ref.reference({"gating": g}, {"T": 1, "E": 4, "K": 1}, "fp32", "default")
    assert out["indices"][0, 0] == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_inputs_are_realistic_fresh_and_tied(dtype):
    shape = {"T": 4000, "E": 64, "K": 8}
    a = ref.make_inputs(np.random.default_rng(1), shape, dtype, "default")["gating"]
    b = ref.make_inputs(np.random.default_rng(2), shape, dtype, "default")["gating"]
    assert a.dtype == numpy_dtype(dtype) and a.shape == (4000, 64)
    assert a.tobytes() != b.tobytes()
    x = a.astype(np.float64)
    assert np.isfinite(x).all()
    assert np.count_nonzero(x) > 0.95 * x.size
    assert 1.0 < np.std(x) < 3.0 and np.abs(x).max() < 20.0
    ranked = -np.sort(-x, axis=1)
    k = shape["K"]
    boundary = ranked[:, k - 1] == ranked[:, k]
    top = ranked[:, 0] == ranked[:, 1]
    # Planted in about 10% of the rows each (more where the storage type rounds values together).
    assert 0.08 < boundary.mean() < 0.5, boundary.mean()
    assert 0.08 < top.mean() < 0.5, top.mean()
    # Coarse rows give exact zeros of both signs.
    zeros = a.view(np.uint16 if a.itemsize == 2 else np.uint32)[x == 0]
    assert (zeros == 0).any() and (zeros != 0).any()
    # Tie-breaking decides the selection somewhere: the k-th and (k+1)-th place tie and the
    # higher-indexed of them must be left out.
    order = np.argsort(-x, axis=1, kind="stable")
    decided = boundary & (order[:, k - 1] < order[:, k])
    assert decided.sum() > 100


@pytest.mark.parametrize("shape", [{"T": 1, "E": 8, "K": 2}, {"T": 1, "E": 60, "K": 4},
                                   {"T": 3, "E": 6, "K": 6}])
def test_single_rows_see_a_tie_at_the_kth_place(shape):
    for seed in (1, 2):
        g = ref.make_inputs(np.random.default_rng(seed), shape, "bf16", "default")["gating"].astype(np.float64)
        ranked = -np.sort(-g[0])
        k = shape["K"]
        hi = k - 1 if k < shape["E"] else k - 2
        assert ranked[hi] == ranked[hi + 1]


def test_spec_shapes_and_baseline_geometry():
    assert SPEC.symbols == ["T", "E", "K"]
    assert set(SPEC.shapes) == {"serving", "odd"}
    assert len(SPEC.shapes["serving"]) == 32
    assert all(s["K"] <= s["E"] for s in SPEC.all_shapes())
    assert not SPEC.anchors  # docs/kernels.md has no measured rows for this kernel
    folder = suite.load("topk_softmax")
    for shape in SPEC.all_shapes():
        for dtype in SPEC.dtypes:
            for variant in SPEC.variants:
                req = suite.request(folder, "baseline", shape, dtype, variant)
                assert not isinstance(req, Exclusion), f"baseline excluded at {shape} {dtype}: {req.reason}"
                assert req.launch.block == (32, 4)
                assert req.problem.bytes_moved == shape["T"] * shape["E"] * numpy_dtype(dtype).itemsize \
                    + shape["T"] * shape["K"] * 8


def test_baseline_matches_sglang_fused_geometry():
    folder = suite.load("topk_softmax")
    # bf16: 16-byte loads of 8; E = 256 is one row per warp, E = 8 one row per lane.
    for e, rows_per_cta in ((8, 128), (64, 16), (128, 8), (256, 4)):
        req = suite.request(folder, "baseline", {"T": 4096, "E": e, "K": 8}, "bf16")
        assert req.launch.grid == (4096 // rows_per_cta,)
        assert req.options.defines["VPT"] == 8 and req.options.defines["FUSED"] == 1
    # fp32, E = 256: two 16-byte loads per lane, a warp per row.
    req = suite.request(folder, "baseline", {"T": 4096, "E": 256, "K": 8}, "fp32")
    assert (req.options.defines["ELTS"], req.options.defines["VPT"], req.options.defines["TPR"]) == (4, 8, 32)
    # Not a power of two: a warp per row in the same launch.
    req = suite.request(folder, "baseline", {"T": 129, "E": 160, "K": 6}, "bf16")
    assert req.options.defines["FUSED"] == 0 and req.options.defines["TPR"] == 32
    assert req.launch.grid == (33,)


def test_default_template_runs_everywhere():
    folder = suite.load("topk_softmax")
    for shape in SPEC.all_shapes():
        for dtype in SPEC.dtypes:
            for variant in SPEC.variants:
                req = suite.request(folder, "template", shape, dtype, variant)
                assert not isinstance(req, Exclusion), f"default excluded at {shape} {dtype}: {req.reason}"
