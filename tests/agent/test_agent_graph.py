"""The agent graph walked on a CPU through every edge, with a scripted chat model and a scripted
GPU: offline tuning, compile-error retry, test failure, backtrack, budget stop, unusable answers,
interrupt and resume, and a crash resumed from the SQLite checkpoint."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from support.agent_fakes import BASELINE, FakeGPU, ScriptedChatModel, code_answer, decision
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels.nodes.state import Candidate
from astra_kernels.suite import UnknownKernelError
from astra_kernels.tools.errors import NoGpuError
from astra_kernels.tools.toolchain.driver import gpu_available

SHAPES = [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]
ODD_CHECKS = 4 * 9  # a silu_and_mul candidate's checks away from the run: 4 odd shapes, 3 dtypes x 3 variants
INPUT = {"kernel": "silu_and_mul", "shapes": SHAPES}


def context(tmp_path, model=None, gpu=None, **kw) -> RunContext:
    return RunContext(chat_model=model, evaluator=gpu or FakeGPU(), results=str(tmp_path / "results.sqlite"),
                      tune_sample=12, tune_seconds=20, **kw)


def run(ctx, checkpointer=None, thread="t", payload=INPUT):
    app = build_graph().compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": recursion_limit(ctx)}
    return app.invoke(payload, config=config, context=ctx)


def verdicts(result) -> list[str]:
    return [c["verdict"] for c in result["history"]]


def test_offline_the_rules_tune_the_shipped_template_then_stop(tmp_path):
    result = run(context(tmp_path))
    assert verdicts(result) == ["accepted"]
    best = Candidate.model_validate(result["best"])
    assert best.origin == "tune" and set(best.configs) == {"16x4096", "64x8192"}
    assert result["report"]["geomean_speedup"] > 1.0
    assert "no chat model is configured" in result["stop_reason"]
    assert [e.split(":")[0] for e in result["report"]["events"]][:2] == ["load", "planner"]


def test_a_compile_error_goes_back_to_the_generator_with_the_log(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("compile_error"),
                                       code_answer("us=1.5"), decision("stop")])
    result = run(context(tmp_path, model))
    assert verdicts(result) == ["compile_error", "accepted"]
    assert Candidate.model_validate(result["best"]).id == 2
    repair = model.seen[3]  # the repair is asked in the conversation that made the failed draft
    assert [m.type for m in repair] == ["system", "human", "ai", "human"]
    assert repair[1].content == model.seen[2][1].content  # what was asked
    assert 'FAKE_MARKER "compile_error"' in repair[2].content  # the failed code, as the model wrote it
    assert 'identifier "vv" is undefined' in repair[3].content and "did not compile" in repair[3].content
    assert result["report"]["geomean_speedup"] == pytest.approx(2.0)


def test_a_failed_test_returns_the_shape_and_differences_then_the_fixes_run_out(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite")] + [code_answer(f"wrong-{i}") for i in range(3)]
                              + [decision("stop")])
    result = run(context(tmp_path, model, fixes=2))
    assert verdicts(result) == ["incorrect"] * 3  # the first attempt and two fixes, then the planner
    retry = model.seen[3][-1].content
    assert "at shape 16x4096" in retry and "worst at (3, 5)" in retry and "results are wrong" in retry
    assert len(model.seen[4]) == 6  # the second repair: the whole conversation, both failed drafts in it
    assert Candidate.model_validate(result["best"]).origin == "baseline"


def test_a_correct_but_slower_candidate_backtracks_to_the_best(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=5.0"), decision("stop")])
    result = run(context(tmp_path, model))
    assert verdicts(result) == ["slower"]
    assert Candidate.model_validate(result["best"]).origin == "baseline"
    assert any("faster at no shape (16x4096 +67%, 64x8192 +67%)" in e for e in result["report"]["events"])


def test_the_round_budget_ends_in_the_reporter(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=5.0"), decision("rewrite"),
                                       code_answer("us=5.1")])
    result = run(context(tmp_path, model, rounds=2))
    assert verdicts(result) == ["slower", "slower"]
    assert result["stop_reason"] == "the budget of 2 planner rounds is spent"


def test_an_unusable_plan_gets_one_repair_then_the_rules_decide(tmp_path):
    model = ScriptedChatModel(answers=["ready", "I would tune it.", '{"action": "tune"', decision("stop")])
    result = run(context(tmp_path, model, rounds=2))
    assert "unusable" in result["report"]["events"][1] and "tune" in result["report"]["events"][1]
    assert verdicts(result) == ["accepted"]  # the rules chose to tune


def test_an_unusable_kernel_counts_as_a_failed_candidate(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), "no code", "still none", decision("stop")])
    result = run(context(tmp_path, model, fixes=0))
    assert verdicts(result) == ["invalid"] and "unusable twice" in result["history"][0]["message"]


def test_approval_interrupts_before_accepting_and_resumes_on_the_answer(tmp_path):
    model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=1.5"), decision("stop")])
    ctx = context(tmp_path, model, approve=True)
    app = build_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "approve"}}
    paused = app.invoke(INPUT, config=config, context=ctx)
    question = paused["__interrupt__"][0].value
    assert question["candidate"] == 1 and "accept candidate 1" in question["question"]
    result = app.invoke(Command(resume=False), config=config, context=ctx)
    assert verdicts(result) == ["rejected"] and Candidate.model_validate(result["best"]).origin == "baseline"


def test_a_crashed_run_resumes_from_its_checkpoint_and_measures_nothing_twice(tmp_path):
    path = tmp_path / "checkpoints.sqlite"
    answers = ["ready", decision("rewrite"), code_answer("us=1.5"), decision("stop")]
    first_gpu = FakeGPU(crash_after=3)  # 2 baseline shapes, then 1 of the candidate's tests
    with pytest.raises(RuntimeError, match="killed"):
        run(context(tmp_path, ScriptedChatModel(answers=list(answers)), gpu=first_gpu),
            SqliteSaver(sqlite3.connect(path, check_same_thread=False)), thread="crash")
    second_gpu = FakeGPU()
    resumed = ScriptedChatModel(answers=list(answers[3:]))  # the planner and generator steps are not redone
    result = run(context(tmp_path, resumed, gpu=second_gpu),
                 SqliteSaver(sqlite3.connect(path, check_same_thread=False)), thread="crash", payload=None)
    assert verdicts(result) == ["accepted"]
    # the candidate's second shape (checked and timed in one evaluation) and the kernel's four odd
    # shapes in each of its 9 dtype and variant pairs (checked only: ODD_CHECKS); the baseline and
    # the candidate's first shape came from the store
    assert second_gpu.calls == 1 + ODD_CHECKS


KILLED_RUN = """
import sqlite3, sys
sys.path.insert(0, {tests!r})
from langgraph.checkpoint.sqlite import SqliteSaver
from support.agent_fakes import FakeGPU, ScriptedChatModel, code_answer, decision
from astra_kernels.graph import RunContext, build_graph
model = ScriptedChatModel(answers=["ready", decision("rewrite"), code_answer("us=1.5"), decision("stop")])
context = RunContext(chat_model=model, evaluator=FakeGPU(crash_after=3, kill=True), results={results!r})
app = build_graph().compile(checkpointer=SqliteSaver(sqlite3.connect({path!r}, check_same_thread=False)))
app.invoke({{"kernel": "silu_and_mul", "shapes": {shapes!r}}}, config={{"configurable": {{"thread_id": "k"}}}},
           context=context, durability="sync")
