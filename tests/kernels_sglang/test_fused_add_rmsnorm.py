"""fused_add_rmsnorm's folder on the CPU: the reference against plain loops, the inputs, the
tolerance's headroom over an fp32 emulation of the kernel, the spec and shapes, and (slow) every
binary compiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.tools.measuring.correctness import compare
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES
from astra_kernels.tools.templating.template import Exclusion, Instance

NAME = "fused_add_rmsnorm"
FOLDER = suite.load(NAME)
REF = FOLDER.reference
SPEC = FOLDER.spec
DTYPES = ["bf16", "fp16"]


def _inputs(shape, dtype, seed=0):
    return REF.make_inputs(np.random.default_rng(seed), shape, dtype, "default")


def _loop_reference(x: np.ndarray, r: np.ndarray, w: np.ndarray, eps: float):
    """One element at a time: s = fp32(x) + fp32(r) (one fp32 rounding); residual <- s rounded to
    the storage dtype; x <- s / sqrt(sum(s^2) / H + eps) * w with s unrounded, exact sums."""
    t, h = x.shape
    storage = x.dtype
    x_out, r_out = np.empty((t, h)), np.empty((t, h))
    for i in range(t):
        s = [float(np.float32(x[i, j]) + np.float32(r[i, j])) for j in range(h)]
        rms = math.sqrt(math.fsum(v * v for v in s) / h + eps)
        for j in range(h):
            r_out[i, j] = float(np.array([s[j]], dtype=np.float32).astype(storage)[0])
            x_out[i, j] = s[j] / rms * float(w[j])
    return x_out, r_out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h", [(1, 8), (3, 12), (2, 7), (4, 1000), (1, 4100)])
def test_reference_matches_loops(dtype, t, h):
    shape = {"T": t, "H": h}
    inputs = _inputs(shape, dtype)
    got = REF.reference(inputs, shape, dtype, "default")
    want_x, want_r = _loop_reference(inputs["x"], inputs["residual"], inputs["w"], 1e-6)
    np.testing.assert_array_equal(got["residual"], want_r)
    np.testing.assert_allclose(got["x"], want_x, rtol=1e-12, atol=1e-12)


def test_reference_semantics_from_another_angle():
    """residual is x + residual rounded once to the dtype (the fp32 step changes almost nothing);
    x is rmsnorm of the fp32 sum: rmsnorm's own reference on s gives the same, and normalising the
    rounded residual instead differs, but only by storage rounding."""
    from astra_kernels.kernels_sglang.rmsnorm import reference as rms_ref

    shape = {"T": 32, "H": 4096}
    for dtype in DTYPES:
        inputs = _inputs(shape, dtype)
        out = REF.reference(inputs, shape, dtype, "default")
        storage = numpy_dtype(dtype)
        exact = inputs["x"].astype(np.float64) + inputs["residual"].astype(np.float64)
        direct = exact.astype(storage).astype(np.float64)
        assert np.mean(out["residual"] == direct) > 0.9999
        np.testing.assert_allclose(out["residual"], direct, rtol=2.0 ** -7, atol=0)
        s = (inputs["x"].astype(np.float32) + inputs["residual"].astype(np.float32)).astype(np.float64)
        np.testing.assert_allclose(out["x"], rms_ref.rms_normalize(s, inputs["w"].astype(np.float64)), rtol=1e-14)
        from_rounded = rms_ref.reference({"x": out["residual"].astype(storage), "w": inputs["w"]},
                                         shape, dtype, "default")["out"]
        assert 0 < np.max(np.abs(from_rounded - out["x"])) < 0.05 * np.max(np.abs(out["x"]))
        w = inputs["w"].astype(np.float64)
        ms = np.mean(s * s, axis=1)
        np.testing.assert_allclose(np.mean((out["x"] / w) ** 2, axis=1), ms / (ms + REF.EPS), rtol=1e-12)


def test_reference_chunks_agree_with_one_pass(monkeypatch):
    shape = {"T": 37, "H": 1000}
    inputs = _inputs(shape, "bf16")
    whole = REF.reference(inputs, shape, "bf16", "default")
    monkeypatch.setattr(REF, "_CHUNK_ELEMS", 3000)
    chunked = REF.reference(inputs, shape, "bf16", "default")
    for name in ("x", "residual"):
        np.testing.assert_array_equal(chunked[name], whole[name])


@pytest.mark.parametrize("dtype", DTYPES)
def test_make_inputs(dtype):
    shape = {"T": 256, "H": 4096}
    a = _inputs(shape, dtype, seed=1)
    b = _inputs(shape, dtype, seed=2)
    again = _inputs(shape, dtype, seed=1)
    assert set(a) == {"x", "residual", "w"}
    for name in ("x", "residual"):
        assert a[name].dtype == numpy_dtype(dtype) and a[name].shape == (256, 4096)
        v = a[name].astype(np.float64)
        assert np.isfinite(v).all() and np.count_nonzero(v) > 0.99 * v.size
        assert not np.array_equal(a[name], b[name]) and np.array_equal(a[name], again[name])
        col_rms = np.sqrt(np.mean(v * v, axis=0))
        outliers = col_rms > 5
        assert 1 <= outliers.sum() <= 4096 // 256
        assert np.all((col_rms[outliers] > 8) & (col_rms[outliers] < 22))
        assert abs(np.median(col_rms) - 1) < 0.05
    assert not np.array_equal(a["x"], a["residual"])
    w = a["w"].astype(np.float64)
    assert a["w"].dtype == numpy_dtype(dtype) and a["w"].shape == (4096,)
    assert w.min() >= 0.5 and w.max() <= 1.5 and abs(w.mean() - 1) < 0.02 and 0.05 < w.std() < 0.15
    assert not np.array_equal(a["w"], b["w"])
    # x + residual stays far from the dtype's range: no overflow in the stored sum
    assert np.max(np.abs(a["x"].astype(np.float64) + a["residual"].astype(np.float64))) < 1000


def _emulate_kernel(inputs: dict, dtype: str) -> dict:
    """The kernel's arithmetic in fp32: s = x + r in fp32, residual <- s rounded, fp32 sum of
    squares in another order, rsqrt of mean + eps, s * rcp * w rounded to the storage dtype."""
    storage = numpy_dtype(dtype)
    s = inputs["x"].astype(np.float32) + inputs["residual"].astype(np.float32)
    w = inputs["w"].astype(np.float32)
    t, h = s.shape
    pad = (-h) % 256
    partial = np.pad(s * s, ((0, 0), (0, pad))).reshape(t, -1, 256).sum(axis=1, dtype=np.float32)
    total = partial.sum(axis=1, dtype=np.float32)
    rcp = (np.float32(1) / np.sqrt(total / np.float32(h) + np.float32(1e-6))).astype(np.float32)
    return {"x": ((s * rcp[:, None]).astype(np.float32) * w).astype(storage), "residual": s.astype(storage)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h", [(128, 4096), (16, 8192), (8, 14336), (7, 12), (1, 4100), (3, 20000)])
def test_tolerance_fits_fp32_kernel_with_headroom(dtype, t, h):
    shape = {"T": t, "H": h}
    tol = SPEC.tolerances.get(dtype) or DEFAULT_TOLERANCES[dtype]
    for seed in (1, 2):
        inputs = _inputs(shape, dtype, seed)
        expected = REF.reference(inputs, shape, dtype, "default")
        got = _emulate_kernel(inputs, dtype)
        for name in ("x", "residual"):
            check = compare(name, got[name], expected[name], tol)
            assert check.passed, check.detail
            assert check.norm_error < tol.max_norm_error / 4, check.detail
        assert compare("residual", got["residual"], expected["residual"], tol).max_abs_error == 0


def test_spec_validates_and_shapes():
    assert SPEC.name == NAME and SPEC.symbols == ["T", "H"]
    assert [(a.name, a.role) for a in SPEC.args] == [
        ("x", "inout"), ("residual", "inout"), ("w", "in"), ("eps", "scalar"), ("tokens", "scalar"), ("hidden", "scalar")]
    assert set(SPEC.shapes) == {"astra", "serving", "odd"}
    assert len(SPEC.shapes["astra"]) == 8 and len(SPEC.shapes["serving"]) == 14
    assert any(s["H"] % 8 for s in SPEC.shapes["odd"]) and any(s["T"] == 1 for s in SPEC.shapes["odd"])
    anchors = {(a.device, a.shape["T"], a.shape["H"]) for a in SPEC.anchors}
    assert len(anchors) == 18 and ("H200", 16384, 8192) in anchors and ("H100", 128, 11008) in anchors
    assert type(SPEC).model_validate(SPEC.model_dump()) == SPEC


@pytest.mark.parametrize("dtype", DTYPES)
def test_baseline_instantiates_everywhere(dtype):
    for shape in SPEC.all_shapes():
        env = suite.environment(SPEC, shape, dtype, "default")
        inst = FOLDER.baseline.instantiate({}, env)
        assert isinstance(inst, Instance), (shape, inst)
        h = shape["H"]
        vec = math.gcd(8, h)
        warps = math.ceil(min(1024, h // vec) / 32)
        assert inst.defines["VEC"] == vec
        assert inst.block == (32, warps) and inst.grid == (shape["T"],)
        assert inst.shared_bytes == (math.ceil(warps / 4) * 4 + h) * 4 <= 227 * 1024
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
                assert default.shared_bytes == 0 and default.grid == (shape["T"],)
            runs = template.instantiate_all(configs, env)  # what a tune screens (instantiate_all: test_template.py)
            runs = [i for i in runs if isinstance(i, Instance)]
            assert runs, f"no template configuration runs at {shape}"
            assert any(i.config["ITEMS"] > 0 for i in runs), shape
            assert all(i.shared_bytes <= 227 * 1024 for i in runs)
            assert all(i.shared_bytes == (0 if i.config["ITEMS"] or i.config["RELOAD"] else i.config["ROWS"] * shape["H"] * 4)
                       for i in runs)
            assert any(i.config["RELOAD"] for i in runs), shape  # the two-pass form runs at every shape


def test_problem_cases_validate():
    for shape in ({"T": 3, "H": 1000}, {"T": 1, "H": 4100}, {"T": 7, "H": 12}):
        for dtype in DTYPES:
            problem = suite.problem(FOLDER, shape, dtype)
            case = problem.make_case(1)
            problem.validate_case(case)
            assert problem.bytes_moved == (4 * shape["T"] * shape["H"] + shape["H"]) * 2
            assert set(case.expected) == {"x", "residual"}


TWO_PASS = {"ROW_THREADS": 512, "ROWS": 1, "VEC": 8, "ITEMS": 0, "PRELOAD_W": 0, "REG_CAP": 32, "CLUSTER": 1, "HINT": 1,
            "STATIC_ROW": 1, "RELOAD": 1}  # the fastest measured at 5175x4096 and 16384x4096 (performance.md entry 31)


def test_the_two_pass_form_holds_nothing_between_its_passes():
    """RELOAD: few registers and no spills at 512 threads a row (Inductor's kernel there: 26-30), no
    shared memory beyond the partial sums, and both of the loads' L2 priorities in its code."""
    from astra_kernels.tools.toolchain.compiler import compile_source
    from astra_kernels.tools.toolchain.nvrtc import _nvrtc_compile, key_and_flags

    request = suite.request(FOLDER, "template", {"T": 5175, "H": 4096}, "bf16", config=TWO_PASS, arch="sm_90")
    assert request.launch.shared_bytes == 0 and request.launch.block == (512,)
    info = compile_source(request.source, request.options, cache=False).kernel(FOLDER.template.kernel).resources
    assert info.registers <= 32 and not info.spills and info.shared_bytes <= 64
    _, flags, _ = key_and_flags(request.source, request.options, "kernel.cu")
    ok, log, _, ptx = _nvrtc_compile(request.source, "kernel.cu", flags, request.options.headers)
    assert ok, log
    assert "L2::evict_last" in ptx and "L2::evict_first" in ptx
    # uncapped (REG_CAP 128), the form itself still needs no more: the cap above forces nothing
    free = suite.request(FOLDER, "template", {"T": 5175, "H": 4096}, "bf16", config={**TWO_PASS, "REG_CAP": 128},
                         arch="sm_90")
    assert compile_source(free.source, free.options, cache=False).kernel(FOLDER.template.kernel).resources.registers <= 32
    held = suite.request(FOLDER, "template", {"T": 5175, "H": 4096}, "bf16", arch="sm_90",
                         config={**TWO_PASS, "ITEMS": 1, "PRELOAD_W": 1, "REG_CAP": 128, "RELOAD": 0})
    assert compile_source(held.source, held.options, cache=False).kernel(FOLDER.template.kernel).resources.registers > 32
