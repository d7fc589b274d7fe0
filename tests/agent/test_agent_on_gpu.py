"""The agent end to end on a real GPU: a scripted model answers with a known-better silu_and_mul
kernel (the suite's template with the parameters that tuning found best at few tokens, written
in as constants); the graph tests it at Astra's five shapes, times it, accepts it, and reports
the measured speedup over the baseline."""

from __future__ import annotations


import json
import re

import numpy as np
import pytest

from support.agent_fakes import ScriptedChatModel, decision
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels import suite
from astra_kernels.nodes.reporter import fixed_source

KNOWN_BETTER = {"THREADS": 128, "VEC": 4, "CHUNKS": 8, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}


def fixed_kernel(config: dict[str, int]) -> str:
    """The template with each parameter turned into a constant (`//@ derive`), no `default`."""
    return fixed_source(suite.load("silu_and_mul").template.source, config)


def test_the_rewrite_is_a_kernel_without_parameters():
    template = suite.load("silu_and_mul").template
    from astra_kernels.nodes.shared.measure import parse_candidate

    parsed = parse_candidate("silu_and_mul", fixed_kernel(KNOWN_BETTER))
    assert not parsed.parameters and parsed.kernel == template.kernel


@pytest.mark.gpu
def test_the_graph_finds_verifies_and_reports_a_better_kernel(tmp_path):
    answer = f"Split each row over 8 CTAs so that 16 tokens fill the GPU.\n```cuda\n{fixed_kernel(KNOWN_BETTER)}```"
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), answer, decision("stop")])
    # search_floor off: this holds a rewrite against the baseline (the shipped table would hold the shapes first)
    context = RunContext(chat_model=model, results=str(tmp_path / "results.sqlite"), out=str(tmp_path / "out"),
                         search_floor=False)
    app = build_graph().compile()
    result = app.invoke({"kernel": "silu_and_mul"}, context=context,
                        config={"recursion_limit": recursion_limit(context)})
    report = result["report"]
    print((tmp_path / "out" / "report.md").read_text())
    assert [c["verdict"] for c in result["history"]] == ["accepted"]
    assert report["best"]["id"] == 1 and report["best"]["origin"] == "rewrite"
    assert len(report["shapes"]) == 5 and all(r["best_us"] and r["baseline_us"] for r in report["shapes"])
    assert report["geomean_speedup"] > 1.0


SMALL = {"THREADS": 256, "VEC": 4, "CHUNKS": 16, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}  # many CTAs per row
LARGE = {"THREADS": 256, "VEC": 8, "CHUNKS": 8, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
PER_SHAPE = [{"T": 1, "D": 28672}, {"T": 16, "D": 14336}, {"T": 128, "D": 14336}, {"T": 128, "D": 28672}]


def slowed_when(source: str, condition: str) -> str:
    """The kernel with each CTA's first thread asleep for 20 us where `condition` holds: a
    candidate that is fast at some shapes and plainly slower at others."""
    anchor = "typedef Vec<scalar_t, VEC> V;"
    assert anchor in source
    return source.replace(anchor, f"{anchor}\n    if (({condition}) && threadIdx.x == 0) __nanosleep(20000);", 1)


@pytest.mark.gpu
def test_best_of_three_keeps_each_candidate_only_where_it_wins(tmp_path):
    """Three candidates a round: one fast for few tokens and slowed for many, one the other way
    round, one that does not compile. Each correct one is checked and timed at every shape and
    kept only at the shapes where it beats the best so far; the result is a table over them."""
    small = slowed_when(fixed_kernel(SMALL), "tokens > 64")
    large = slowed_when(fixed_kernel(LARGE), "tokens <= 64")
    broken = fixed_kernel(SMALL).replace("typedef Vec<scalar_t, VEC> V;", "typedef Vec<scalar_t, VEC> V; nope();", 1)
    answers = [f"For few tokens.\n```cuda\n{small}```", f"For many tokens.\n```cuda\n{large}```",
               f"Broken.\n```cuda\n{broken}```"]
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), *answers, decision("stop")])
    context = RunContext(chat_model=model, results=str(tmp_path / "results.sqlite"), out=str(tmp_path / "out"),
                         best_of=3, fixes=0, search_floor=False)  # each draft against the baseline
    app = build_graph().compile()
    result = app.invoke({"kernel": "silu_and_mul", "shapes": PER_SHAPE}, context=context,
                        config={"recursion_limit": recursion_limit(context)})
    print((tmp_path / "out" / "report.md").read_text())
    by_source = {("small" if "tokens > 64" in c["source"] else "large" if "tokens <= 64" in c["source"] else "broken"): c
                 for c in result["history"]}
    assert by_source["broken"]["verdict"] == "compile_error" and "nope" in by_source["broken"]["message"]
    # Their `//@ require` lines (D % VEC, a warp's work per chunk) exclude silu's odd widths: not a
    # failure, the baseline serves those; a wrong result there would be one.
    assert not any(by_source[k]["odd_shapes"].startswith("failed") for k in ("small", "large"))
    front = result["front"]
    assert front["1x28672"]["candidate"] == front["16x14336"]["candidate"] == by_source["small"]["id"]
    assert by_source["small"]["id"] not in (front["128x14336"]["candidate"], front["128x28672"]["candidate"])
    assert by_source["large"]["id"] in (front["128x14336"]["candidate"], front["128x28672"]["candidate"])
    for row in result["report"]["shapes"]:
        assert row["best_us"] <= row["baseline_us"]
    assert result["report"]["single_kernel"] is None and not (tmp_path / "out" / "best.cu").exists()
    assert result["report"]["costs"]["gpu_seconds"] > 0
    _assert_the_export_runs_the_front(tmp_path, front)


