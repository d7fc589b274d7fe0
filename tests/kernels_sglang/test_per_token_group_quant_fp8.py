"""per_token_group_quant_fp8: the reference, the inputs, the tolerance and the compiled kernels, on CPU."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.suite.schema import KernelSpec
from astra_kernels.tools.measuring.correctness import compare
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.templating.template import Exclusion

NAME = "per_token_group_quant_fp8"
E4M3 = ml_dtypes.float8_e4m3fn
TINY_SHAPES = [{"T": 1, "H": 128}, {"T": 3, "H": 384}, {"T": 2, "H": 640}, {"T": 1, "H": 1152}]
MEDIUM = {"T": 64, "H": 7168}


@pytest.fixture(scope="module")
def folder():
    return suite.load(NAME)


def _case(folder, shape, dtype, seed=1):
    inputs = folder.reference.make_inputs(np.random.default_rng(seed), shape, dtype, "default")
    return inputs, folder.reference.reference(inputs, shape, dtype, "default")


def _loop_reference(x: np.ndarray, eps: float):
    """Straight from the definition, one Python float at a time."""
    t, h = x.shape
    q = np.zeros((t, h))
    scales = np.zeros((t, h // 128))
    for i in range(t):
        for j in range(h // 128):
            group = [float(v) for v in x[i, j * 128:(j + 1) * 128]]
            absmax = max(abs(v) for v in group)
            s = max(eps, absmax) / 448.0
            scales[i, j] = s
            for k, v in enumerate(group):
                q[i, j * 128 + k] = min(448.0, max(-448.0, v / s))
    return q, scales


def _kernel_like(x: np.ndarray, rounding: str = "rne", scale_factor: float = 1.0):
    """What a correct kernel stores: fp32 s and x * (1 / s), then e4m3 (or a wrong variation)."""
    t, h = x.shape
    xg = x.astype(np.float32).reshape(t, h // 128, 128)
    absmax = np.maximum(np.abs(xg).max(axis=2), np.float32(1e-10))
    s = (absmax / np.float32(448.0)).astype(np.float32) * np.float32(scale_factor)
    inv = (np.float32(1.0) / s).astype(np.float32)
    v = np.clip(xg * inv[:, :, None], -448.0, 448.0).astype(np.float32).reshape(t, h)
    q = v.astype(E4M3)  # ml_dtypes rounds to nearest even
    codes = q.view(np.uint8).copy()
    magnitude = codes & 0x7F
    if rounding == "up1":  # one code step further from zero everywhere (448 stays 448)
        codes = np.where(magnitude < 0x7E, codes + 1, codes).astype(np.uint8)
    elif rounding == "trunc":  # round toward zero
        over = (np.abs(q.astype(np.float32)) > np.abs(v)) & (magnitude > 0)
        codes[over] -= 1
    return codes.view(E4M3), s


# (a) the reference against an independent implementation ---------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", TINY_SHAPES, ids=lambda s: f"{s['T']}x{s['H']}")
def test_reference_matches_loops(folder, shape, dtype):
    from astra_kernels.kernels_sglang.per_token_group_quant_fp8.reference import EPS_F32
    for seed in (1, 2, 3):
        inputs, expected = _case(folder, shape, dtype, seed)
        q, scales = _loop_reference(inputs["x"], EPS_F32)
        np.testing.assert_allclose(expected["q"], q, rtol=1e-15, atol=0)
        np.testing.assert_allclose(expected["scales"], scales, rtol=1e-15, atol=0)
        assert expected["q"].dtype == np.float64 and expected["scales"].dtype == np.float64


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_reference_from_another_angle(folder, dtype):
    """q * s gives x back (the clamp never binds in exact arithmetic), every group with
    absmax >= eps reaches exactly +-448, a below-eps group stays under 448 and uses eps / 448."""
    from astra_kernels.kernels_sglang.per_token_group_quant_fp8.reference import EPS_F32
    inputs, expected = _case(folder, MEDIUM, dtype)
    x = inputs["x"].astype(np.float64)
    t, h = x.shape
    s = expected["scales"]
    q = expected["q"]
    np.testing.assert_allclose(q.reshape(t, -1, 128) * s[:, :, None], x.reshape(t, -1, 128),
                               rtol=1e-14, atol=1e-300)
    absmax = np.abs(x.reshape(t, -1, 128)).max(axis=2)
    qmax = np.abs(q.reshape(t, -1, 128)).max(axis=2)
    normal = absmax >= EPS_F32
    np.testing.assert_allclose(qmax[normal], 448.0, rtol=1e-14)
    assert (qmax[~normal] < 448.0).all()
    np.testing.assert_array_equal(s[~normal], EPS_F32 / 448.0)
    np.testing.assert_allclose(s[normal], absmax[normal] / 448.0, rtol=1e-15)


# (b) the inputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_make_inputs(folder, dtype):
    spec = folder.spec
    for shape in spec.all_shapes():
        if shape["T"] * shape["H"] > 2 ** 22:
            continue  # the serving shapes are tested for speed by the worker, not here
        inputs = folder.reference.make_inputs(np.random.default_rng(1), shape, dtype, "default")
        assert set(inputs) == {"x"}
        x = inputs["x"]
        assert x.dtype == numpy_dtype(dtype) and x.shape == (shape["T"], shape["H"])
        xf = x.astype(np.float64)
        assert np.isfinite(xf).all() and np.abs(xf).max() <= 1000.0
        assert np.abs(xf[0, :128]).max() > 1e-3  # group 0 of token 0 is always an ordinary group
        other = folder.reference.make_inputs(np.random.default_rng(2), shape, dtype, "default")["x"]
        assert x.tobytes() != other.tobytes()
        e1 = folder.reference.reference(inputs, shape, dtype, "default")
        e2 = folder.reference.reference({"x": other}, shape, dtype, "default")
        assert e1["q"].tobytes() != e2["q"].tobytes() and e1["scales"].tobytes() != e2["scales"].tobytes()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_inputs_exercise_scales_saturation_and_subnormals(folder, dtype):
    inputs, expected = _case(folder, MEDIUM, dtype)
    x = inputs["x"].astype(np.float64)
    t, h = x.shape
    groups = x.reshape(t, -1, 128)
    absmax = np.abs(groups).max(axis=2)
    assert (absmax >= 100).sum() >= 100          # outlier groups (values up to 1000)
    assert ((absmax < 0.05) & (absmax > 1e-6)).sum() >= 100   # tiny groups (~1e-3)
    below = absmax < 1e-10
    assert below.sum() >= 10                     # groups where eps decides the scale
    if dtype == "fp16":
        assert (groups[below] == 0).all()        # fp16 cannot hold |x| < 1e-10 but zero
    else:
        assert (np.abs(groups[below]) > 0).any()
    s = expected["scales"]
    assert s.max() / s[~below].min() > 1e5       # scales vary widely
    # the extremes land at +-448 after rounding to e4m3, and many groups hold both signs
    q8 = expected["q"].astype(np.float32).astype(E4M3).astype(np.float64).reshape(t, -1, 128)
    assert (np.abs(q8).max(axis=2)[~below] == 448.0).all()
    both = (q8.max(axis=2) == 448.0) & (q8.min(axis=2) == -448.0)
    assert both.sum() >= 0.2 * both.size
    # outlier groups quantise their ordinary elements to e4m3 subnormals (|q| < 2^-6)
    qa = np.abs(expected["q"])
    assert ((qa > 0) & (qa < 2.0 ** -6)).sum() >= 50


# the tolerance, by simulation --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [MEDIUM, {"T": 3, "H": 1152}], ids=lambda s: f"{s['T']}x{s['H']}")
def test_tolerance_separates_right_from_wrong(folder, shape, dtype):
    problem = suite.problem(folder, shape, dtype)
    tol_q, tol_s = problem.tolerance("fp8_e4m3"), problem.tolerance("fp32")
    inputs, expected = _case(folder, shape, dtype)
    x = inputs["x"]
    good, s = _kernel_like(x)
    assert compare("q", good, expected["q"], tol_q).passed
    assert compare("scales", s, expected["scales"], tol_s).passed
    for wrong in ("up1", "trunc"):
        bad, _ = _kernel_like(x, rounding=wrong)
        assert not compare("q", bad, expected["q"], tol_q).passed, wrong
    bad, s_bad = _kernel_like(x, scale_factor=2.0)
    assert not compare("q", bad, expected["q"], tol_q).passed
    assert not compare("scales", s_bad, expected["scales"], tol_s).passed
    assert not compare("scales", s * np.float32(1.001), expected["scales"], tol_s).passed
    # a wrong scale on the tiny and below-eps groups alone is caught (atol 0)
    absmax = np.abs(x.astype(np.float64)).reshape(shape["T"], -1, 128).max(axis=2)
    if (absmax < 0.05).any():
        s_tiny = np.where(absmax < 0.05, s * np.float32(2.0), s).astype(np.float32)
        assert not compare("scales", s_tiny, expected["scales"], tol_s).passed
    # a NaN (unwritten) element fails
    poisoned = good.copy()
    poisoned.view(np.uint8)[0, -1] = 0xFF
    assert not compare("q", poisoned, expected["q"], tol_q).passed


def test_software_e4m3_conversion_matches_round_to_nearest_even():
    """The baseline's bit-level float -> e4m3 conversion (c10's method), ported to NumPy, equals
    ml_dtypes' round-to-nearest-even on every float32 in a dense sweep of [-448, 448]."""
    rng = np.random.default_rng(0)
    # every e4m3 value, the midpoints between neighbours (ties), one fp32 ulp either side, and randoms
    grid = np.arange(0, 0x7F, dtype=np.uint8).view(E4M3).astype(np.float32)
    mids = (grid[:-1].astype(np.float64) + grid[1:]) / 2
    mids = mids.astype(np.float32)
    probes = np.concatenate([grid, mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(1e9)),
                             rng.uniform(0, 448, 200000).astype(np.float32),
                             np.exp(rng.uniform(-25, math.log(448), 200000)).astype(np.float32)])
    probes = probes[probes <= 448]
    probes = np.concatenate([probes, -probes])
    bits = probes.view(np.uint32).astype(np.uint64)
    sign = bits & 0x80000000
    bits = bits ^ sign
    sub = bits < (121 << 23)
    shifted = (bits.astype(np.uint32).view(np.float32) + np.uint32(141 << 23).view(np.float32))
    code_sub = shifted.view(np.uint32).astype(np.uint64) - (141 << 23)
    odd = (bits >> 20) & 1
    code_norm = ((bits + 0xC407FFFF + odd) & 0xFFFFFFFF) >> 20
    code = np.where(sub, code_sub, code_norm) | (sign >> 24)
    got = code.astype(np.uint8)
    want = probes.astype(E4M3).view(np.uint8)
    np.testing.assert_array_equal(got, want)


