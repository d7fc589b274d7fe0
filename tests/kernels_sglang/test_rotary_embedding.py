"""rotary_embedding: the reference against complex-number loops, the inputs, the tolerance against an
fp32 emulation of the kernels, the spec, the launch geometry of the baseline and the template
(every rotated element written exactly once, dims >= R as required), and (slow) every binary compiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels import suite
from astra_kernels.kernels_sglang.rotary_embedding import reference as ref
from astra_kernels.kernels_sglang.rotary_embedding.spec import SPEC
from astra_kernels.suite.schema import KernelSpec
from astra_kernels.tools.measuring.correctness import compare
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES
from astra_kernels.tools.templating.template import Exclusion

NAME = "rotary_embedding"
VARIANTS = ["default", "interleaved"]
SYMBOLS = ["N", "HQ", "HK", "D", "R", "P"]


def shape(n, hq, hk, d, r, p):
    return dict(zip(SYMBOLS, (n, hq, hk, d, r, p)))


TINY = [shape(3, 2, 1, 8, 8, 16), shape(4, 1, 2, 12, 6, 10), shape(5, 3, 1, 10, 4, 7), shape(1, 1, 1, 6, 2, 3)]


# (a) the reference against an independent implementation --------------------------------------

def _loops(inputs, shp, variant):
    """Rotation as complex multiplication, one pair at a time: z' = z * (cos + i sin)."""
    n, hq, hk, d, r = (shp[s] for s in ("N", "HQ", "HK", "D", "R"))
    half = r // 2
    table = inputs["cos_sin_cache"].astype(np.float64)
    out = {}
    for name, heads in (("q", hq), ("k", hk)):
        x = inputs[name].astype(np.float64)
        y = x.copy()
        for t in range(n):
            row = table[int(inputs["positions"][t])]
            for h in range(heads):
                base = h * d
                for j in range(half):
                    i0, i1 = (base + 2 * j, base + 2 * j + 1) if variant == "interleaved" else (base + j, base + j + half)
                    z = complex(x[t, i0], x[t, i1]) * complex(row[j], row[half + j])
                    y[t, i0], y[t, i1] = z.real, z.imag
        out[name] = y
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shp", TINY, ids=lambda s: "x".join(str(s[k]) for k in SYMBOLS))
def test_reference_matches_complex_loops(variant, dtype, shp):
    inputs = ref.make_inputs(np.random.default_rng(0), shp, dtype, variant)
    got = ref.reference(inputs, shp, dtype, variant)
    want = _loops(inputs, shp, variant)
    for name in ("q", "k"):
        assert got[name].dtype == np.float64 and got[name].shape == inputs[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14)
        # dims >= R come back as they went in, exactly
        x = inputs[name].astype(np.float64).reshape(shp["N"], -1, shp["D"])
        np.testing.assert_array_equal(got[name].reshape(x.shape)[..., shp["R"]:], x[..., shp["R"]:])


