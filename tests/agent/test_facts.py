"""The facts the prompts state: generated from common.cuh, the spec and the measurements, with
unknowns left out rather than printed as None."""

from __future__ import annotations

import math
import re

from astra_kernels.nodes.state import Candidate, ShapeMeasurement
from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.nodes.shared import facts
from astra_kernels.nodes.shared.facts import (
    ShapeRow,
    describe_gpu,
    describe_kernel,
    describe_shapes,
    device_helpers,
)

COMMON = (suite.SUITE_DIR / "common.cuh").read_text()


def test_device_helpers_name_every_device_function_and_vecs_real_member():
    text = device_helpers()
    declared = set(re.findall(r"__device__[^;{]*?\b(\w+)\s*(?:<[^<>()]*>)?\s*\(", COMMON))
    listed = set(re.findall(r"- function `(\w+)`", text))
    assert declared and listed == declared
    member = re.search(r"struct[^{;]*\bVec\s*\{([^}]*)\}", COMMON).group(1).strip().rstrip(";")
    assert f"`{member}`" in text
    has_data = re.search(r"\bdata\s*\[", member) is not None
    assert (".data[" in text) == has_data and ("`U data[" in text) == has_data
    assert "block_sum" not in text or "block_sum" in COMMON  # no reduction the header lacks


def test_helpers_of_parses_a_header_it_has_never_seen():
    header = """#ifndef GUARD_H
#define GUARD_H
#include <cuda_fp16.h>
#define TILE 64
typedef float acc_t;
constexpr int kWarp = 32;
// Four lanes, one access.
struct __align__(16) Quad { float a; float b[3]; };
template <typename T>
__device__ inline T
block_reduce(T x, int n) {
    if (n) { return x; }
    return x;
}
__global__ void not_a_helper(int* p) { p[0] = 1; }
#ifdef __CUDA_ARCH__
__device__ void arch_only() {}
#endif
#endif
"""
    helpers = {h.name: h for h in facts._helpers_of(header)}
    assert set(helpers) == {"cuda_fp16.h", "TILE", "acc_t", "kWarp", "Quad", "block_reduce", "arch_only"}
    assert helpers["Quad"].members == ("float a", "float b[3]") and helpers["Quad"].doc == "Four lanes, one access."
    assert helpers["block_reduce"].text == "template <typename T> __device__ inline T block_reduce(T x, int n)"
    assert helpers["arch_only"].condition == "defined(__CUDA_ARCH__)" and not helpers["TILE"].condition
    assert [helpers[n].kind for n in ("TILE", "acc_t", "kWarp")] == ["define", "type", "constant"]


def test_describe_kernel_states_dtype_tolerance_and_every_argument():
    folder = suite.load("silu_and_mul")
    text = describe_kernel(folder.spec, "bf16")
    tol = suite.problem(folder, folder.spec.default_shapes()[0], "bf16").tolerance("bf16")
    assert "bf16" in text and "__nv_bfloat16" in text and folder.spec.summary in text
    assert f"rtol {tol.rtol:g}, atol {tol.atol:g}" in text
    for arg in folder.spec.args:
        assert f"`{arg.name}` (" in text
    assert "None" not in text
    fp32 = describe_kernel(folder.spec, "fp32")
    assert f"atol {folder.spec.tolerances['fp32'].atol:g}" in fp32 and "None" not in fp32


def test_describe_gpu_leaves_out_what_it_is_not_given():
    partial = describe_gpu({"name": "Fake GPU", "multiprocessors": 132})
    assert "Fake GPU" in partial and "132 SMs" in partial
    assert "arch" not in partial and "shared" not in partial and "GB/s" not in partial and "launch floor" not in partial
    assert "None" not in partial
    full = describe_gpu({"name": "H", "arch": "sm_90", "max_shared_per_block_optin": 232448}, 3900.4, 2.126)
    assert "sm_90" in full and "227 KiB" in full and "3900 GB/s" in full and "launch floor 2.13 us" in full
    # a recording's source, as the recordings of 2026-11-28 and before word it, without saying "empty kernel" twice
    sourced = describe_gpu({"name": "H", "launch_floor_from": "an empty kernel measured with these results, 2026-11-28"},
                           None, 2.126)
    assert sourced.endswith("(an empty kernel under CUDA-graph replay: measured with these results, 2026-11-28)")


