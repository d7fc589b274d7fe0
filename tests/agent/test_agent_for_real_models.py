"""The agent against scripted models that fail the way real ones do: a first draft using a member
that does not exist and a repair that needs the failed code, an answer quoting the old kernel
before the new one, `<think>` blocks, a candidate faster at one shape and slower at another, a
template wrong everywhere, N candidates of which one is right, a timeout. Each asserts what the
model was sent and what the graph did."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from support.agent_fakes import BASELINE, FakeGPU, ScriptedChatModel, code_answer, decision, kernel
from astra_kernels.cli import main
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels import suite
from astra_kernels.nodes.shared.chat import Asker, ModelTimedOut, ModelUnavailable
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.runtime.exported_kernel import load_callable

SHAPES = [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]
INPUT = {"kernel": "silu_and_mul", "shapes": SHAPES}


def run(tmp_path, model, **kw):
    ctx = RunContext(chat_model=model, evaluator=kw.pop("gpu", None) or FakeGPU(),
                     results=str(tmp_path / "results.sqlite"), tune_sample=12, tune_seconds=20, **kw)
    app = build_graph().compile()
    return app.invoke(INPUT, config={"recursion_limit": recursion_limit(ctx)}, context=ctx)


def verdicts(result) -> list[str]:
    return [c["verdict"] for c in result["history"]]


def test_a_draft_using_a_member_that_does_not_exist_is_repaired_with_its_own_code_in_view(tmp_path):
    """The prompt names Vec's real member; the model uses `.data` anyway, the compiler says so,
    and the repair is asked with the draft, the log and the first request all in the messages."""

    class CompilerGPU(FakeGPU):
        def evaluate(self, request):
            if ".data[" in request.source:
                from astra_kernels.tools.measuring.evaluation import EvaluationResult
                return EvaluationResult(status="compile_error", label=request.label, message=(
                    'candidate.cu(31): error: class "Vec<__nv_bfloat16, 8>" has no member "data"'))
            return super().evaluate(request)

    wrong = code_answer("us=1.5").replace("v.v[", "v.data[", 1)
    assert ".data[" in wrong
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), wrong, code_answer("us=1.5"), decision("stop")])
    result = run(tmp_path, model, gpu=CompilerGPU())
    assert verdicts(result) == ["compile_error", "accepted"]
    first, repair = model.seen[2], model.seen[3]
    assert "members `U v[N]`" in first[1].content and ".data[i]" not in first[1].content
    assert repair[:2] == first[:2] and ".data[" in repair[2].content
    assert 'has no member "data"' in repair[3].content and "line numbers count from" in repair[3].content


def test_the_model_is_told_the_kernel_the_gpu_the_floors_and_the_helpers_from_the_code(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=5.0"), decision("stop")])
    run(tmp_path, model)
    plan, draft = model.seen[1][-1].content, model.seen[2][1].content
    spec = suite.load("silu_and_mul").spec
    for text in (plan, draft):
        assert spec.summary in text and "bf16" in text and "rtol 0.02" in text
        assert "Fake GPU" in text and "132 SMs" in text
        assert "warp_sum" in text and "block reduction" not in text
        assert "None" not in text
        assert "16x4096: 3.00 us" in text
    assert BASELINE.strip() in plan  # the planner sees the kernel that holds the shapes


def test_an_answer_quoting_the_old_kernel_before_the_new_one_is_read_as_the_new_one(tmp_path):
    answer = (f"Here is the current kernel:\n```cuda\n{BASELINE}```\nand my faster one, shorter:\n"
              f"```CUDA\n{kernel('us=1.5')}```")
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), answer, decision("stop")])
    result = run(tmp_path, model)
    assert verdicts(result) == ["accepted"] and 'FAKE_MARKER "us=1.5"' in result["history"][0]["source"]


def test_think_blocks_are_dropped_from_plans_and_code(tmp_path):
    plan = '<think>I could {rewrite} or "tune"... {"action": "stop"}?</think>\n{"action": "Rewrite", "rationale": ' \
           '"16x4096 is 3x its launch floor", "optimizations": ["one CTA per 8 rows",],}'
    code = f"<think>\n```cuda\n{kernel('us=9')}```\n</think>\nDone.\n~~~cu\r\n{kernel('us=1.5')}~~~\r\n"
    model = ScriptedChatModel(answers=["ready", plan, code, decision("stop")])
    result = run(tmp_path, model)
    assert verdicts(result) == ["accepted"]
    assert result["history"][0]["idea"] == ["one CTA per 8 rows"]
    assert 'FAKE_MARKER "us=1.5"' in result["history"][0]["source"]


def test_a_candidate_faster_at_one_shape_and_slower_at_another_is_kept_only_where_it_wins(tmp_path):
    """Once the geometric mean accepted 1.0 vs 3.0 at one shape and 5.0 vs 3.0 at the other (1.34x)
    with a 67% regression; now the candidate wins 16x4096 only and 64x8192 keeps the baseline."""
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("per-shape=16x4096:1.0,64x8192:5.0"),
                                       decision("stop")])
    result = run(tmp_path, model)
    assert verdicts(result) == ["accepted"]
    front = result["front"]
    assert front["16x4096"]["candidate"] == 1 and front["16x4096"]["median_us"] == 1.0
    assert front["64x8192"]["candidate"] == 0 and front["64x8192"]["median_us"] == 3.0
    rows = {r["shape"]: r for r in result["report"]["shapes"]}
    assert rows["64x8192"]["speedup"] == 1.0 and rows["16x4096"]["speedup"] == 3.0
    assert result["report"]["single_kernel"] is None  # two kernels serve the shapes: the table is the result
    assert "won 16x4096: 16x4096 -67%, 64x8192 +67%" in result["history"][0]["message"]


def test_a_template_wrong_everywhere_goes_back_to_the_templater_with_sample_errors(tmp_path):
    template = suite.load("silu_and_mul").template.source
    wrong = f"A template.\n```cuda\n// fake: wrong\n{template}```"
    right = f"Fixed.\n```cuda\n// fake: fixed\nstatic const int fixed = 1;\n{template}```"
    model = ScriptedChatModel(answers=["ready", decision("templatize"), wrong, right, decision("stop")])
    result = run(tmp_path, model, rounds=2)
    assert verdicts(result)[:2] == ["incorrect", "accepted"]
    repair = model.seen[3]
    assert [m.type for m in repair] == ["system", "human", "ai", "human"]
    assert "no configuration was correct at shape 16x4096" in repair[3].content
    assert "configurations failed; for example:" in repair[3].content and "worst at (3, 5)" in repair[3].content


def test_best_of_n_keeps_the_one_right_candidate_of_three(tmp_path):
    answers = [code_answer("compile_error"), code_answer("wrong"), code_answer("us=1.5")]
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), *answers, decision("stop")])
    result = run(tmp_path, model, best_of=3, fixes=0)
    assert sorted(verdicts(result)) == ["accepted", "compile_error", "incorrect"]
    assert len({c["id"] for c in result["history"]}) == 3 and {c["slot"] for c in result["history"]} == {0, 1, 2}
    winner = next(c for c in result["history"] if c["verdict"] == "accepted")
    assert all(e["candidate"] == winner["id"] for e in result["front"].values())
    assert result["report"]["costs"]["models"]["coder"]["calls"] == 3


def test_the_n_drafts_are_asked_in_parallel(tmp_path):
    """Three branches must be in the model at once: each answer waits until all three asked."""
    barrier = threading.Barrier(3, timeout=20)

    class Parallel(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if "Rewrite this CUDA kernel" in messages[-1].content:
                barrier.wait()  # a BrokenBarrierError if the branches ran one after another
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Parallel(answers=["ready", decision("rewrite"), code_answer("us=2.0"), code_answer("us=1.5"),
                              code_answer("us=1.8"), decision("stop")])
    result = run(tmp_path, model, best_of=3, fixes=0)
    assert len(verdicts(result)) == 3  # all three drafts were tested and judged
    assert all(e["median_us"] == 1.5 for e in result["front"].values())  # the fastest holds every shape


def test_a_candidate_identical_to_one_measured_is_refused_and_repaired(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), f"Same.\n```cuda\n{BASELINE}```",
                                       code_answer("us=1.5"), decision("stop")])
    result = run(tmp_path, model)
    assert verdicts(result) == ["duplicate", "accepted"]
    assert "candidate 0 (baseline) again" in model.seen[3][-1].content


def test_a_timeout_is_asked_once_more_then_is_a_failed_answer():
    calls = []

    class Slow(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            calls.append(1)
            raise openai.APITimeoutError(request=httpx.Request("POST", "http://x/v1/chat/completions"))

    asker = Asker(Slow(answers=[]), "coder", retries=4, backoff_s=0)
    with pytest.raises(ModelTimedOut):
        asker.invoke([])
    assert len(calls) == 2 and [c["outcome"] for c in asker.calls] == ["timed_out", "timed_out"]
    timeout = openai.APITimeoutError(request=httpx.Request("POST", "http://x/v1/chat/completions"))
    once = Asker(ScriptedChatModel(answers=[timeout, "late but fine"]), "coder", retries=4, backoff_s=0)
    assert once.invoke([]).content == "late but fine"
    assert [c["outcome"] for c in once.calls] == ["timed_out", "answered"]


def test_an_answer_cut_off_at_the_cap_is_asked_again_once_with_twice_the_cap_and_the_report_says_so():
    """A reasoning model's cap counts its thinking: an answer that stops at the cap (finish_reason
    length) is the same question again with twice the cap before any repair; without a known cap
    it goes to the repair as any unusable answer."""
    from langchain_core.messages import AIMessage, HumanMessage

    from astra_kernels.nodes.reporter import costs
    from astra_kernels.nodes.shared.chat import ask_code

    class Capped(ScriptedChatModel):
        max_tokens: int = 100
        extra_body: dict = {"max_tokens": 100}

    cut = AIMessage(content="Let me think about the vector width and then\n```cuda\n__global__ void k(",
                    response_metadata={"finish_reason": "length"})
    model = Capped(answers=[cut, code_answer("us=1.5")])
    asker = Asker(model, "coder", backoff_s=0)
    code, _, conversation = ask_code(asker, [HumanMessage("write it")])
    assert "fake: us=1.5" in code and len(model.seen) == 2 and model.seen[1] == model.seen[0]  # no repair turn
    assert model.bound[1]["max_tokens"] == 200 and model.bound[1]["extra_body"] == {"max_tokens": 200}
    assert [c["truncated"] for c in asker.calls] == [True, False]
    report_costs = costs({"calls": asker.calls})["models"]["coder"]
    assert report_costs["truncated"] == 1
    refused = openai.BadRequestError("max_tokens is too large", response=httpx.Response(
        400, request=httpx.Request("POST", "http://x")), body=None)
    strict = Capped(answers=[cut, refused, code_answer("us=1.5")])  # a server whose limit the doubled cap passes
    code, _, _ = ask_code(Asker(strict, "coder", backoff_s=0), [HumanMessage("write it")])
    assert "fake: us=1.5" in code and "cut off at the model's output limit" in strict.seen[2][-1].content
    assert "max_tokens" not in strict.bound[2]  # the repair goes at the cap that answered
    uncapped = ScriptedChatModel(answers=[cut, code_answer("us=1.5")])
    ask_code(Asker(uncapped, "coder", backoff_s=0), [HumanMessage("write it")])
    assert "cut off at the model's output limit" in uncapped.seen[1][-1].content  # the repair, said why


def test_a_rate_limit_is_retried_then_answered_and_every_request_is_counted():
    response = httpx.Response(429, request=httpx.Request("POST", "http://x/v1/chat/completions"))
    limited = openai.RateLimitError("slow down", response=response, body=None)
    asker = Asker(ScriptedChatModel(answers=[limited, limited, "fine"]), "planner", retries=4, backoff_s=0)
    assert asker.invoke([]).content == "fine"
    assert [c["outcome"] for c in asker.calls] == ["failed", "failed", "answered"]
    down = openai.BadRequestError("bad", response=httpx.Response(
        400, request=httpx.Request("POST", "http://x")), body=None)
    with pytest.raises(ModelUnavailable):
        Asker(ScriptedChatModel(answers=[down, "never"]), "planner", backoff_s=0).invoke([])


def test_roles_take_their_own_models(tmp_path):
    planner = ScriptedChatModel(answers=["ready", decision("rewrite"), decision("stop")])
    coder = ScriptedChatModel(answers=["ready", code_answer("us=1.5")])
    ctx = RunContext(planner_chat_model=planner, coder_chat_model=coder, evaluator=FakeGPU(),
                     results=str(tmp_path / "results.sqlite"))
    result = build_graph().compile().invoke(INPUT, config={"recursion_limit": recursion_limit(ctx)}, context=ctx)
    assert verdicts(result) == ["accepted"] and not planner.answers and not coder.answers
    models = result["report"]["costs"]["models"]
    assert set(models) == {"planner", "coder", "preflight"} and models["preflight"]["calls"] == 2  # each endpoint


def test_a_planner_without_a_coder_falls_back_to_the_rules_rather_than_ending(tmp_path):
    planner = ScriptedChatModel(answers=["ready", decision("rewrite"), decision("stop")])
    ctx = RunContext(planner_chat_model=planner, evaluator=FakeGPU(), results=str(tmp_path / "results.sqlite"),
                     tune_sample=12, tune_seconds=20)
    result = build_graph().compile().invoke(INPUT, config={"recursion_limit": recursion_limit(ctx)}, context=ctx)
    assert [c["origin"] for c in result["history"]] == ["tune"]
    assert any("the plan was to rewrite but no coder model is configured" in e for e in result["report"]["events"])


def test_repairs_keep_the_turns_alternating_after_unusable_answers_and_timeouts(tmp_path):
    """Chat templates of many servers (Gemma's, Mistral's) refuse two user turns in a row: a repair
    after two unusable answers follows them, and a request that timed out is asked again as it was."""
    timeout = openai.APITimeoutError(request=httpx.Request("POST", "http://x/v1/chat/completions"))
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), "no code", "still none", timeout, timeout,
                                       code_answer("us=1.5"), decision("stop")])
    result = run(tmp_path, model, fixes=2)
    assert verdicts(result) == ["invalid", "invalid", "accepted"]
    after_unusable, after_timeout = model.seen[4], model.seen[5]
    for messages in (after_unusable, after_timeout):
        kinds = [m.type for m in messages]
        assert all(a != b for a, b in zip(kinds, kinds[1:])), kinds
    assert [m.content for m in after_unusable[2:5:2]] == ["no code", "still none"]
    assert after_timeout == after_unusable  # the timed-out question, asked again unchanged


def test_an_earlier_runs_files_do_not_pass_for_this_runs_result(tmp_path):
    out = tmp_path / "out"
    (out / "kernels").mkdir(parents=True)
    for stale in ("best.cu", "dispatch.json", "kernels/candidate-9.cu"):
        (out / stale).write_text("from an earlier run")
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("per-shape=16x4096:1.0,64x8192:5.0"),
                                       decision("stop")])
    run(tmp_path, model, out=str(out))
    # the rewrite that won 16x4096 and the baseline that kept 64x8192
    assert sorted(p.name for p in out.rglob("*.cu")) == ["baseline.cu", "candidate-1.cu"]
    assert not (out / "best.cu").exists()
    table = DispatchTable.model_validate_json((out / "dispatch.json").read_text())
    assert [e.source for e in table.entries] == ["candidate-1", "baseline"]
    assert table.sources["candidate-1"] == (out / "kernels" / "candidate-1.cu").read_text()


def test_a_result_mixing_a_rewrite_and_the_baseline_exports_as_one_file(tmp_path):
    """The run's dispatch.json carries the rewrite as a named source: `astra export OUT` builds the
    whole front (the rewrite at 16x4096, the baseline at 64x8192) into one file, whose pick
    follows the front and whose device part NVRTC compiles."""
    out = tmp_path / "out"
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("per-shape=16x4096:1.0,64x8192:5.0"),
                                       decision("stop")])
    run(tmp_path, model, out=str(out))
    assert "`astra export OUT` builds it" in (out / "report.md").read_text()
    assert main(["export", str(out), "--out", str(tmp_path / "exported")]) == 0
    exported = load_callable(tmp_path / "exported")
    assert exported.plan({"T": 16, "D": 4096}).picked_by == "tuned: candidate-1"
    assert exported.plan({"T": 64, "D": 8192}).picked_by == "tuned: the baseline"
    names = set().union(*(m.kernels for m in exported.compile("sm_90")))
    assert names == {b["name"] for b in exported.manifest["binaries"]}
    assert "Tuned on:      Fake GPU (sm_90)" in (tmp_path / "exported" / "silu_and_mul.cu").read_text()


def test_built_models_carry_the_roles_token_caps_and_no_client_retries():
    from astra_kernels.nodes.shared.chat import make_chat_model

    ctx = RunContext(model="openai:a", coder_model="openai:b", planner_max_tokens=300, coder_max_tokens=5000,
                     base_url="http://127.0.0.1:9/v1", planner_temperature=0.1)
    planner, coder = make_chat_model(ctx, "planner"), make_chat_model(ctx, "coder")
    assert (planner.model_name, planner.max_tokens, planner.temperature, planner.max_retries) == ("a", 300, 0.1, 0)
    assert (coder.model_name, coder.max_tokens, coder.max_retries) == ("b", 5000, 0)


def test_a_reasoning_model_gets_caps_that_leave_room_to_think_unless_told_otherwise(monkeypatch):
    """The README's o4-mini with the chat caps (2048 for a plan, counting its reasoning) had its plans
    cut off; its preset leaves room to think and says the reasoning effort, and what a run or a role
    sets still wins."""
    from astra_kernels.nodes.shared.chat import make_chat_model, role_settings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    ctx = RunContext(model="openai:o4-mini", coder_model="openai:gpt-4o")
    planner = role_settings(ctx, "planner")
    assert (planner["max_tokens"], planner["reasoning_effort"], planner["preset"]) == \
        (16384, "medium", "an OpenAI reasoning model")
    coder = role_settings(ctx, "coder")
    assert (coder["max_tokens"], coder["reasoning_effort"]) == (8192, None)  # a chat model's
    built = make_chat_model(ctx, "planner")
    assert (built.max_tokens, built.reasoning_effort) == (16384, "medium")
    told = RunContext(model="deepseek:deepseek-reasoner", planner_max_tokens=500, reasoning_effort="low")
    assert role_settings(told, "planner")["max_tokens"] == 500 and role_settings(told, "coder")["max_tokens"] == 32768
    assert role_settings(told, "planner")["reasoning_effort"] == "low"


def test_the_l2_regime_reaches_every_evaluation_and_the_table(tmp_path):
    """`--l2 warm`: the baseline, the rewrite and the tuner's searches are all timed warm, and the
    result's dispatch table says so."""
    seen = []

    class Recording(FakeGPU):
        def evaluate(self, request):
            seen.append(request.l2)
            return super().evaluate(request)

    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=1.5"), decision("tune"),
                                       decision("stop")])
    run(tmp_path, model, gpu=Recording(), l2="warm", out=str(tmp_path / "out"))
    assert seen and set(seen) == {"warm"}
    assert DispatchTable.model_validate_json((tmp_path / "out" / "dispatch.json").read_text()).l2 == "warm"