def test_cache_is_cos_and_sin_of_position_times_frequency():
    p, r = 50, 12
    table = ref.make_cos_sin_cache(p, r)
    assert table.dtype == np.float32 and table.shape == (p, r)
    for pos in range(p):
        for i in range(r // 2):
            angle = pos * 10000.0 ** (-2.0 * i / r)
            assert abs(table[pos, i] - math.cos(angle)) < 1e-7
            assert abs(table[pos, r // 2 + i] - math.sin(angle)) < 1e-7


@pytest.mark.parametrize("variant", VARIANTS)
def test_rotation_keeps_pair_norms_and_inverts(variant):
    """A rotation keeps |z| of each pair; rotating back by -angle gives the input again."""
    shp = shape(40, 3, 2, 64, 48, 300)
    inputs = ref.make_inputs(np.random.default_rng(3), shp, "fp16", variant)
    out = ref.reference(inputs, shp, "fp16", variant)
    half = shp["R"] // 2
    for name in ("q", "k"):
        x = inputs[name].astype(np.float64).reshape(shp["N"], -1, shp["D"])
        y = out[name].reshape(x.shape)
        if variant == "interleaved":
            nx = x[..., 0:shp["R"]:2] ** 2 + x[..., 1:shp["R"]:2] ** 2
            ny = y[..., 0:shp["R"]:2] ** 2 + y[..., 1:shp["R"]:2] ** 2
        else:
            nx = x[..., :half] ** 2 + x[..., half:shp["R"]] ** 2
            ny = y[..., :half] ** 2 + y[..., half:shp["R"]] ** 2
        np.testing.assert_allclose(ny, nx, rtol=1e-6, atol=1e-12)  # cos^2 + sin^2 = 1 to fp32 rounding
        inverse = inputs["cos_sin_cache"].astype(np.float64)[inputs["positions"]].copy()
        inverse[:, half:] *= -1
        back = ref.rotate(y, inverse, shp["R"], variant == "interleaved")
        np.testing.assert_allclose(back, x, rtol=0, atol=1e-5)


def test_reference_chunks_agree_with_one_pass(monkeypatch):
    shp = shape(50, 2, 1, 16, 16, 64)
    inputs = ref.make_inputs(np.random.default_rng(4), shp, "bf16", "default")
    whole = ref.reference(inputs, shp, "bf16", "default")
    monkeypatch.setattr(ref, "_CHUNK", 7)
    chunked = ref.reference(inputs, shp, "bf16", "default")
    for name in ("q", "k"):
        np.testing.assert_array_equal(whole[name], chunked[name])


# (b) make_inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shp", [shape(1, 5, 1, 128, 128, 4096), shape(3, 2, 1, 96, 30, 64),
                                 shape(37, 5, 1, 128, 64, 4096), shape(2000, 4, 2, 64, 64, 512)],
                         ids=lambda s: "x".join(str(s[k]) for k in SYMBOLS))
def test_make_inputs(dtype, shp):
    a = ref.make_inputs(np.random.default_rng(1), shp, dtype, "default")
    b = ref.make_inputs(np.random.default_rng(2), shp, dtype, "default")
    n, p = shp["N"], shp["P"]
    # dtypes and shapes as the problem's parameters say
    problem = suite.problem(suite.load(NAME), shp, dtype)
    for param in problem.buffers:
        assert a[param.name].dtype == numpy_dtype(param.dtype), param.name
        assert a[param.name].shape == param.shape, param.name
    pos = a["positions"]
    assert pos.dtype == np.int64 and pos.min() >= 0 and pos.max() < p
    if n >= 2:
        assert len(np.unique(pos)) < n  # a repeated position
    if n >= 3:
        assert (pos == p - 1).any()     # the cache's last row
    if n >= 4:
        assert (pos == 0).any()         # the identity rotation
    for name in ("q", "k"):
        x = a[name].astype(np.float64)
        assert np.count_nonzero(x) > 0.99 * x.size
        if x.size > 1000:
            assert 0.9 < np.std(x) < 1.1 and abs(np.mean(x)) < 0.1
        assert a[name].tobytes() != b[name].tobytes()
    np.testing.assert_array_equal(a["cos_sin_cache"], ref.make_cos_sin_cache(p, shp["R"]))
    if n > 8:
        assert a["positions"].tobytes() != b["positions"].tobytes()


def test_problem_cases_validate_and_seeds_differ():
    folder = suite.load(NAME)
    for shp in SPEC.shapes["odd"][:3]:
        for variant in VARIANTS:
            problem = suite.problem(folder, shp, "bf16", variant)
            first, second = problem.make_case(1), problem.make_case(2)
            problem.validate_case(first)
            for name in ("q", "k"):
                assert first.expected[name].tobytes() != second.expected[name].tobytes()


# the tolerance: an fp32 emulation of the kernels passes with headroom, a wrong kernel fails ------

def _fp32_kernel(inputs, shp, dtype, variant, *, flip_sin=False, other_style=False):
    """What the kernels compute: fp32 products and sum of the storage values and the fp32 cache,
    one rounding to the storage type; dims >= R untouched."""
    d, r = shp["D"], shp["R"]
    half = r // 2
    interleaved = (variant == "interleaved") != other_style
    cs = inputs["cos_sin_cache"][inputs["positions"]]
    c, s = cs[:, None, :half], cs[:, None, half:]
    if flip_sin:
        s = -s
    out = {}
    for name in ("q", "k"):
        x = inputs[name].astype(np.float32).reshape(shp["N"], -1, d)
        y = x.copy()
        if interleaved:
            e, o = x[..., 0:r:2], x[..., 1:r:2]
            y[..., 0:r:2], y[..., 1:r:2] = e * c - o * s, o * c + e * s
        else:
            a, b = x[..., :half], x[..., half:r]
            y[..., :half], y[..., half:r] = a * c - b * s, b * c + a * s
        out[name] = y.reshape(inputs[name].shape).astype(numpy_dtype(dtype))
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shp", [shape(256, 32, 8, 128, 128, 4096), shape(33, 7, 3, 72, 72, 1000),
                                 shape(256, 32, 8, 128, 64, 4096)],
                         ids=lambda s: "x".join(str(s[k]) for k in SYMBOLS))
