"""Hardware limits, occupancy and the pruned search space, all without a GPU."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.errors import UnknownArchError
from astra_kernels.tools.search.hardware import limits_for, occupancy, prune_reason
from astra_kernels.tools.toolchain.resources import ResourceUsage
from astra_kernels.tools.search.space import build_space
from astra_kernels.tools.templating.template import parse_template

H100 = limits_for("sm_90")


@pytest.mark.parametrize("registers,threads,shared,blocks,limiter", [
    (24, 256, 0, 8, "warps"),          # 2048 threads per SM
    (64, 1024, 0, 1, "registers"),     # 64 x 1024 = the whole register file
    (128, 256, 0, 2, "registers"),
    (16, 32, 0, 32, "blocks"),
    (32, 256, 100 * 1024, 2, "shared memory"),
    (40, 128, 0, 12, "registers"),     # 40 regs -> 1280 per warp -> 51 warps -> 12 blocks of 4
])
def test_occupancy_matches_the_calculator(registers, threads, shared, blocks, limiter):
    occ = occupancy(ResourceUsage(registers=registers), threads, shared, H100)
    assert (occ.blocks_per_sm, occ.limiter) == (blocks, limiter)
    assert 0 < occ.fraction <= 1


def test_prune_reasons():
    ok = ResourceUsage(registers=32)
    assert prune_reason(ok, 256, 0, H100) is None
    assert "threads per block" in prune_reason(ok, 2048, 0, H100)
    assert "shared memory" in prune_reason(ok, 256, 300 * 1024, H100)
    assert "spills 24 bytes" in prune_reason(ResourceUsage(registers=32, spill_store_bytes=12, spill_load_bytes=12), 256, 0, H100)
    assert prune_reason(ResourceUsage(registers=32, spill_store_bytes=12), 256, 0, H100, max_spill_bytes=64) is None
    a100 = limits_for("sm_80")
    assert "shared memory" in prune_reason(ok, 256, 200 * 1024, a100)
    assert prune_reason(ok, 256, 200 * 1024, H100) is None
    with pytest.raises(UnknownArchError):
        limits_for("sm_70")
    assert limits_for("sm_90a", multiprocessors=114).multiprocessors == 114


SPILLY = """
//@ kernel: k
//@ param ACC: 8, 96, 512   -- accumulators per thread
//@ param CAP: 32, 255      -- register cap
//@ require ACC <= 128 or CAP == 255 -- a capped thread cannot hold that array
//@ grid: 1
//@ block: 128
//@ max_registers: CAP
extern "C" __global__ void k(const float* x, float* y, int n) {
    float acc[ACC];
    #pragma unroll
    for (int j = 0; j < ACC; ++j) acc[j] = x[j * n + threadIdx.x];
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < ACC; ++j) s += acc[j] * acc[(j * 7) % ACC];
    y[threadIdx.x] = s;
}
"""


def test_space_shrinks_stage_by_stage_with_reasons():
    template = parse_template(SPILLY, "spilly.cu", set())
    report = build_space(template, {}, CompileOptions(arch="sm_90"), H100)
    assert report.total == 6
    assert report.after_constraints == 5  # ACC=512 with a 32-register cap is excluded
    assert report.after_compile == 5
    kept = [c.config for c in report.candidates]
    assert {"ACC": 8, "CAP": 32} in kept and {"ACC": 96, "CAP": 255} in kept
    assert {"ACC": 96, "CAP": 32} not in kept  # 96 floats in 32 registers spill
    assert {p.stage for p in report.pruned} >= {"constraint", "hardware"}
    assert any("spills" in reason for reason, _ in report.reasons("hardware"))
    assert report.reasons("constraint") == [("a capped thread cannot hold that array", 1)]
    for c in report.candidates:
        assert c.occupancy.blocks_per_sm >= 1 and not c.resources.spills


def test_suite_template_space_at_a_shape():
    folder = suite.load("silu_and_mul")
    env = suite.environment(folder.spec, {"T": 16, "D": 4096}, "bf16", "default")
    configs = folder.template.sample_configs(40, seed=1)
    report = build_space(folder.template, env, suite.base_options("bf16", {"ACT": 0}, "sm_90"), H100,
                         configs=configs)
    assert report.total == 40
    assert report.after_hardware == len(report.candidates) <= report.after_compile <= report.after_constraints
    assert report.candidates, report.reasons()
    assert len(report.pruned) + len(report.candidates) == 40


SWEPT = """
//@ kernel: k
//@ param THREADS: 32, 64, 128, 256
//@ param VEC: 1, 2, 4, 8
//@ param BROKEN: 0, 1      -- a value that does not compile
//@ require H % (THREADS * VEC) == 0 -- the row splits evenly
//@ grid: T
//@ block: THREADS
extern "C" __global__ void k(float* y) {
#if BROKEN
    this does not compile;
#endif
    y[blockIdx.x * THREADS * VEC + threadIdx.x] = VEC;
}
"""


def _compare(report):
    """What a SpaceReport says, without its objects' identities."""
    return (report.total, report.after_constraints, report.after_compile,
            [(c.config, c.grid, c.resources) for c in report.candidates],
            sorted((tuple(p.config.items()), p.stage, p.reason) for p in report.pruned))


