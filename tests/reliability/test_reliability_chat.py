"""Chat-model faults in the middle of an agent run, through the real langchain-openai client and a
local endpoint that misbehaves on cue: garbage, answers that are not JSON, bodies that are not
chat completions, code cut off at the output limit, 429 and 5xx past the client's retries,
timeouts, a dropped connection, an endpoint that goes down.

Every case asserts three things: the run goes on to its report, the fault is recorded with its
reason (in the events, the history and report.md), and nothing measured before it is lost (the
best candidate, every results-store row, the checkpoints)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from support.agent_fakes import FakeGPU, code_answer, decision, kernel
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels.nodes.state import Candidate
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.errors import CompileError
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore
from support.reliability_stub import FaultyEndpoint, Reply

SHAPES = [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]
INPUT = {"kernel": "silu_and_mul", "shapes": SHAPES}

# name: (the replies one model request gets, max_retries, timeout_s, what the recorded reason says)
FAULTS = {
    "garbage": ([Reply("\x00\x07\ufffd\ufffd%$#@!" * 40)] * 2, 1, 10, "unusable twice"),
    "prose, not JSON": ([Reply("Sure! I think we should tune the kernel next.")] * 2, 1, 10, "unusable twice"),
    "JSON of the wrong shape": ([Reply('{"action": "explode", "why": 3}')] * 2, 1, 10, "unusable twice"),
    "an HTML body": ([Reply(body=b"<html><h1>502 Bad Gateway</h1></html>")], 1, 10, "Unexpected response type"),
    "a cut-off body": ([Reply(body=b'{"id": "x", "choices": [{"index": 0, "mess')], 1, 10, "did not answer"),
    "429 past the retries": ([Reply(status=429, content="rate limited")] * 2, 1, 10, "RateLimitError"),
    "500 past the retries": ([Reply(status=500, content="internal error")] * 2, 1, 10, "Error code: 500"),
    "503 past the retries": ([Reply(status=503, content="overloaded")] * 2, 1, 10, "Error code: 503"),
    "a timeout": ([Reply("late", delay=2.0)], 0, 0.5, "Timeout"),
    "a dropped connection": ([Reply(drop=True)] * 2, 1, 10, "ConnectionError: Connection error"),
    "the endpoint going down": ([Reply(down=True)], 0, 10, "ConnectionError: Connection error"),
}


def _context(tmp_path, endpoint, gpu, max_retries, timeout_s, **kw) -> RunContext:
    return RunContext(model="openai:stub", base_url=endpoint.url, max_retries=max_retries, timeout_s=timeout_s,
                      evaluator=gpu, results=str(tmp_path / "results.sqlite"), out=str(tmp_path / "out"),
                      tune_sample=12, tune_seconds=20, **kw)


def _run(tmp_path, ctx):
    saver = SqliteSaver(sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False))
    app = build_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "fault"}, "recursion_limit": recursion_limit(ctx)}
    result = app.invoke(INPUT, config=config, context=ctx, durability="sync")
    return result, app, config


def _nothing_lost(tmp_path, result, app, config, gpu) -> None:
    """Every measurement made is a results-store row, and the checkpoint holds the finished run."""
    with ResultsStore(tmp_path / "results.sqlite") as store:
        assert store.count() == gpu.calls > 0
    assert app.get_state(config).values["best"] == result["best"]
    assert app.get_state(config).next == ()  # the run reached its end, not a crash


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_planner_request_that_fails_mid_run_leaves_the_plan_to_the_rules(tmp_path, fault):
    """Round 1: the model plans a tune, the tuner measures, the profiler accepts. Round 2's plan
    request meets the fault: the rules decide (the template is tuned, so stop) and the tuned
    candidate measured before the fault is still the best."""
    replies, retries, timeout, reason = FAULTS[fault]
    script = ["ready", decision("tune"), *replies]
    gpu = FakeGPU()
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, retries, timeout))
        assert len(endpoint.requests) == len(script)  # no request beyond the script: no hidden extra step
    best = Candidate.model_validate(result["best"])
    assert best.origin == "tune" and best.verdict == "accepted" and result["report"]["geomean_speedup"] > 1
    planned = [e for e in result["report"]["events"] if e.startswith("planner: round 2")]
    assert planned and "no usable plan from the model" in planned[0] and reason in planned[0], planned
    assert "by the rules: the template's space has been searched" in planned[0]
    assert reason in (tmp_path / "out" / "report.md").read_text()
    _nothing_lost(tmp_path, result, app, config, gpu)


# (an endpoint that went down cannot answer the retry: test_the_endpoint_going_down_for_good... covers it)
@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "the endpoint going down"])
def test_a_generator_request_that_fails_counts_as_a_failed_attempt_and_the_retry_goes_on(tmp_path, fault):
    replies, retries, timeout, reason = FAULTS[fault]
    script = ["ready", decision("rewrite"), *replies, code_answer("us=1.5"), decision("stop")]
    gpu = FakeGPU()
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, retries, timeout, fixes=1))
        assert len(endpoint.requests) == len(script)
    assert [c["verdict"] for c in result["history"]] == ["invalid", "accepted"]
    assert reason in result["history"][0]["message"]
    retry = endpoint.requests[len(script) - 2]["messages"]
    if reason == "unusable twice":  # the model answered: it is told what went wrong, after its answers
        assert reason in retry[-1]["content"] and retry[-2]["role"] == "assistant"
    else:  # no answer came: the same question is asked again (two user turns in a row break chat templates)
        assert retry == endpoint.requests[2]["messages"]
    assert Candidate.model_validate(result["best"]).id == 2
    _nothing_lost(tmp_path, result, app, config, gpu)


def test_the_endpoint_going_down_for_good_ends_the_run_with_its_report(tmp_path):
    """Down after round 1's plan: both of the generator's attempts and every later plan find the
    port closed; the rules take over (tune the template, then stop), so the run still ends with a
    measured result and its report."""
    gpu = FakeGPU()
    with FaultyEndpoint(["ready", decision("rewrite"), Reply(down=True)]) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 5, fixes=1))
    assert [c["verdict"] for c in result["history"]] == ["invalid", "invalid", "accepted"]
    assert all("ConnectionError: Connection error" in c["message"] for c in result["history"][:2])
    planned = [e for e in result["report"]["events"] if e.startswith("planner: round")]
    assert all("ConnectionError: Connection error" in e for e in planned[1:]) and len(planned) == 3
    assert Candidate.model_validate(result["best"]).origin == "tune" and "stop" in planned[-1]
    _nothing_lost(tmp_path, result, app, config, gpu)


class CompilingGPU(FakeGPU):
    """The fake GPU behind a real NVRTC compile: code that does not compile is a compile error
    with the compiler's log, as the evaluation worker reports it."""

    def evaluate(self, request) -> EvaluationResult:
        try:
            compile_source(request.source, request.options)
        except CompileError as exc:
            self.calls += 1
            return EvaluationResult(status="compile_error", message=str(exc), label=request.label,
                                    device=self.device["name"], arch="sm_90")
        return super().evaluate(request)