"""


def test_a_run_killed_with_sigkill_resumes_from_its_checkpoint(tmp_path):
    path, results = str(tmp_path / "checkpoints.sqlite"), str(tmp_path / "results.sqlite")
    script = KILLED_RUN.format(tests=str(Path(__file__).parents[1]), results=results, path=path, shapes=SHAPES)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    gpu = FakeGPU()
    ctx = RunContext(chat_model=ScriptedChatModel(answers=[decision("stop")]), evaluator=gpu, results=results)
    result = run(ctx, SqliteSaver(sqlite3.connect(path, check_same_thread=False)), thread="k", payload=None)
    assert verdicts(result) == ["accepted"] and gpu.calls == 1 + ODD_CHECKS


def test_an_evaluator_handed_over_unstarted_is_started_before_its_device_is_read(tmp_path):
    """As a notebook passes `EvaluationWorker()`: its device is unknown until it starts."""

    class Unstarted(FakeGPU):
        device = None

        def start(self):
            self.device = FakeGPU.device

    gpu = Unstarted()
    result = run(context(tmp_path, ScriptedChatModel(answers=[decision("stop")]), gpu=gpu))
    assert gpu.device == FakeGPU.device and verdicts(result) == ["accepted"]


def test_an_unknown_kernel_is_a_clear_error(tmp_path):
    with pytest.raises(UnknownKernelError, match="unknown kernel 'silu'"):
        run(context(tmp_path), payload={"kernel": "silu"})


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_without_a_gpu_or_an_evaluator_the_error_says_so(tmp_path):
    ctx = RunContext(results=str(tmp_path / "r.sqlite"))
    with pytest.raises(NoGpuError, match="needs an NVIDIA GPU"):
        run(ctx)


def test_the_tune_step_streams_its_compiles_as_progress_not_lines(tmp_path):
    """The tuner compiles the pruned space before it searches (minutes on a small machine): it
    streams progress events {done, total} at each twentieth, which `astra optimize` shows as a bar,
    and none of them goes into the run's recorded events."""
    ctx = context(tmp_path)
    app = build_graph().compile()
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit(ctx)}
    progress, final = [], None
    for mode, chunk in app.stream(INPUT, config=config, context=ctx, stream_mode=["custom", "values"]):
        if mode == "custom" and "progress" in chunk:
            progress.append(chunk)
        elif mode == "values":
            final = chunk
    for label in ("16x4096", "64x8192"):
        mine = [p["progress"] for p in progress if p["message"].startswith(label)]
        assert mine and mine[-1]["done"] == mine[-1]["total"] and len(mine) <= 21, mine
        assert all(p["node"] == "tuner" for p in progress)
    assert not any("compiling the space" in e for e in final["report"]["events"])