def test_a_sweeps_shapes_of_one_width_screen_and_compile_once(monkeypatch):
    """At the second token count of a width the space is the one a fresh process builds there (the
    grid its own), with no compile asked for: the constraint stage and the compile verdicts (an
    error too) are the first shape's."""
    from astra_kernels.tools.search import space as space_module

    template = parse_template(SWEPT, "swept.cu", {"T", "H"})
    asked: list[int] = []
    real = space_module.compile_many

    def counting(variants, **kwargs):
        variants = list(variants)
        asked.append(len(variants))
        return real(variants, **kwargs)

    monkeypatch.setattr(space_module, "compile_many", counting)
    options = CompileOptions(arch="sm_90")
    first = build_space(template, {"T": 3, "H": 256}, options, H100)
    assert asked == [first.after_constraints] and first.after_constraints > first.after_compile > 0
    assert any(p.stage == "compile" for p in first.pruned)
    second = build_space(template, {"T": 5, "H": 256}, options, H100)
    assert asked[1:] == [0]
    assert {c.grid for c in second.candidates} == {(5,)}
    other_width = build_space(template, {"T": 5, "H": 64}, options, H100)
    assert other_width.after_constraints < first.after_constraints  # screened again: fewer rows split evenly

    space_module._constrained_memo.clear()
    space_module._compiled_memo.clear()
    assert _compare(second) == _compare(build_space(template, {"T": 5, "H": 256}, options, H100))
    assert _compare(other_width) == _compare(build_space(template, {"T": 5, "H": 64}, options, H100))


def test_a_compiler_crash_is_compiled_again_at_the_next_shape(monkeypatch):
    """A compile error is the source's (kept for the width's other shapes), but a crash without a
    compiler log (an out-of-memory kill) or a timeout may not happen again: asked for again."""
    from astra_kernels.tools.search import space as space_module
    from astra_kernels.tools.toolchain.compiler import CompileOutcome

    template = parse_template(SWEPT.replace("this does not compile;", "this does not compile either;"), "crash.cu",
                              {"T", "H"})
    asked: list[int] = []

    def crashing(variants, **kwargs):
        variants = list(variants)
        asked.append(len(variants))
        return [CompileOutcome(index=i, error="the compiler crashed on this source (exit code -9)",
                               error_type=kind) for i, kind in zip(range(len(variants)),
                                                                   ["CompileError", "CompileTimeoutError"] * len(variants))]

    monkeypatch.setattr(space_module, "compile_many", crashing)
    first = build_space(template, {"T": 3, "H": 256}, CompileOptions(arch="sm_90"), H100)
    second = build_space(template, {"T": 5, "H": 256}, CompileOptions(arch="sm_90"), H100)
    assert first.after_compile == second.after_compile == 0 and asked == [first.after_constraints] * 2
    assert {p.reason for p in second.pruned if p.stage == "compile"} == {"the compiler crashed on this source (exit code -9)"}