def test_identical_drafts_of_one_round_are_measured_once_and_the_twin_is_repaired(tmp_path):
    """Two slots answer the same kernel: the second is a duplicate before any GPU time (the fake GPU
    sees one draft's evaluations), and its repair, a different kernel, is measured."""
    gpu = FakeGPU()
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=1.5"), code_answer("us=1.5"),
                                       code_answer("us=1.2"), decision("stop")])
    result = run(tmp_path, model, best_of=2, fixes=1, gpu=gpu)
    by_verdict = sorted(verdicts(result))
    assert by_verdict == ["accepted", "accepted", "duplicate"], by_verdict
    twin = next(c for c in result["history"] if c["verdict"] == "duplicate")
    assert "of this round again, not measured twice" in twin["message"]
    assert "of this round again" in model.seen[4][-1].content  # the repair is asked why


def test_each_slot_starts_from_its_own_parent_with_its_own_direction(tmp_path):
    """Round 1: two drafts each win one shape (a minority each). Round 2: slot 0 starts from the one
    holding most shapes (the latest on a tie), slot 1 from the other; each slot is given its own
    optimization, the sibling's named as not theirs."""
    plan = ('{"action": "rewrite", "rationale": "r", "optimizations": ["more CTAs per row", "wider vectors"]}')
    model = ScriptedChatModel(answers=[
        "ready", plan, code_answer("per-shape=16x4096:1.0"), code_answer("per-shape=64x8192:1.0"),
        plan, code_answer("us=2.5"), code_answer("us=2.6"), decision("stop")])
    result = run(tmp_path, model, best_of=2, fixes=0, rounds=3)
    firsts = [m[-1].content for m in model.seen if "Rewrite this CUDA kernel" in m[-1].content]
    assert len(firsts) == 4

    def slot_of(text: str) -> int:  # the branches ask in either order: a prompt's slot by its direction
        return 0 if "- more CTAs per row (this draft's direction" in text else 1

    round1, round2 = sorted(firsts[:2], key=slot_of), sorted(firsts[2:], key=slot_of)
    for text, own, other in ((round1[0], "more CTAs per row", "wider vectors"),
                             (round1[1], "wider vectors", "more CTAs per row")):
        assert f"- {own} (this draft's direction" in text and f"The other drafts of this round try: {other}" in text
    a, b = (next(c for c in result["history"] if marker in c["source"]) for marker in ("16x4096:1.0", "64x8192:1.0"))
    assert a["verdict"] == b["verdict"] == "accepted"
    latest, other = max(a, b, key=lambda c: c["id"]), min(a, b, key=lambda c: c["id"])
    assert latest["source"] in round2[0] and f"candidate {latest['id']} (rewrite), the fastest measured at" in round2[0]
    assert other["source"] in round2[1] and f"candidate {other['id']} (rewrite), the fastest measured at" in round2[1]


