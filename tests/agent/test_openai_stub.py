"""The scripted OpenAI-compatible endpoint the agent notebook falls back to: the real
langchain-openai client gets the script's answers in order over HTTP, and a script that has no
answer is an error the client reports, not a hang or a made-up reply."""

from __future__ import annotations

import openai
import pytest

from astra_kernels.graph import RunContext
from astra_kernels.nodes.shared.chat import make_chat_model
from astra_kernels.testing.openai_stub import OpenAIStub


def _model(stub: OpenAIStub):
    return make_chat_model(RunContext(model="openai:scripted", base_url=stub.url, max_retries=0, timeout_s=10))


def test_answers_in_order_through_the_real_client():
    with OpenAIStub(["first", "second"]) as stub:
        model = _model(stub)
        assert [model.invoke("a").content, model.invoke("b").content] == ["first", "second"]
    assert [r["messages"][-1]["content"] for r in stub.requests] == ["a", "b"]
    assert stub.requests[0]["model"] == "scripted"


def test_a_script_without_an_answer_is_an_error_the_client_reports():
    def script(messages):
        if messages[-1]["content"] == "known":
            return "yes"
        raise ValueError("no answer to this prompt")

    with OpenAIStub(script) as stub:
        model = _model(stub)
        assert model.invoke("known").content == "yes"
        with pytest.raises(openai.InternalServerError, match="stub script: ValueError: no answer to this prompt"):
            model.invoke("unknown")
    with OpenAIStub(["only"]) as stub:
        model = _model(stub)
        model.invoke("a")
        with pytest.raises(openai.InternalServerError, match="the script ran out after 1 answer\\(s\\)"):
            model.invoke("b")