class _FakeH200(FakeGPU):
    device = {**FakeGPU.device, "name": "NVIDIA H200"}


def test_the_search_floor_measures_the_shipped_table_first_and_the_front_starts_from_it(tmp_path):
    """On a GPU with a shipped table, the run first checks and times that table's picks (the search
    alone, offline) as candidate 1; the profiler judges it against the baseline before any plan, so
    the front starts from search alone. `search_floor=False` starts from the baseline only."""
    from astra_kernels.jobs.benchmark import shipped_table_for
    from astra_kernels import suite

    result = run(context(tmp_path, gpu=_FakeH200(), rounds=1))
    floor = Candidate.model_validate(result["history"][0])
    table = shipped_table_for("silu_and_mul", "NVIDIA H200", "bf16", "default", "cold")
    spec = suite.load("silu_and_mul").spec
    assert floor.id == 1 and floor.origin == "tune" and "table shipped for NVIDIA H200" in floor.rationale
    assert floor.configs == {spec.label(s): table.pick(s, 132, "sm_90").config for s in SHAPES}
    assert floor.verdict == "accepted"  # the fake times every template configuration under the baseline's 3 us
    events = [e.split(":")[0] for e in result["report"]["events"]]
    assert events[:4] == ["load", "load", "profiler", "planner"], events
    assert all(result["front"][label]["candidate"] >= 1 for label in ("16x4096", "64x8192"))
    from astra_kernels.nodes.shared.attempts import history_text  # the model is told what candidate 1 is
    assert "- candidate 1 (tune): accepted; the table shipped for NVIDIA H200" in history_text(result)
    off = run(context(tmp_path / "off", gpu=_FakeH200(), rounds=1, search_floor=False))
    assert all(c["id"] != 1 or c["origin"] != "tune" or "shipped" not in c["rationale"] for c in off["history"])


class _H200LackingAShape(_FakeH200):
    """A recording without the floor's configuration at 64x8192."""

    def evaluate(self, request):
        result = super().evaluate(request)
        if "64x8192" in request.label and request.source != BASELINE and "VEC" in request.options.defines:
            return result.model_copy(update={"status": "unrecorded", "timing": None, "checks": []})
        return result


def test_a_floor_unmeasured_at_some_shapes_holds_the_shapes_it_measured(tmp_path):
    result = run(context(tmp_path, gpu=_H200LackingAShape(), rounds=1, search_floor=True))
    floor = Candidate.model_validate(result["history"][0])
    assert floor.id == 1 and floor.verdict == "accepted", floor
    assert result["front"]["16x4096"]["candidate"] == 1 and result["front"]["64x8192"]["candidate"] == 0