def test_tolerance_fits_fp32_kernel_with_headroom(variant, dtype, shp):
    inputs = ref.make_inputs(np.random.default_rng(5), shp, dtype, variant)
    expected = ref.reference(inputs, shp, dtype, variant)
    tol = DEFAULT_TOLERANCES[dtype]
    got = _fp32_kernel(inputs, shp, dtype, variant)
    for name in ("q", "k"):
        check = compare(name, got[name], expected[name], tol)
        assert check.passed, check.detail
        assert check.norm_error < tol.max_norm_error / 3
        # every element within a third of its allowance: the rounding is far inside the tolerance
        diff = np.abs(got[name].astype(np.float64) - expected[name])
        assert np.all(diff <= (tol.atol + tol.rtol * np.abs(expected[name])) / 3)
        # dims >= R bit for bit
        x = inputs[name].reshape(shp["N"], -1, shp["D"])[..., shp["R"]:]
        assert got[name].reshape(shp["N"], -1, shp["D"])[..., shp["R"]:].tobytes() == x.tobytes()
    for wrong in ({"flip_sin": True}, {"other_style": True}):
        bad = _fp32_kernel(inputs, shp, dtype, variant, **wrong)
        assert not compare("q", bad["q"], expected["q"], tol).passed, wrong


# (d) the spec, the baseline everywhere, the template's default -----------------------------------

def test_spec_validates_and_shapes():
    KernelSpec.model_validate(SPEC.model_dump())
    assert SPEC.symbols == SYMBOLS
    assert set(SPEC.shapes) == {"serving", "odd"}  # docs/kernels.md gives no Astra shapes for rotary
    serving = SPEC.shapes["serving"]
    assert {(s["N"], s["D"]) for s in serving} == {(n, d) for n in (1, 16, 256, 4096, 16384) for d in (64, 128)}
    assert all(s["HQ"] == 32 and s["HK"] == 8 and s["R"] == s["D"] for s in serving)
    for s in SPEC.all_shapes():
        assert s["D"] % 2 == 0 and s["R"] % 2 == 0 and 2 <= s["R"] <= s["D"]
    folder = suite.load(NAME)
    problem = suite.problem(folder, serving[4], "bf16")
    # 16384 tokens x 40 heads x 128 dims, bf16, read and written, + positions + 4096 cache rows
    assert problem.bytes_moved == 16384 * 8 + 2 * 16384 * 40 * 128 * 2 + 4096 * 128 * 4


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_baseline_instantiates_everywhere(dtype, variant):
    folder = suite.load(NAME)
    for shp in SPEC.all_shapes():
        instance = folder.baseline.instantiate({}, suite.environment(SPEC, shp, dtype, variant))
        assert not isinstance(instance, Exclusion), (shp, instance)
        assert instance.fast_math and instance.max_registers == 128