def _assert_the_export_runs_the_front(tmp_path, front: dict) -> None:
    """`astra export OUT` of the run: at each shape the exported callable runs the kernel that
    holds it in the front (a rewrite by its candidate name, else the baseline) and matches the
    float64 reference."""
    torch = pytest.importorskip("torch")
    from astra_kernels.cli import main
    from astra_kernels.jobs import torch_tensors
    from astra_kernels.runtime.exported_kernel import load_callable
    from astra_kernels.tools.measuring.correctness import compare

    assert main(["export", str(tmp_path / "out"), "--out", str(tmp_path / "exported")]) == 0
    exported = load_callable(tmp_path / "exported")
    folder = suite.load("silu_and_mul")
    for shape in PER_SHAPE:
        label = folder.spec.label(shape)
        holder = front[label]
        inputs = folder.reference.make_inputs(np.random.default_rng(3), shape, "bf16", "default")
        expected = folder.reference.reference(inputs, shape, "bf16", "default")["out"]
        x = torch_tensors.to_torch(inputs["x"], "cuda")
        out = torch.full((shape["T"], shape["D"]), float("nan"), dtype=torch.bfloat16, device="cuda")
        launch = exported(x, out)
        torch.cuda.synchronize()
        wanted = "the baseline" if holder["origin"] == "baseline" else f"candidate-{holder['candidate']}"
        assert launch.picked_by == f"tuned: {wanted}", (label, launch)
        problem = suite.problem(folder, shape, "bf16")
        result = compare("out", torch_tensors.to_numpy(out), expected, problem.tolerance("bf16"))
        assert result.passed, f"{label} ({launch.kernel}): {result.detail}"


@pytest.mark.gpu
def test_eval_agent_with_an_expert_faster_at_some_shapes_is_never_below_search_alone(tmp_path):
    """A scripted expert's rewrite, fast for few tokens and slowed for many, then a search: on the
    GPU the agent's result is at or above search alone's at every shape (the search floor, its own
    search and the per-shape front), and astra eval-agent's figures say so (issue 43's GPU test).
    Both runs get the same budget. (A model that stops before searching can end below search alone
    where this run's search beats the shipped table: what eval-agent then reports.)"""
    from astra_kernels.evaluators import open_evaluator
    from astra_kernels.graph.agent_eval import evaluate_kernel, write

    small = slowed_when(fixed_kernel(SMALL), "tokens > 64")
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), f"For few tokens.\n```cuda\n{small}```",
                                       decision("tune"), decision("stop")])  # an expert that also searches
    # Both runs search the same seeded sample to its end (the seconds are a cap the sample stays
    # under), so they differ only by the rewrite and by measuring apart: two 8-second searches
    # stopped by the clock measured different configurations, and search alone's found one 2.4%
    # faster at 128x14336 (H200, 2026-11-29), a difference of search luck, not of the model.
    context = RunContext(chat_model=model, rounds=3, fixes=0, tune_seconds=60, tune_sample=24)
    result = evaluate_kernel("silu_and_mul", {"kernel": "silu_and_mul", "shapes": PER_SHAPE}, context,
                             tmp_path / "eval", open_worker=lambda results: open_evaluator("silu_and_mul", results))
    print(write([result], "scripted expert", 0.02, tmp_path / "eval")[1].read_text())
    holders = {run: {r["shape"]: (r["origin"], r["config"], r["best_us"]) for r in
                     json.loads((tmp_path / "eval" / run / "report.json").read_text())["shapes"]}
               for run in ("search", "agent")}
    print(json.dumps(holders, indent=1))
    assert result.model_candidates == 1 and result.compiled == 1 and result.passed == 1
    assert set(result.speedups()) == {"1x28672", "16x14336", "128x14336", "128x28672"}
    assert result.slower(0.02) == [], holders  # never below search alone beyond the noise


@pytest.mark.gpu
def test_the_planner_is_shown_nsight_computes_counters_for_the_holders(tmp_path):
    """On a GPU with ncu (the lent ones have it), the profiler node runs Nsight Compute over the
    slowest shape of each class for the kernel holding it, and the planner's next request shows the
    counters beside the probes' evidence (issue 43's profiler evidence, run for real)."""
    from astra_kernels.tools.measuring import nsight

    if nsight.find_ncu() is None:
        pytest.fail("Nsight Compute (ncu) is not installed on this GPU machine")
    model = ScriptedChatModel(answers=["ready", decision("tune"), decision("stop")])
    model.seen = []
    context = RunContext(chat_model=model, results=str(tmp_path / "results.sqlite"), out=str(tmp_path / "out"),
                         rounds=2, fixes=0, tune_seconds=5)
    app = build_graph().compile()
    result = app.invoke({"kernel": "silu_and_mul", "shapes": PER_SHAPE}, context=context,
                        config={"recursion_limit": recursion_limit(context)})
    planner = [m for m in model.seen if m[0].content.startswith("You plan")]
    assert len(planner) == 2  # after the search floor, and after the round's search
    for request in planner:  # the profiler ran after the floor, and again for any new holder
        facts = request[-1].content
        evidence = facts[facts.index("## Where the time goes"):]
        print(evidence[:3000])
        assert "Nsight Compute measured the slowest shape of each class" in evidence
        measured = re.findall(r"^- Nsight Compute at (\S+) \(candidate \d+, \w+\): DRAM throughput \d+% of peak; "
                              r"achieved occupancy \d+% of the SM's warps; .*top warp stalls", evidence, re.M)
        assert len(measured) >= 2 and set(measured) <= {"1x28672", "16x14336", "128x14336", "128x28672"}, measured
    assert result["report"]["shapes"]