def test_once_the_token_budget_is_spent_no_request_is_sent_and_the_rules_take_over(tmp_path):
    """A plan that uses 160 tokens of a 150-token budget is the run's last request: the draft it asked
    for is never sent (a failed draft saying why), the next plan comes from the rules, and the report
    counts the requests not sent."""
    from langchain_core.messages import AIMessage

    from astra_kernels.nodes.reporter import cost_lines

    plan = AIMessage(content=decision("rewrite"), usage_metadata={"input_tokens": 100, "output_tokens": 60,
                                                                   "total_tokens": 160})
    model = ScriptedChatModel(answers=["ready", plan, code_answer("us=1.0"), decision("stop")])
    result = run(tmp_path, model, token_budget=150, rounds=2)
    assert len(model.seen) == 2  # the preflight and the one plan: nothing after the budget was spent
    drafts = [c for c in result["history"] if c["origin"] == "rewrite"]
    assert len(drafts) == 1 and "token budget of 150 is spent" in drafts[0]["message"]  # and not repaired
    assert [c["origin"] for c in result["history"]] == ["rewrite", "tune"]  # round 2 by the rules: search alone
    lines = "\n".join(cost_lines(result["report"]["costs"]["models"]))
    assert "not sent, the run's token budget being spent" in lines and "100 tokens in, 60 out" in lines