# (d) the spec and instantiation ----------------------------------------------------------------------

def test_spec_and_instantiation(folder):
    spec = folder.spec
    KernelSpec.model_validate(spec.model_dump())
    assert spec.shapes["serving"] == [{"T": t, "H": h} for t in (1, 128, 4096, 16384) for h in (7168, 16384)]
    assert all(s["H"] % 128 == 0 for s in spec.all_shapes())
    assert not spec.anchors  # docs/kernels.md has no timing rows for this kernel
    for dtype in spec.dtypes:
        for shape in spec.all_shapes():
            base = suite.request(folder, "baseline", shape, dtype)
            assert not isinstance(base, Exclusion), (shape, dtype, base)
            groups = shape["T"] * shape["H"] // 128
            gpb = base.launch.block[0] // 16
            assert gpb in (1, 2, 4, 8, 16) and groups % gpb == 0
            assert groups % (2 * gpb) != 0 or gpb == 16  # SGLang's choice: the largest that divides
            assert base.launch.grid[0] * gpb == groups
            problem = base.problem
            assert [p.name for p in problem.params] == ["x", "q", "scales", "tokens", "hidden", "eps"]
            assert problem.bytes_moved == shape["T"] * shape["H"] * 3 + groups * 4
            tpl = suite.request(folder, "template", shape, dtype)
            assert not isinstance(tpl, Exclusion), (shape, dtype, tpl)
            block = tpl.launch.block[0]
            assert tpl.launch.grid[0] * (block // 8) >= groups  # the default: 8 threads per group
    # the shapes cover each of SGLang's groups-per-CTA choices
    gpbs = {suite.request(folder, "baseline", s, "bf16").launch.block[0] // 16 for s in spec.all_shapes()}
    assert gpbs == {1, 2, 4, 8, 16}


def test_template_constraints_cover_the_space(folder):
    """Every configuration is either valid everywhere or excluded everywhere (the constraints
    depend on the shape only through H % 128), and the space is a few hundred to a few thousand."""
    template = folder.template
    env_a = suite.environment(folder.spec, {"T": 1, "H": 128}, "bf16", "default")
    env_b = suite.environment(folder.spec, {"T": 16384, "H": 16384}, "fp16", "default")
    valid = 0
    for config in template.all_configs():
        a = template.instantiate(config, env_a)
        b = template.instantiate(config, env_b)
        assert isinstance(a, Exclusion) == isinstance(b, Exclusion)
        if not isinstance(a, Exclusion):
            valid += 1
            assert 32 <= a.block[0] <= 1024 and a.block[0] % 32 == 0
            assert a.grid[0] >= 1
    assert 300 <= valid <= 3000


# (c) compiling -------------------------------------------------------------------------------------
