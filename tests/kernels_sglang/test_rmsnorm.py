"""rmsnorm's folder on the CPU: the reference against plain loops, the inputs, the tolerance's
headroom over an fp32 emulation of the kernel, the spec and shapes, and (slow) every binary compiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.tools.measuring.correctness import compare
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES
from astra_kernels.tools.templating.template import Exclusion, Instance

NAME = "rmsnorm"
FOLDER = suite.load(NAME)
REF = FOLDER.reference
SPEC = FOLDER.spec
DTYPES = ["bf16", "fp16"]


def _inputs(shape, dtype, seed=0):
    return REF.make_inputs(np.random.default_rng(seed), shape, dtype, "default")


def _loop_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """One element at a time, with exact sums: out = x / sqrt(sum(x^2) / H + eps) * w."""
    t, h = x.shape
    out = np.empty((t, h))
    for i in range(t):
        row = [float(v) for v in x[i]]
        rms = math.sqrt(math.fsum(v * v for v in row) / h + eps)
        for j in range(h):
            out[i, j] = row[j] / rms * float(w[j])
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h", [(1, 8), (3, 12), (2, 7), (4, 1000), (1, 4100)])
def test_reference_matches_loops(dtype, t, h):
    shape = {"T": t, "H": h}
    inputs = _inputs(shape, dtype)
    got = REF.reference(inputs, shape, dtype, "default")["out"]
    want = _loop_reference(inputs["x"], inputs["w"], 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_reference_eps_is_the_kernels_fp32_value():
    assert REF.EPS == float(np.float32(1e-6))
    assert SPEC.args[3].name == "eps" and SPEC.args[3].dtype == "fp32" and float(SPEC.args[3].value) == 1e-6


def test_reference_normalises_each_row():
    """Another angle: out / w has mean square mean(x^2) / (mean(x^2) + eps), i.e. about 1."""
    shape = {"T": 64, "H": 4096}
    inputs = _inputs(shape, "bf16")
    out = REF.reference(inputs, shape, "bf16", "default")["out"]
    x = inputs["x"].astype(np.float64)
    ms = np.mean(x * x, axis=1)
    got = np.mean((out / inputs["w"].astype(np.float64)) ** 2, axis=1)
    np.testing.assert_allclose(got, ms / (ms + REF.EPS), rtol=1e-12)
    # scale invariance: 2x gives the same output up to eps's share
    doubled = {"x": (x * 2).astype(inputs["x"].dtype), "w": inputs["w"]}
    np.testing.assert_allclose(REF.reference(doubled, shape, "bf16", "default")["out"], out, rtol=1e-5)


def test_reference_chunks_agree_with_one_pass(monkeypatch):
    shape = {"T": 37, "H": 1000}
    inputs = _inputs(shape, "fp16")
    whole = REF.reference(inputs, shape, "fp16", "default")["out"]
    monkeypatch.setattr(REF, "_CHUNK_ELEMS", 3000)  # three rows a chunk
    np.testing.assert_array_equal(REF.reference(inputs, shape, "fp16", "default")["out"], whole)


@pytest.mark.parametrize("dtype", DTYPES)
def test_make_inputs(dtype):
    shape = {"T": 256, "H": 4096}
    a = _inputs(shape, dtype, seed=1)
    b = _inputs(shape, dtype, seed=2)
    again = _inputs(shape, dtype, seed=1)
    assert set(a) == {"x", "w"}
    assert a["x"].dtype == numpy_dtype(dtype) and a["x"].shape == (256, 4096)
    assert a["w"].dtype == numpy_dtype(dtype) and a["w"].shape == (4096,)
    x = a["x"].astype(np.float64)
    w = a["w"].astype(np.float64)
    assert np.isfinite(x).all() and np.isfinite(w).all()
    assert np.count_nonzero(x) > 0.99 * x.size
    assert not np.array_equal(a["x"], b["x"]) and not np.array_equal(a["w"], b["w"])
    assert np.array_equal(a["x"], again["x"]) and np.array_equal(a["w"], again["w"])
    # weights around 1, never zero
    assert w.min() >= 0.5 and w.max() <= 1.5 and abs(w.mean() - 1) < 0.02 and 0.05 < w.std() < 0.15
    # activations N(0, 1) with a few outlier channels scaled x10 to x20
    col_rms = np.sqrt(np.mean(x * x, axis=0))
    outliers = col_rms > 5
    assert 1 <= outliers.sum() <= 4096 // 256
    assert np.all((col_rms[outliers] > 8) & (col_rms[outliers] < 22))
    assert abs(np.median(col_rms) - 1) < 0.05


def test_make_inputs_tiny_row_has_an_outlier():
    x = _inputs({"T": 50, "H": 12}, "bf16")["x"].astype(np.float64)
    assert (np.sqrt(np.mean(x * x, axis=0)) > 5).sum() == 1


def _emulate_kernel(inputs: dict, dtype: str) -> np.ndarray:
    """The kernel's arithmetic in fp32: fp32 sum of squares (summed in a different order),
    rsqrt of mean + eps, x * rcp * w, rounded to the storage dtype."""
    x = inputs["x"].astype(np.float32)
    w = inputs["w"].astype(np.float32)
    t, h = x.shape
    # per-"thread" partial sums then a tree, as the kernel does (fp32 throughout)
    sq = (x * x).astype(np.float32)
    pad = (-h) % 256
    partial = np.pad(sq, ((0, 0), (0, pad))).reshape(t, -1, 256).sum(axis=1, dtype=np.float32)
    total = partial.sum(axis=1, dtype=np.float32)
    rcp = (np.float32(1) / np.sqrt(total / np.float32(h) + np.float32(1e-6))).astype(np.float32)
    out = (x * rcp[:, None]).astype(np.float32) * w
    return out.astype(numpy_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h", [(128, 4096), (16, 8192), (8, 14336), (7, 12), (1, 4100), (3, 20000)])
def test_tolerance_fits_fp32_kernel_with_headroom(dtype, t, h):
    shape = {"T": t, "H": h}
    for seed in (1, 2):
        inputs = _inputs(shape, dtype, seed)
        expected = REF.reference(inputs, shape, dtype, "default")["out"]
        tol = SPEC.tolerances.get(dtype) or DEFAULT_TOLERANCES[dtype]
        check = compare("out", _emulate_kernel(inputs, dtype), expected, tol)
        assert check.passed, check.detail
        assert check.norm_error < tol.max_norm_error / 4, check.detail


def test_spec_validates_and_shapes():
    assert SPEC.name == NAME and SPEC.symbols == ["T", "H"]
    assert set(SPEC.shapes) == {"astra", "serving", "odd"}
    assert len(SPEC.shapes["serving"]) == 14 and len(SPEC.shapes["astra"]) == 8
    assert any(s["H"] % 8 for s in SPEC.shapes["odd"]) and any(s["T"] == 1 for s in SPEC.shapes["odd"])
    assert {(a.device, a.shape["T"], a.shape["H"]) for a in SPEC.anchors} == {
        (d, t, h) for d in ("H200", "H100") for t, h in ((1024, 4096), (16384, 8192))
    }
    assert type(SPEC).model_validate(SPEC.model_dump()) == SPEC


@pytest.mark.parametrize("dtype", DTYPES)
def test_baseline_instantiates_everywhere(dtype):
    for shape in SPEC.all_shapes():
        env = suite.environment(SPEC, shape, dtype, "default")
        inst = FOLDER.baseline.instantiate({}, env)
        assert isinstance(inst, Instance), (shape, inst)
        h = shape["H"]
        vec = math.gcd(8, h)
        assert inst.defines["VEC"] == vec
        threads = inst.block[0] * inst.block[1]
        assert inst.block[0] == 32 and threads == 32 * math.ceil(min(1024, h // vec) / 32) <= 1024
        assert inst.grid == (shape["T"],)
        assert inst.shared_bytes == inst.block[1] * 4
        assert inst.fast_math and inst.max_registers == 128
        assert not isinstance(suite.request(FOLDER, "baseline", shape, dtype), Exclusion)


@pytest.mark.parametrize("dtype", DTYPES)
def test_template_default_and_every_shape_has_configs(dtype):
    template = FOLDER.template
    configs = list(template.all_configs())
    for set_name, shapes in SPEC.shapes.items():
        for shape in shapes:
            env = suite.environment(SPEC, shape, dtype, "default")
            default = template.instantiate(template.default, env)
            if set_name in ("astra", "serving"):
                assert isinstance(default, Instance), (shape, default)
                assert default.block[0] <= 1024 and default.grid == (shape["T"],)
            # some configuration runs, and one of the registers mode (x read once) among them: the
            # first found is enough (every instance of the space at every shape took 34 s of CI per dtype)
            assert any(c["ITEMS"] > 0 and isinstance(template.instantiate(c, env), Instance) for c in configs), shape


def test_problem_cases_validate():
    for shape in ({"T": 3, "H": 1000}, {"T": 1, "H": 4100}, {"T": 7, "H": 12}):
        for dtype in DTYPES:
            problem = suite.problem(FOLDER, shape, dtype)
            case = problem.make_case(1)
            problem.validate_case(case)
            assert problem.bytes_moved == (2 * shape["T"] * shape["H"] + shape["H"]) * 2
            assert case.expected["out"].dtype == np.float64