def test_the_report_says_where_the_tokens_went_round_by_round_and_node_by_node(tmp_path):
    from langchain_core.messages import AIMessage

    def used(text, tokens_in, tokens_out):
        return AIMessage(content=text, usage_metadata={"input_tokens": tokens_in, "output_tokens": tokens_out,
                                                       "total_tokens": tokens_in + tokens_out})

    model = ScriptedChatModel(answers=["ready", used(decision("rewrite"), 100, 10), used(code_answer("us=1.0"), 300, 200),
                                       used(decision("stop"), 120, 12)])
    result = run(tmp_path, model, rounds=2)
    groups = {(g["round"], g["node"]): g for g in result["report"]["costs"]["by_round"]}
    assert (groups[1, "planner"]["input_tokens"], groups[1, "generator"]["output_tokens"]) == (100, 200)
    assert groups[2, "planner"]["input_tokens"] == 120 and groups[0, "preflight"]["requests"] == 1
    text = (tmp_path / "out" / "report.md").read_text() if (tmp_path / "out" / "report.md").exists() else None
    from astra_kernels.nodes.reporter import render
    text = text or render(result["report"])
    assert "- round 1: planner 1 requests (100 in, 10 out" in text and "generator 1 requests (300 in, 200 out" in text
    assert "(a replay: as recorded)" not in text  # a GPU's run (here a fake one), not a replay