def test_a_replay_s_gpu_has_the_launch_floor_its_recording_keeps_and_says_where_it_was_measured(tmp_path):
    """A replay's prompt used to judge no shape ("not judged": no launch floor); the recording's device
    facts (scripts/device_facts.py) give its GPU's floor and its source, and the shapes are judged."""
    from astra_kernels.graph import RunContext
    from astra_kernels.nodes.shared.measure import launch_floor_us, stored_evaluator

    # An H100's recording of 2026-11-27, whose store keeps no launch floor of its own (the newer
    # H200 recordings measured one beside their results; both paths end in a judged prompt).
    context = RunContext(replay="recorded:h100-2026-11-27", results=str(tmp_path / "results.sqlite"))
    floor = launch_floor_us(context, "rmsnorm")
    device = stored_evaluator(context, "rmsnorm").worker.device
    assert floor == device["launch_floor_us"] and 0.5 < floor < 2.0
    text = describe_gpu(device, None, floor)
    assert "132 SMs" in text and f"launch floor {floor:.2f} us" in text
    assert "measured by astra bench on an NVIDIA H100 80GB HBM3 on 2026-11-27" in text
    judged = describe_shapes([ShapeRow("128x4096", us=3.1, floor_us=1.9, launch_floor_us=floor)])
    assert "not judged" not in judged and "done" in judged


def test_describe_shapes_tells_latency_from_bandwidth_bound_and_done():
    small = ShapeRow("16x4096", us=2.4, floor_us=0.5, launch_floor_us=2.0, baseline_us=3.0)
    large = ShapeRow("2048x14336", us=100.0 / 0.7, floor_us=100.0, launch_floor_us=2.0)
    assert small.bound() == "latency-bound" and small.done(0.9) is True
    assert large.bound() == "bandwidth-bound" and large.done(0.9) is False
    text = describe_shapes([small, large])
    lines = text.splitlines()
    assert "2.40 us" in lines[0] and "latency-bound" in lines[0] and lines[0].endswith("done")
    assert "1.25x" in lines[0] and "1.43x the bytes floor" in lines[1] and lines[1].endswith("not done")
    assert lines[-1].startswith("Done at 1 of 2 shapes") and "not done: 2048x14336 (bandwidth-bound)" in lines[-1]


def test_describe_shapes_with_unknown_floors_says_only_what_is_known():
    text = describe_shapes([ShapeRow("1x1", us=2.0), ShapeRow("3x3", us=None, floor_us=0.2)])
    assert "None" not in text and "bound" not in text.replace("not judged", "")
    assert "- 1x1: 2.00 us" in text and "- 3x3: no time" in text and "1x1, 3x3" in text
    row = ShapeRow.from_measurement(ShapeMeasurement(label="1x1", status="ok", median_us=2.0,
                                                     fraction_of_copy_bandwidth=0.25), launch_floor_us=2.0)
    assert row.floor_us == 0.5 and row.bound() == "latency-bound"


def test_model_facts_omit_unknown_compiler_facts_and_name_each_shapes_holder():
    measured = [ShapeMeasurement(label="16x4096", status="ok", median_us=2.0)]
    baseline = Candidate(id=0, origin="baseline", source="", measurements=[
        ShapeMeasurement(label="16x4096", status="ok", median_us=3.0, floor_us=0.4)], registers=32, spills=False)
    tuned = Candidate(id=1, origin="tune", source="", measurements=measured, verdict="accepted")
    state = {"kernel": "silu_and_mul", "dtype": "bf16", "baseline": baseline.model_dump(), "best": tuned.model_dump(),
             "gpu": {"device": {"name": "Fake GPU", "multiprocessors": 132}, "launch_floor_us": 1.6},
             "front": {"16x4096": {"candidate": 1, "origin": "tune", "median_us": 2.0, "floor_us": 0.4,
                                   "config": {"VEC": 4}}}}
    text = facts.model_facts(state)
    assert "None" not in text and "resources" not in text  # nothing known of candidate 1's compile
    assert "speedup 1.50x over the baseline's 3.00 us" in text and "latency-bound" in text
    assert "- 16x4096: candidate 1 (tune) at {'VEC': 4}" in text and "Fake GPU" in text and "132" in text
    known = facts.model_facts({**state, "best": baseline.model_dump()})
    assert "## Candidate 0's resources\n32 registers per thread, no spills" in known


