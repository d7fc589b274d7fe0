"""merge_attn_states: the reference against a direct formula, its inputs, the launch geometry of
the baseline and template (every output element written exactly once), and compiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.kernels_sglang.merge_attn_states import reference as ref
from astra_kernels.kernels_sglang.merge_attn_states.spec import SPEC
from astra_kernels.suite.schema import KernelSpec
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.templating.template import Exclusion, Instance

NAME = "merge_attn_states"
VARIANTS = list(SPEC.variants)
TINY = [{"N": 1, "HD": 7, "D": 5}, {"N": 3, "HD": 5, "D": 12}, {"N": 4, "HD": 8, "D": 3}]


# (a) the reference against a direct formula ---------------------------------------------------

def _direct(a: float, b: float, x: np.ndarray, y: np.ndarray, base2: bool):
    """The merge without the max trick: base^a and base^b directly (LSEs here are at most ~30,
    so no overflow in float64), with the empty-state rule stated plainly."""
    base = 2.0 if base2 else math.e
    empty_a = math.isinf(a)  # +inf and -inf both mean an empty partial state
    empty_b = math.isinf(b)
    if empty_a and empty_b:
        return np.zeros_like(x), -math.inf
    ea = 0.0 if empty_a else base**a
    eb = 0.0 if empty_b else base**b
    total = ea + eb
    v = [(ea * xi + eb * yi) / total for xi, yi in zip(x, y)]
    s = math.log(total, base)
    return np.array(v), s


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", TINY)
def test_reference_matches_direct_formula(variant, shape):
    rng = np.random.default_rng(3)
    inputs = ref.make_inputs(rng, shape, "fp16", variant)
    out = ref.reference(inputs, shape, "fp16", variant)
    va, vb = inputs["va"].astype(np.float64), inputs["vb"].astype(np.float64)
    for n in range(shape["N"]):
        for h in range(shape["HD"]):
            a, b = float(inputs["sa"][n, h]), float(inputs["sb"][n, h])
            v, s = _direct(a, b, va[n, h], vb[n, h], variant == "base2")
            got_s = out["s"][n, h]
            if math.isinf(s):
                assert got_s == s
            else:
                assert got_s == pytest.approx(s, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(out["v"][n, h], v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
def test_reference_special_cases(variant):
    """Hand-built LSE pairs: ties, one or both sides empty (-inf or +inf)."""
    base2 = variant == "base2"
    inf = np.inf
    pairs = [(1.0, 1.0), (-inf, 2.0), (3.0, -inf), (-inf, -inf), (inf, 4.0), (5.0, inf),
             (inf, -inf), (inf, inf), (0.0, 30.0), (10.0, 9.0)]
    shape = {"N": 1, "HD": len(pairs), "D": 2}
    sa = np.array([[p[0] for p in pairs]], dtype=np.float32)
    sb = np.array([[p[1] for p in pairs]], dtype=np.float32)
    va = np.full((1, len(pairs), 2), 1.0, dtype=np.float16)
    vb = np.full((1, len(pairs), 2), 3.0, dtype=np.float16)
    out = ref.reference({"va": va, "sa": sa, "vb": vb, "sb": sb}, shape, "fp16", variant)
    v, s = out["v"][0, :, 0], out["s"][0]
    ln2 = 1.0 if base2 else math.log(2.0)
    assert v[0] == pytest.approx(2.0) and s[0] == pytest.approx(1.0 + ln2)
    assert v[1] == 3.0 and s[1] == 2.0  # a empty: exactly b
    assert v[2] == 1.0 and s[2] == 3.0  # b empty: exactly a
    assert v[3] == 0.0 and s[3] == -inf  # both empty
    assert v[4] == 3.0 and s[4] == 4.0  # +inf is empty
    assert v[5] == 1.0 and s[5] == 5.0
    assert v[6] == 0.0 and s[6] == -inf
    assert v[7] == 0.0 and s[7] == -inf
    w = 2.0**-30 if base2 else math.exp(-30.0)
    assert v[8] == pytest.approx((w * 1 + 3) / (1 + w), rel=1e-14)
    assert not np.isnan(v).any() and not np.isnan(s).any()


# (b) the inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", SPEC.dtypes)
@pytest.mark.parametrize("variant", VARIANTS)
def test_inputs_are_realistic(dtype, variant):
    shape = {"N": 64, "HD": 40, "D": 72}
    inputs = ref.make_inputs(np.random.default_rng(1), shape, dtype, variant)
    other = ref.make_inputs(np.random.default_rng(2), shape, dtype, variant)
    for name in ("va", "vb"):
        x = inputs[name]
        assert x.dtype == numpy_dtype(dtype) and x.shape == (64, 40, 72)
        f = x.astype(np.float64)
        assert np.isfinite(f).all()
        assert np.count_nonzero(f) > 0.99 * f.size
        assert 0.9 < f.std() < 1.1 and abs(f.mean()) < 0.05
        assert x.tobytes() != other[name].tobytes()
    sa, sb = inputs["sa"], inputs["sb"]
    for x in (sa, sb):
        assert x.dtype == np.float32 and x.shape == (64, 40)
        finite = x[np.isfinite(x)].astype(np.float64)
        assert 3.0 < finite.mean() < 7.0 and 2.0 < finite.std() < 4.0  # ~N(5, 3)
        assert not np.isnan(x).any()
    assert sa.tobytes() != other["sa"].tobytes()
    assert np.count_nonzero(np.isneginf(sa)) >= 5 and np.count_nonzero(np.isneginf(sb)) >= 5
    assert np.count_nonzero(np.isneginf(sa) & np.isneginf(sb)) >= 1
    assert np.count_nonzero(np.isposinf(sa) | np.isposinf(sb)) >= 1
    both_finite = np.isfinite(sa) & np.isfinite(sb)
    assert np.count_nonzero((sa == sb) & both_finite) >= 0.02 * sa.size  # ties
    assert np.count_nonzero(both_finite) > 0.9 * sa.size  # most entries are ordinary merges


@pytest.mark.parametrize("shape", SPEC.shapes["odd"] + SPEC.shapes["serving"][:1])
def test_small_shapes_get_the_special_patterns(shape):
    """Even a shape of 7 entries holds a both-empty and a one-side-empty entry."""
    inputs = ref.make_inputs(np.random.default_rng(5), shape, "bf16", "default")
    a, b = inputs["sa"].ravel(), inputs["sb"].ravel()
    size = a.size
    if size < 2:
        return
    assert np.any(np.isinf(a) & np.isinf(b))
    if size >= 4:
        assert np.any(np.isneginf(a) & np.isfinite(b))
    if size >= 6:
        assert np.any(np.isfinite(a) & np.isneginf(b))
    if size >= 8:
        assert np.any(np.isfinite(a) & (a == b))
    out = ref.reference(inputs, shape, "bf16", "default")
    assert np.isfinite(out["v"]).all()
    assert not np.isnan(out["s"]).any() and np.isneginf(out["s"]).any()


# (c) compiles --------------------------------------------------------------------------------------

def test_default_template_runs_on_astra_and_serving_shapes():
    folder = suite.load(NAME)
    for set_name in ("astra", "serving"):
        for shape in SPEC.shapes[set_name]:
            for variant in VARIANTS:
                env = suite.environment(SPEC, shape, "bf16", variant)
                instance = folder.template.instantiate(folder.template.default, env)
                assert isinstance(instance, Instance), (shape, instance)


# (d) the spec, and the launch geometry ------------------------------------------------------------

def test_spec_validates_and_baseline_runs_everywhere():
    KernelSpec.model_validate(SPEC.model_dump())
    folder = suite.load(NAME)
    for shape in SPEC.all_shapes():
        for dtype in SPEC.dtypes:
            for variant in VARIANTS:
                instance = folder.baseline.instantiate({}, suite.environment(SPEC, shape, dtype, variant))
                assert isinstance(instance, Instance), (shape, instance)
                assert instance.fast_math and instance.max_registers == 128
                assert math.prod(instance.block) <= 1024
                req = suite.request(folder, "baseline", shape, dtype, variant)
                assert not isinstance(req, Exclusion)
                assert req.problem.bytes_moved == sum(p.nbytes for p in req.problem.buffers)


def test_baseline_matches_sglang_launch_on_production_shapes():
    """vec = max(16 / sizeof(T), D / 32): block (16, HD) at D=128 and (32, HD) at D=256, grid N."""
    folder = suite.load(NAME)
    for shape in SPEC.shapes["astra"] + SPEC.shapes["serving"]:
        instance = folder.baseline.instantiate({}, suite.environment(SPEC, shape, "bf16", "default"))
        assert instance.grid == (shape["N"],)
        assert instance.block == (shape["D"] // 8, shape["HD"])
        assert instance.defines["VEC"] == 8


def _template_writes(instance: Instance, shape: dict) -> tuple[np.ndarray, np.ndarray]:
    """How many times the template's threads write each (row, vector) of v and each row of s."""
    d = instance.defines
    threads, lanes, rows_per_group, vec = d["THREADS"], d["LANES"], d["ROWS"], d["VEC"]
    nv, vpl, weights = d["NV"], d["VPL"], d["WEIGHTS"]
    assert nv * vec == shape["D"]
    rows = shape["N"] * shape["HD"]
    gpw = 32 // lanes
    rows_per_warp = gpw * rows_per_group
    assert rows_per_warp <= 32  # shuffle sources are lanes of the warp
    rows_per_cta = threads // 32 * rows_per_warp
    assert instance.block == (threads,)
    block = np.arange(instance.grid[0])[:, None]
    tid = np.arange(threads)[None, :]
    lane, group, l = tid % 32, (tid % 32) // lanes, tid % 32 % lanes
    warp_row0 = block * rows_per_cta + (tid // 32) * rows_per_warp
    v_count = np.zeros((rows, nv), dtype=np.int64)
    s_count = np.zeros(rows, dtype=np.int64)
    for j in range(rows_per_group):
        r = np.broadcast_to(warp_row0 + j * gpw + group, (instance.grid[0], threads))
        for k in range(vpl):
            i = np.broadcast_to(l + k * lanes, r.shape)
            ok = (r < rows) & (i < nv)
            np.add.at(v_count, (r[ok], i[ok]), 1)
        if weights == 0:
            ok = (r < rows) & (np.broadcast_to(l, r.shape) == 0)
            np.add.at(s_count, r[ok], 1)
    if weights == 1:
        r = np.broadcast_to(warp_row0 + lane, (instance.grid[0], threads))
        ok = (np.broadcast_to(lane, r.shape) < rows_per_warp) & (r < rows)
        np.add.at(s_count, r[ok], 1)
    return v_count, s_count


def test_template_writes_every_element_once():
    """Every configuration the constraints admit, at every shape small enough to enumerate."""
    folder = suite.load(NAME)
    shapes = [s for s in SPEC.all_shapes() if s["N"] * s["HD"] <= 16 * 64]
    checked = 0
    for shape in shapes:
        env = suite.environment(SPEC, shape, "bf16", "default")
        for config in folder.template.all_configs():
            instance = folder.template.instantiate(config, env)
            if isinstance(instance, Exclusion):
                continue
            v_count, s_count = _template_writes(instance, shape)
            assert (v_count == 1).all() and (s_count == 1).all(), (shape, config)
            checked += 1
    assert checked > 500


def test_baseline_writes_every_element_once():
    folder = suite.load(NAME)
    for shape in SPEC.all_shapes():
        instance = folder.baseline.instantiate({}, suite.environment(SPEC, shape, "bf16", "default"))
        bdx, bdy = instance.block
        vec = instance.defines["VEC"]
        nvec = shape["D"] // vec
        assert nvec * vec == shape["D"]
        count = np.zeros((shape["HD"], nvec), dtype=np.int64)
        for ty in range(bdy):
            for head in range(ty, shape["HD"], bdy):
                for tx in range(bdx):
                    count[head, tx:nvec:bdx] += 1
        assert (count == 1).all(), shape  # per token; the grid is one CTA per token
        assert instance.grid == (shape["N"],)


@pytest.mark.parametrize("dtype", SPEC.dtypes)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fp32_emulation_of_the_kernels_passes_the_tolerances(dtype, variant):
    """The kernels' arithmetic in float32 (scales once per row, output rounded to the storage
    type), checked the way the harness checks a GPU result: the default tolerances hold."""
    from astra_kernels.tools.measuring.correctness import compare
    from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES

    shape = {"N": 16, "HD": 40, "D": 100}
    inputs = ref.make_inputs(np.random.default_rng(7), shape, dtype, variant)
    expected = ref.reference(inputs, shape, dtype, variant)
    exp = np.exp2 if variant == "base2" else np.exp
    log = np.log2 if variant == "base2" else np.log
    f32 = np.float32
    a = np.where(np.isinf(inputs["sa"]), f32(-np.inf), inputs["sa"])
    b = np.where(np.isinf(inputs["sb"]), f32(-np.inf), inputs["sb"])
    m = np.maximum(a, b)
    empty = np.isneginf(m)
    with np.errstate(invalid="ignore", divide="ignore"):
        wa = np.where(empty, f32(0), exp(a - m)).astype(f32)
        wb = np.where(empty, f32(0), exp(b - m)).astype(f32)
        total = (wa + wb).astype(f32)
        pa = np.where(empty, f32(0), wa * (f32(1) / total)).astype(f32)
        pb = np.where(empty, f32(0), wb * (f32(1) / total)).astype(f32)
        s = np.where(empty, f32(-np.inf), m + log(total)).astype(f32)
    v = (inputs["va"].astype(f32) * pa[..., None] + inputs["vb"].astype(f32) * pb[..., None]).astype(numpy_dtype(dtype))
    for name, got, tol_dtype in (("v", v, dtype), ("s", s, "fp32")):
        check = compare(name, got, expected[name], DEFAULT_TOLERANCES[tol_dtype])
        assert check.passed, check.detail
