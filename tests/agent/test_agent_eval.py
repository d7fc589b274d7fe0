"""`astra eval-agent`'s measure of what a model adds (graph/agent_eval.py), with scripted models on
the fake GPU: search alone and the agent on the same budget, the model's candidates counted, the
speedups and fast_p read from the two reports."""

from __future__ import annotations

import json

from support.agent_fakes import FakeGPU, ScriptedChatModel, code_answer, decision
from astra_kernels.graph import RunContext
from astra_kernels.graph.agent_eval import evaluate_kernel, write

PAYLOAD = {"kernel": "silu_and_mul", "shapes": [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]}


def context(model, tmp_path, **kw) -> RunContext:
    return RunContext(chat_model=model, evaluator=FakeGPU(), tune_sample=12, tune_seconds=20, rounds=2,
                      results=str(tmp_path / "unused.sqlite"), **kw)


def test_a_model_whose_rewrite_wins_is_counted_and_its_speedup_over_search_alone_measured(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=0.5"), decision("stop")])
    result = evaluate_kernel("silu_and_mul", PAYLOAD, context(model, tmp_path), tmp_path / "eval")
    assert result.model_candidates == 1 and result.compiled == 1 and result.passed == 1
    assert set(result.speedups()) == {"16x4096", "64x8192"}
    assert all(v > 1.0 for v in result.speedups().values())  # 0.5 us beats what search alone found
    assert result.fast(1.0) == 1.0 and result.slower(0.02) == []
    assert (tmp_path / "eval" / "search" / "report.md").is_file() and (tmp_path / "eval" / "agent" / "report.md").is_file()
    assert "not sent" not in (tmp_path / "eval" / "agent" / "report.md").read_text()
    files = write([result], "scripted", 0.02, tmp_path / "eval")
    data = json.loads(files[0].read_text())
    assert data["kernels"][0]["fast"]["1"] == 1.0 and data["kernels"][0]["geomean"] > 1.0
    text = files[1].read_text()
    assert "| silu_and_mul | 1 | 1/1 | 1/1 |" in text and "What scripted adds over search alone" in text


def test_a_model_that_never_compiles_adds_nothing_and_the_eval_says_so(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), "no code at all", "still none", "nothing",
                                       decision("stop")])
    result = evaluate_kernel("silu_and_mul", PAYLOAD, context(model, tmp_path, fixes=2), tmp_path / "eval")
    assert result.model_candidates >= 1 and result.compiled == 0 and result.passed == 0
    assert result.speedups() == {"16x4096": 1.0, "64x8192": 1.0}  # no better, no worse than search alone
    assert result.fast(1.0) == 0.0 and result.slower(0.02) == []
    text = write([result], "scripted", 0.02, tmp_path / "eval")[1].read_text()
    assert f"| silu_and_mul | {result.model_candidates} | 0/{result.model_candidates} | 0/{result.model_candidates} |" in text


def test_astra_eval_agent_runs_both_over_http_on_a_replay_and_writes_its_table(tmp_path, capsys):
    """The command as a user runs it, against the local OpenAI-compatible stub (a script, not a
    model) and the shipped rmsnorm recording: both runs, their folders, eval.json and eval.md."""
    from astra_kernels import cli
    from astra_kernels.testing.openai_stub import OpenAIStub

    def script(messages):
        text = messages[-1]["content"]
        if "single word" in text:
            return "ready"
        if '"action"' in messages[0]["content"]:  # a plan: tune once, then stop
            return decision("tune") if "round 1" in text or "Round 1" in text else decision("stop")
        return code_answer("us=1.0")

    out = tmp_path / "eval"
    with OpenAIStub(script) as stub:
        code = cli.main(["eval-agent", "rmsnorm", "--model", "openai:scripted", "--base-url", stub.url,
                         "--replay", "recorded", "--shapes", "128x4096", "--rounds", "2", "--tune-seconds", "3",
                         "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    data = json.loads((out / "eval.json").read_text())
    kernel = data["kernels"][0]
    assert kernel["kernel"] == "rmsnorm" and kernel["shapes"] == ["128x4096"]
    assert kernel["search_us"]["128x4096"] and kernel["agent_us"]["128x4096"]  # both measured, from the recording
    assert (out / "rmsnorm" / "search" / "report.md").is_file() and (out / "rmsnorm" / "agent" / "report.md").is_file()
    assert "What openai:scripted adds over search alone" in printed and "| rmsnorm |" in printed


def test_astra_eval_agent_needs_a_model(tmp_path, capsys):
    from astra_kernels import cli

    assert cli.main(["eval-agent", "rmsnorm", "--replay", "recorded", "--out", str(tmp_path / "e")]) == 2
    assert "give --model" in capsys.readouterr().out and not (tmp_path / "e").exists()


def test_a_model_server_that_does_not_answer_is_named_before_search_alone_runs(tmp_path, capsys):
    from astra_kernels import cli

    code = cli.main(["eval-agent", "rmsnorm", "--model", "openai:x", "--base-url", "http://127.0.0.1:9/v1",
                     "--timeout", "5", "--replay", "recorded", "--out", str(tmp_path / "e")])
    printed = capsys.readouterr().out
    assert code == 1 and "did not answer" in printed and not (tmp_path / "e" / "rmsnorm").exists()