def test_the_models_are_told_the_correctness_contract_the_tester_holds_them_to():
    """The odd shapes the run does not time, every other dtype and variant, NaN-filled outputs and
    `//@ require`: the facts the planner, generator and templater read (issue 43)."""
    from astra_kernels import suite

    spec = suite.load("silu_and_mul").spec
    baseline = Candidate(id=0, origin="baseline", source="", measurements=[
        ShapeMeasurement(label="16x4096", status="ok", median_us=3.0, floor_us=0.4)])
    state = {"kernel": "silu_and_mul", "dtype": "bf16", "baseline": baseline.model_dump(), "shapes": [
        {"T": 3, "D": 1002}], "gpu": {}, "front": {}}
    text = facts.model_facts(state)
    section = text.split("## What a kernel must get right (checked before any time counts)\n")[1].split("\n## ")[0]
    odd = [spec.label(s) for s in spec.shapes["odd"]]
    assert all(label in section for label in odd if label != "3x1002") and "3x1002" not in section  # timed: not odd
    assert "fp16 (default)" in section and "bf16 (gelu)" in section and "bf16 (default)" not in section
    assert "filled with NaN" in section and "//@ require" in section and "rejects the kernel everywhere" in section


def test_the_cost_says_tokens_are_unknown_where_the_server_reported_none():
    """A server that reports no usage (some OpenAI-compatible ones) must not read as "0 tokens";
    several roles get a total line."""
    from astra_kernels.nodes.reporter import cost_lines, costs, token_text

    calls = [{"role": "planner", "seconds": 1.0, "outcome": "answered", "input_tokens": None, "output_tokens": None},
             {"role": "coder", "seconds": 2.0, "outcome": "answered", "input_tokens": 100, "output_tokens": 50},
             {"role": "coder", "seconds": 2.0, "outcome": "answered", "input_tokens": None, "output_tokens": None},
             {"role": "coder", "seconds": 9.0, "outcome": "timed_out"}]
    models = costs({"calls": calls})["models"]
    assert token_text(models["planner"]) == "tokens unknown (the server reported no usage)"
    assert token_text(models["coder"]) == "100 tokens in, 50 out (1 of 2 answers without usage)"
    lines = cost_lines(models)
    assert lines[0] == "- planner: 1 requests (0 failed, 0 timed out), tokens unknown (the server reported no usage), 1.0 s"
    assert lines[-1] == "- all roles: 4 requests, 100 tokens in, 50 out (2 of 3 answers without usage), 14.0 s"


def test_the_planners_claim_about_few_token_winners_holds_for_every_shipped_table():
    """planner_system.md says what the measured winners at 1 to 64 tokens do: an elementwise kernel
    spreads each row over 4 or more CTAs, a norm gives each row one CTA of 256 or more threads. Held
    here against every shipped table (a retune that changes it fails this until the prompt says so)."""
    from pathlib import Path

    from astra_kernels.suite import tuned_tables

    prompt = (Path(facts.__file__).parents[1] / "prompts" / "planner_system.md").read_text()
    assert "4 or more\nCTAs" in prompt or "4 or more CTAs" in prompt.replace("\n", " ")
    assert "one CTA of 256 or more threads" in prompt.replace("\n", " ")
    checked = 0
    for kind in tuned_tables.gpu_kinds():
        for kernel, rule in (("silu_and_mul", "ctas"), ("rmsnorm", "threads"), ("fused_add_rmsnorm", "threads")):
            if kernel not in tuned_tables.shipped_kernels(kind, "cold"):
                continue
            table = DispatchTable.model_validate_json(tuned_tables.table_path(kernel, kind).read_text())
            folder = suite.load(kernel)
            for entry in table.entries:
                tokens = entry.shape[folder.spec.symbols[0]]
                if tokens > 64 or entry.source == "baseline":
                    continue
                env = suite.environment(folder.spec, entry.shape, table.dtype, table.variant)
                instance = table.source_of(entry.source).instantiate(entry.config, env)
                ctas, threads = math.prod(instance.grid), math.prod(instance.block)
                where = f"{kind} {kernel} {folder.spec.label(entry.shape)}"
                assert (ctas / tokens >= 4) if rule == "ctas" else (ctas == tokens and threads >= 256), where
                checked += 1
    assert checked >= 12