def test_code_cut_off_at_the_output_limit_is_reported_as_such_and_retried(tmp_path):
    cut = kernel("us=1.5")[: len(kernel("us=1.5")) // 2]
    unclosed = Reply(f"Here it is.\n```cuda\n{cut}", finish_reason="length")
    gpu = FakeGPU()
    script = ["ready", decision("rewrite"), unclosed, unclosed, unclosed, code_answer("us=1.5"), decision("stop")]
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 10, fixes=1))
    first = result["history"][0]
    assert first["verdict"] == "invalid" and "cut off at the model's output limit" in first["message"]
    asked, again = endpoint.requests[2], endpoint.requests[3]  # the same question, with twice the cap
    assert again["messages"] == asked["messages"]
    assert again["max_completion_tokens"] == 2 * asked["max_completion_tokens"]
    assert again["max_tokens"] == 2 * asked["max_tokens"]  # extra_body: what compatible servers read
    repair = endpoint.requests[4]["messages"][-1]["content"]
    assert "cut off at the model's output limit" in repair  # the repair request says why
    assert [c["verdict"] for c in result["history"]] == ["invalid", "accepted"]
    _nothing_lost(tmp_path, result, app, config, gpu)


def test_code_cut_off_inside_a_closed_block_is_a_compile_error_fed_back_with_the_line(tmp_path):
    """The fence closed but the kernel stops halfway: it parses as a template, NVRTC rejects it,
    and its log goes back to the model, whose next answer is measured."""
    source = kernel("us=1.5")
    cut = source[: source.index("typedef Vec")]  # inside the kernel's body: an unterminated function
    gpu = CompilingGPU()
    script = ["ready", decision("rewrite"), f"Faster.\n```cuda\n{cut}```", code_answer("us=1.5"), decision("stop")]
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 10, fixes=1))
    failed = result["history"][0]
    assert failed["verdict"] == "compile_error" and 'expected a "}"' in failed["message"]
    assert 'expected a "}"' in endpoint.requests[3]["messages"][-1]["content"]
    assert [c["verdict"] for c in result["history"]] == ["compile_error", "accepted"]
    _nothing_lost(tmp_path, result, app, config, gpu)