def test_only_a_replay_s_report_says_its_gpu_seconds_are_as_recorded():
    from astra_kernels.nodes.reporter import costs

    assert costs({"calls": [], "gpu": {"device": {"name": "NVIDIA H200", "replay": "recorded"}}})["replayed"]
    assert not costs({"calls": [], "gpu": {"device": {"name": "NVIDIA H200"}}})["replayed"]


def test_the_planner_s_lessons_reach_every_later_prompt_as_the_run_s_memory(tmp_path):
    """A plan's `lessons` (what the results taught) are kept round by round and shown to the coder
    asked in that round and to the planner in the next, beside the history of candidates."""
    import json as _json

    from astra_kernels.nodes.state import Decision

    plan = _json.dumps({"action": "rewrite", "rationale": "measured facts", "optimizations": ["more CTAs per row"],
                        "lessons": ["Vectors wider than 16 bytes do not compile here.", "", "x" * 400]})
    model = ScriptedChatModel(answers=["ready", plan, code_answer("us=2.0"), decision("stop")])
    run(tmp_path, model, rounds=2)
    draft, second_plan = model.seen[2][1].content, model.seen[3][-1].content
    for text in (draft, second_plan):
        assert "round 1: Vectors wider than 16 bytes do not compile here." in text
        assert "x" * 301 not in text  # each lesson kept short
    assert "none yet" in model.seen[1][-1].content  # the first plan had nothing to remember
    assert Decision(action="stop", rationale="r", lessons="one").lessons == ["one"]
    assert len(Decision(action="stop", rationale="r", lessons=["a", "b", "c", "d"]).lessons) == 3
