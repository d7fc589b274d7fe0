"""The real langchain-openai client against a local OpenAI-compatible stub server on 127.0.0.1:
structured output, a timeout, a 429 then success, a malformed answer then repair, and an
endpoint that is down (a clear error before any GPU work)."""

from __future__ import annotations

import json
import time

import pytest
from support.reliability_stub import FaultyEndpoint, Reply

from astra_kernels.nodes.shared.presets import CHAT
from astra_kernels.graph import RunContext, build_graph
from astra_kernels.nodes.state import Decision
from astra_kernels.nodes.shared.chat import (
    Asker, ModelConfigError, ModelTimedOut, ask_structured, make_chat_model, preflight,
)

PLAN = {"action": "templatize", "rationale": "64% of copy bandwidth at 16 tokens", "optimizations": ["CTAs per row"]}


@pytest.fixture
def stub(request):
    """The reliability suite's endpoint (tests/support/reliability_stub.py), answering from the test's script."""
    with FaultyEndpoint(request.param) as server:
        yield server


def model_for(stub, **kw):
    return make_chat_model(RunContext(model="openai:stub-model", base_url=stub.url, **kw), "planner")


def asker_for(stub, retries=4, **kw):
    return Asker(model_for(stub, **kw), "planner", retries=retries, backoff_s=0.05)


@pytest.mark.parametrize("stub", [[json.dumps(PLAN)]], indirect=True)
def test_structured_output_through_the_real_client(stub):
    decision = ask_structured(asker_for(stub), "plan", "facts", Decision)
    assert decision == Decision(**PLAN)
    sent = stub.requests[0]
    assert sent["model"] == "stub-model" and '"action"' in sent["messages"][0]["content"]  # the schema
    assert sent["response_format"]["type"] == "json_schema"  # and the provider's structured output
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["action"]["enum"][0] == "rewrite"
    assert (sent.get("max_completion_tokens") or sent.get("max_tokens")) == CHAT.planner_max_tokens  # the preset's cap


@pytest.mark.parametrize("stub", [[Reply("slow down", status=429), json.dumps(PLAN)]], indirect=True)
def test_a_429_is_retried_with_backoff_then_succeeds(stub):
    asker = asker_for(stub, retries=2)
    decision = ask_structured(asker, "plan", "facts", Decision)
    assert decision.action == "templatize" and len(stub.requests) == 2
    assert [c["outcome"] for c in asker.calls] == ["failed", "answered"]


@pytest.mark.parametrize("stub", [["I think you should tune it.", json.dumps(PLAN)]], indirect=True)
def test_a_malformed_answer_gets_one_repair_request(stub):
    decision = ask_structured(asker_for(stub), "plan", "facts", Decision)
    assert decision.action == "templatize" and len(stub.requests) == 2
    repair = stub.requests[1]["messages"]
    assert repair[-2]["content"] == "I think you should tune it." and "could not be used" in repair[-1]["content"]


@pytest.mark.parametrize("stub", [[Reply("late", delay=3.0)]], indirect=True)
def test_a_timeout_is_a_clear_error(stub):
    started = time.perf_counter()
    with pytest.raises(ModelConfigError, match="did not answer.*Timeout"):
        preflight(model_for(stub, timeout_s=0.5, max_retries=0),
                  RunContext(model="openai:stub-model", base_url=stub.url))
    assert time.perf_counter() - started < 2.5


@pytest.mark.parametrize(("stub", "second_in_time"), [
    ([Reply("late", delay=3.0), json.dumps(PLAN)], True),
    ([Reply("late", delay=3.0), Reply("later", delay=3.0), json.dumps(PLAN)], False)], indirect=["stub"])
def test_a_request_that_times_out_is_asked_once_more_then_is_a_failed_answer(stub, second_in_time):
    """Once more, not as the openai client would (its retries): the server may still be generating
    each abandoned request (seen: a 270M model writing 7,652 tokens for 354 s while four copies of
    the request queued behind it), so a second timeout is a failed answer."""
    asker = asker_for(stub, retries=4, timeout_s=0.5)
    if second_in_time:
        assert asker.invoke([]).content == json.dumps(PLAN)
        assert len(stub.requests) == 2 and [c["outcome"] for c in asker.calls] == ["timed_out", "answered"]
        return
    with pytest.raises(ModelTimedOut):
        asker.invoke([])
    assert len(stub.requests) == 2 and [c["outcome"] for c in asker.calls] == ["timed_out", "timed_out"]


# llama-cpp-python 0.3.36's server refuses OpenAI's json_schema type with a 500 naming the field
REFUSED = "response_format.type: Input should be 'text' or 'json_object'"


@pytest.mark.parametrize("stub", [[Reply("no such option", status=400), json.dumps(PLAN), json.dumps(PLAN)],
                                  [Reply(REFUSED, status=500), json.dumps(PLAN), json.dumps(PLAN)]], indirect=True)
def test_a_server_that_refuses_the_response_format_is_asked_without_it_once(stub):
    decision = ask_structured(asker_for(stub), "plan", "facts", Decision)
    assert decision.action == "templatize" and len(stub.requests) == 2  # refused once, not retried as a fault
    assert "response_format" in stub.requests[0] and "response_format" not in stub.requests[1]
    ask_structured(asker_for(stub), "plan", "facts", Decision)  # the next plan is asked without it at once
    assert len(stub.requests) == 3 and "response_format" not in stub.requests[2]


def test_an_endpoint_that_is_down_stops_the_graph_before_any_gpu_work(tmp_path):
    class NoGPU:
        device = {"name": "never", "arch": "sm_90"}

        def evaluate(self, request):
            raise AssertionError("no GPU work may start")

    down = RunContext(model="openai:stub-model", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2,
                      evaluator=NoGPU(), results=str(tmp_path / "r.sqlite"))
    with pytest.raises(ModelConfigError, match="127.0.0.1:9.*did not answer"):
        build_graph().compile().invoke({"kernel": "silu_and_mul"}, context=down)
