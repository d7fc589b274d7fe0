"""The agent end to end on a real GPU: a scripted model answers with a known-better silu_and_mul
kernel (the suite's template with the parameters that tuning found best at few tokens, written
in as constants); the graph tests it at Astra's five shapes, times it, accepts it, and reports
the measured speedup over the baseline."""

from __future__ import annotations

import re

import pytest

from support.agent_fakes import ScriptedChatModel, decision
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels.kernels_sglang import suite

KNOWN_BETTER = {"THREADS": 128, "VEC": 4, "CHUNKS": 8, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1}


def fixed_kernel(config: dict[str, int]) -> str:
    """The template with each parameter turned into a constant (`//@ derive`), no `default`."""
    source = suite.load("silu_and_mul").template.source
    for name, value in config.items():
        source = re.sub(rf"^//@ param {name}:.*$", f"//@ derive {name} = {value}", source, flags=re.M)
    return re.sub(r"^//@ default:.*\n", "", source, flags=re.M)


def test_the_rewrite_is_a_kernel_without_parameters():
    template = suite.load("silu_and_mul").template
    from astra_kernels.nodes.shared.measure import parse_candidate

    parsed = parse_candidate("silu_and_mul", fixed_kernel(KNOWN_BETTER))
    assert not parsed.parameters and parsed.kernel == template.kernel


@pytest.mark.gpu
def test_the_graph_finds_verifies_and_reports_a_better_kernel(tmp_path):
    answer = f"Split each row over 8 CTAs so that 16 tokens fill the GPU.\n```cuda\n{fixed_kernel(KNOWN_BETTER)}```"
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), answer, decision("stop")])
    context = RunContext(chat_model=model, results=str(tmp_path / "results.sqlite"), out=str(tmp_path / "out"))
    app = build_graph().compile()
    result = app.invoke({"kernel": "silu_and_mul"}, context=context,
                        config={"recursion_limit": recursion_limit(context)})
    report = result["report"]
    print((tmp_path / "out" / "report.md").read_text())
    assert [c["verdict"] for c in result["history"]] == ["accepted"]
    assert report["best"]["id"] == 1 and report["best"]["origin"] == "rewrite"
    assert len(report["shapes"]) == 5 and all(r["best_us"] and r["baseline_us"] for r in report["shapes"])
    assert report["geomean_speedup"] > 1.0