def test_a_server_that_echoes_the_key_in_its_error_has_it_cut_from_the_record(tmp_path, monkeypatch):
    key = "sk-planted-echo-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    gpu = FakeGPU()
    script = ["ready", decision("tune"), Reply(status=500, content="boom", echo_auth=True)]
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 10))
    assert endpoint.headers[-1]["authorization"] == f"Bearer {key}"  # the server did get (and echo) it
    planned = next(e for e in result["report"]["events"] if e.startswith("planner: round 2"))
    assert "Error code: 500" in planned and "[redacted]" in planned and key not in planned
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_an_endpoint_down_from_the_start_stops_astra_optimize_before_any_measurement(tmp_path):
    """The CLI over the shipped recording: exit 1 with the reason, no report, the results store
    the untouched copy of the recording."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "astra_kernels.cli", "optimize", "rmsnorm", "--replay", "recorded",
                           "--model", "openai:stub", "--base-url", "http://127.0.0.1:9/v1", "--timeout", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the chat model at http://127.0.0.1:9/v1 did not answer" in proc.stdout.replace("\n", " ")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (out / "report.json").exists()
    assert time.monotonic() - started < 60
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("SELECT count(*) FROM results WHERE run_id = 'agent'").fetchone()[0] == 0


def test_a_transient_429_is_absorbed_by_the_client_retry_and_leaves_no_trace(tmp_path):
    """Transient faults never reach the state: the client's retry answers them (two requests)."""
    gpu = FakeGPU()
    script = ["ready", Reply(status=429, content="slow down"), decision("tune"), decision("stop")]
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 2, 10))
        assert len(endpoint.requests) == 4
    assert not any("no usable plan" in e for e in result["report"]["events"])
    assert json.dumps(result["report"]).count("RateLimitError") == 0
    assert Candidate.model_validate(result["best"]).origin == "tune"


def test_a_model_template_that_takes_the_compiler_forever_is_cut_off_and_the_run_goes_on(tmp_path, monkeypatch):
    """The templater compiles the model's template before accepting it, in a child process under
    a deadline: code that keeps NVRTC busy for minutes is a compile error naming the deadline."""
    from astra_kernels import suite
    from astra_kernels.nodes import templater
    from support.faulty import endless_source

    from astra_kernels.nodes import tuner

    # The templater's check compile and the tuner's space pruning both stop at the worker's
    # compile deadline, each as imported by its node.
    monkeypatch.setattr(templater, "COMPILE_TIMEOUT_S", 3.0)
    monkeypatch.setattr(tuner, "COMPILE_TIMEOUT_S", 3.0)
    slow = (suite.SUITE_DIR / "silu_and_mul" / "template.cu").read_text() + endless_source()
    gpu = FakeGPU()
    script = ["ready", decision("templatize"), f"A template.\n```cuda\n{slow}```", decision("stop")]
    started = time.monotonic()
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 10, fixes=0))
    assert time.monotonic() - started < 60
    failed = result["history"][0]
    assert failed["verdict"] == "compile_error" and "did not finish within 3 s" in failed["message"], failed["message"]
    assert result["report"]["stop_reason"] and Candidate.model_validate(result["best"]).origin == "baseline"
    _nothing_lost(tmp_path, result, app, config, gpu)


def test_a_model_template_that_compiles_for_ever_at_some_values_is_pruned_there_and_tuned_elsewhere(
        tmp_path, monkeypatch):
    """The default configuration (VEC=8) compiles, so the templater accepts the template; VEC=4
    never finishes: the tuner's space pruning cuts those configurations at the deadline, and the
    search runs over the rest."""
    from astra_kernels import suite
    from astra_kernels.nodes import templater
    from astra_kernels.tools.search import space
    from support.faulty import endless_source

    from astra_kernels.nodes import tuner

    # The templater's check compile and the tuner's space pruning both stop at the worker's
    # compile deadline, each as imported by its node.
    monkeypatch.setattr(templater, "COMPILE_TIMEOUT_S", 3.0)
    monkeypatch.setattr(tuner, "COMPILE_TIMEOUT_S", 3.0)
    cut_off = []

    def spy(*args, **kw):
        outcomes = compile_many(*args, **kw)
        cut_off.extend(o for o in outcomes if o.error_type == "CompileTimeoutError")
        return outcomes

    compile_many = space.compile_many
    monkeypatch.setattr(space, "compile_many", spy)
    slow = ((suite.SUITE_DIR / "silu_and_mul" / "template.cu").read_text()
            + "\n#if VEC == 4\n" + endless_source(2048) + "\n#endif\n")
    gpu = FakeGPU()
    script = ["ready", decision("templatize"), f"A template.\n```cuda\n{slow}```", decision("stop")]
    started = time.monotonic()
    with FaultyEndpoint(script) as endpoint:
        result, app, config = _run(tmp_path, _context(tmp_path, endpoint, gpu, 0, 10, fixes=0))
    assert time.monotonic() - started < 240
    assert cut_off and all("did not finish within 3 s" in o.error for o in cut_off)
    tuned = Candidate.model_validate(result["best"])
    assert [c["verdict"] for c in result["history"]] == ["accepted"] and tuned.origin == "tune"
    assert all(c["VEC"] != 4 for c in tuned.configs.values())
    _nothing_lost(tmp_path, result, app, config, gpu)