@pytest.mark.parametrize("variant", VARIANTS)
def test_baseline_matches_sglang_launch_on_serving_shapes(variant):
    """vec = max(16 / sizeof(T), D / 32), block (D / vec, max(128, D / vec) / (D / vec))."""
    folder = suite.load(NAME)
    for shp in SPEC.shapes["serving"] + [s for s in SPEC.shapes["odd"] if s["D"] in (128, 256) and s["R"] == s["D"]]:
        instance = folder.baseline.instantiate({}, suite.environment(SPEC, shp, "bf16", variant))
        vec = max(8, shp["D"] // 32)
        bdx = shp["D"] // vec
        bdy = max(128, bdx) // bdx
        assert instance.defines["VEC"] == vec
        assert instance.block == (bdx, bdy)
        assert instance.grid[0] == -(-shp["N"] // bdy)
        head_parallel = instance.defines["HEAD_PARALLEL"]
        assert instance.grid[1] == (shp["HQ"] + shp["HK"] if head_parallel else 1)
        ctas = -(-shp["N"] // bdy)
        assert head_parallel == (ctas < instance.defines["BLOCKS_PER_SM"] * suite.DEFAULT_SMS)
    # the two kernels are both exercised by the spec's shapes
    modes = {folder.baseline.instantiate({}, suite.environment(SPEC, s, "bf16", variant)).defines["HEAD_PARALLEL"]
             for s in SPEC.all_shapes()}
    assert modes == {0, 1}


@pytest.mark.parametrize("variant", VARIANTS)
def test_template_default_and_every_shape_has_configs(variant):
    folder = suite.load(NAME)
    template = folder.template
    assert 300 <= template.size() <= 6000
    for shp in SPEC.shapes["serving"]:
        instance = template.instantiate(template.default, suite.environment(SPEC, shp, "bf16", variant))
        assert not isinstance(instance, Exclusion), (shp, instance)
    configs = list(template.all_configs())
    for dtype in ("bf16",):  # fp16 has the same element size, so the same exclusions
        for shp in SPEC.all_shapes():
            env = suite.environment(SPEC, shp, dtype, variant)
            runs = sum(not isinstance(template.instantiate(c, env), Exclusion) for c in configs)
            assert runs >= 50, (shp, dtype, runs)


# the launch geometry, emulated: which elements each thread reads and writes ---------------------

def _baseline_coverage(shp, variant, instance):
    """Per (token, head, dim): how many threads write it, as the baseline's indexing says; checks
    that a partner read and the cos/sin columns stay inside the rotated dims / the cache row."""
    n, hq, hk, d, r = (shp[s] for s in ("N", "HQ", "HK", "D", "R"))
    defs = instance.defines
    vec, bdx, bdy, csn = defs["VEC"], defs["BDX"], defs["BDY"], defs["CSN"]
    assert instance.block == (bdx, bdy) and bdx * vec == d and bdx * bdy <= 1024
    half = r // 2
    count = np.zeros((n, hq + hk, d), dtype=np.int64)
    gx, gy = instance.grid
    for bx in range(gx):
        for by in range(gy):
            heads = [by] if defs["HEAD_PARALLEL"] else range(hq + hk)
            for ty in range(bdy):
                idx = bx * bdy + ty
                if idx >= n:
                    continue
                for tx in range(bdx):
                    off = tx * vec
                    if off < r:
                        col = off // 2 if variant == "interleaved" else off % half
                        assert col + csn <= half and (col % defs["CSW"]) == 0 and half % defs["CSW"] == 0
                        if variant == "default":
                            partner = off + half if off < half else off - half
                            assert 0 <= partner and partner + vec <= r
                            assert (off < half) == (off + vec <= half)  # a vector never straddles R/2
                        assert off + vec <= r                           # ... nor R
                    for h in heads:
                        count[idx, h, off:off + vec] += 1
    return count


def _template_coverage(shp, variant, instance, config):
    n, hq, hk, d, r = (shp[s] for s in ("N", "HQ", "HK", "D", "R"))
    vec, ht, tokens, hpc = config["VEC"], config["HT"], config["TOKENS"], config["HPC"]
    csn = instance.defines["CSN"]
    half = r // 2
    items, by_, bz = instance.block
    assert (by_, bz) == (ht, tokens) and items * ht * tokens <= 512
    assert items * (2 * vec if variant == "default" else vec) == r
    assert items * csn == half  # the cos columns of the items tile the first half of the row
    count = np.zeros((n, hq + hk, d), dtype=np.int64)
    gx, gy = instance.grid
    t_idx = np.arange(gx)[:, None] * tokens + np.arange(tokens)[None, :]        # [gx, tokens]
    for byi in range(gy):
        h_begin = byi * hpc
        h_end = min(hq + hk, h_begin + hpc)
        for lane in range(ht):
            for h in range(h_begin + lane, h_end, ht):
                for item in range(items):
                    offs = [item * vec] + ([half + item * vec] if variant == "default" else [])
                    for off in offs:
                        toks = t_idx[t_idx < n]
                        count[toks, h, off:off + vec] += 1
    return count


def _check_coverage(count, shp, *, touches_passthrough):
    r = shp["R"]
    assert np.all(count[..., :r] == 1), np.argwhere(count[..., :r] != 1)[:5]
    assert np.all(count[..., r:] == (1 if touches_passthrough else 0))


@pytest.mark.parametrize("variant", VARIANTS)
def test_baseline_writes_every_element_once(variant):
    folder = suite.load(NAME)
    for shp in SPEC.shapes["odd"] + [shape(16, 32, 8, 128, 128, 4096), shape(17, 2, 1, 64, 64, 64)]:
        if shp["N"] > 2000:
            shp = dict(shp, N=37)  # the token-parallel path (SMS=0 forces it), on fewer tokens
            instance = folder.baseline.instantiate({}, {**suite.environment(SPEC, shp, "bf16", variant), "SMS": 0})
            assert instance.defines["HEAD_PARALLEL"] == 0
        else:
            instance = folder.baseline.instantiate({}, suite.environment(SPEC, shp, "bf16", variant))
        _check_coverage(_baseline_coverage(shp, variant, instance), shp, touches_passthrough=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_template_writes_every_rotated_element_once(variant):
    folder = suite.load(NAME)
    template = folder.template
    rng = np.random.default_rng(0)
    configs = list(template.all_configs())
    shapes = [s for s in SPEC.shapes["odd"] if s["N"] <= 256] + [shape(16, 32, 8, 64, 64, 8192)]
    for shp in shapes:
        env = suite.environment(SPEC, shp, "fp16", variant)
        valid = [(c, i) for c in configs if not isinstance(i := template.instantiate(c, env), Exclusion)]
        picks = [valid[j] for j in rng.choice(len(valid), size=min(25, len(valid)), replace=False)]
        default = template.instantiate(template.default, env)
        if not isinstance(default, Exclusion):
            picks.append((template.default, default))
        for config, instance in picks:
            count = _template_coverage(shp, variant, instance, config)
            _check_coverage(count, shp, touches_passthrough=False)


# (c) compiles -----------------------------------------------------------------------------------

def _blocks_per_sm(registers: int, threads: int) -> int:
    from astra_kernels.tools.search.hardware import limits_for, occupancy
    from astra_kernels.tools.toolchain.resources import ResourceUsage

    return occupancy(ResourceUsage(registers=registers), threads, 0, limits_for("sm_90")).blocks_per_sm


def test_baseline_occupancy_assumption_matches_ptxas():
    """The head-parallel rule assumes K0_REGS registers; the token-parallel binary must have them."""
    from astra_kernels.tools.toolchain.compiler import compile_many

    folder = suite.load(NAME)
    targets, _ = suite.compile_targets(folder, "baseline", "sm_90")
    outcomes = compile_many([(folder.baseline.source, t.options) for t in targets])
    for target, outcome in zip(targets, outcomes):
        defines = target.options.defines
        if defines["HEAD_PARALLEL"] == 0:
            res = outcome.module.kernels["rope"].resources
            threads = defines["BDX"] * defines["BDY"]
            assert _blocks_per_sm(res.registers, threads) == defines["BLOCKS_PER_SM"], (defines, res)
