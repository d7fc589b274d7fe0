"""The chat model: built from the run context, checked before any GPU work, asked for JSON or code.

Any LangChain chat model works. `openai:NAME` (the default family) is built with
langchain-openai, which also reaches OpenAI-compatible servers through `base_url`; its client
retries 429 and 5xx answers and timeouts with exponential backoff (`max_retries`), under an
explicit per-request `timeout_s`. Other providers go through `langchain.chat_models.init_chat_model`
when the `langchain` package is installed.

Answers are parsed here rather than through provider-specific structured-output modes, so the
same code serves OpenAI, a local vLLM and a scripted test model: the prompt carries the JSON
schema, the answer is validated with pydantic, and a malformed answer gets exactly one repair
request quoting the error before it counts as a failed candidate. Model output is only ever
parsed or compiled, never run by a shell or `eval`.

A request that fails for good (an outage, a rate limit or timeout that outlasted the client's
retries, a body that is not a chat completion) mid-run is `ModelUnavailable`: the nodes record it
and go on (the rules plan, the attempt counts as failed), so the measurements so far are kept.
Error texts may quote what a server sent back, and some servers echo the request's headers, so
every message made from one has the configured keys and credentials cut out (`redact`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, SecretStr, ValidationError

from astra_kernels.redaction import redact
from astra_kernels.tools.errors import AstraError

PROMPTS = Path(__file__).parents[1] / "prompts"
# The providers `init_chat_model` knows (its documentation's list), each with the integration
# package it needs: checked here so a typo is named as one, not as a missing package.
PROVIDERS = {
    "openai": "langchain-openai", "azure_openai": "langchain-openai", "anthropic": "langchain-anthropic",
    "google_vertexai": "langchain-google-vertexai", "google_genai": "langchain-google-genai",
    "bedrock": "langchain-aws", "bedrock_converse": "langchain-aws", "cohere": "langchain-cohere",
    "fireworks": "langchain-fireworks", "together": "langchain-together", "mistralai": "langchain-mistralai",
    "huggingface": "langchain-huggingface", "groq": "langchain-groq", "ollama": "langchain-ollama",
    "google_anthropic_vertex": "langchain-google-vertexai", "deepseek": "langchain-deepseek",
    "ibm": "langchain-ibm", "nvidia": "langchain-nvidia-ai-endpoints", "xai": "langchain-xai",
    "perplexity": "langchain-perplexity",
}
Schema = TypeVar("Schema", bound=BaseModel)


class ModelConfigError(AstraError):
    """The chat model cannot be built or reached; raised before any GPU work."""


class MalformedAnswer(AstraError):
    """The model's answer stayed unusable after one repair request."""


class ModelUnavailable(AstraError):
    """A request to the model failed after the client's own retries; the run goes on without it."""


def _endpoint(context) -> str:
    """Where the model is, fit to print: a base URL without its credentials or query string."""
    if not context.base_url:
        return f"the {context.model or 'configured'} endpoint"
    return redact(context.base_url.split("?", 1)[0])


def prompt(name: str, **values: str) -> str:
    """A prompt file from nodes/prompts/ with its {placeholders} filled (by replacement, not
    str.format: kernels and the template format are full of braces)."""
    text = (PROMPTS / f"{name}.md").read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def make_chat_model(context) -> BaseChatModel | None:
    """The context's model object, or one built from `model` and `base_url`; None for no model."""
    if context.chat_model is not None:
        return context.chat_model
    if not context.model:
        return None
    provider, _, name = context.model.partition(":")
    if not name:
        raise ModelConfigError(f"model {context.model!r} is not provider:name (for example openai:o4-mini)")
    if provider == "openai":
        from langchain_openai import ChatOpenAI

        kwargs = {"model": name, "timeout": context.timeout_s, "max_retries": context.max_retries}
        if context.base_url:
            kwargs["base_url"] = context.base_url
            kwargs.setdefault("api_key", os.environ.get("OPENAI_API_KEY") or "not-needed")
        if context.temperature is not None:
            kwargs["temperature"] = context.temperature
        if context.reasoning_effort:
            kwargs["reasoning_effort"] = context.reasoning_effort
        try:
            return ChatOpenAI(**kwargs)
        except Exception as exc:  # a missing key, an invalid option: the user must fix the configuration
            raise ModelConfigError(f"cannot build {context.model}: {exc}") from exc
    if provider not in PROVIDERS:
        raise ModelConfigError(f"unknown model provider {provider!r} in {context.model!r}; known: "
                               f"{', '.join(sorted(PROVIDERS))} (each as provider:name)")
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ModelConfigError(
            f"provider {provider!r} needs `pip install langchain {PROVIDERS[provider]}`; openai:NAME works "
            "with what is installed") from None
    return init_chat_model(context.model, base_url=context.base_url, timeout=context.timeout_s,
                           max_retries=context.max_retries)


def preflight(model: BaseChatModel, context) -> None:
    """One tiny request, so an unreachable endpoint is a clear error before any GPU work."""
    try:
        model.invoke([HumanMessage("Reply with the single word: ready")])
    except Exception as exc:
        raise ModelConfigError(redact(f"the chat model at {_endpoint(context)} did not answer: "
                                      f"{type(exc).__name__}: {exc}", *_keys(model))) from exc


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, list):  # providers that return content blocks
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


_FENCE = re.compile(r"```(?:[a-zA-Z+]*)\n(.*?)```", re.DOTALL)


def _json_object(text: str) -> dict:
    for block in _FENCE.findall(text) or [text]:
        start, end = block.find("{"), block.rfind("}")
        if start != -1 and end > start:
            return json.loads(block[start:end + 1])
    raise ValueError("no JSON object in the answer")


def ask_structured(model: BaseChatModel, system: str, user: str, schema: type[Schema]) -> Schema:
    """An instance of `schema` from the model's answer, with one repair request."""
    instructions = (f"{system}\n\nAnswer with one JSON object that matches this JSON schema, and "
                    f"nothing else:\n{json.dumps(schema.model_json_schema())}")
    messages: list[BaseMessage] = [SystemMessage(instructions), HumanMessage(user)]
    return _with_repair(model, messages, lambda text: schema.model_validate(_json_object(text)),
                        "Answer again with only the JSON object, matching the schema")


def ask_code(model: BaseChatModel, system: str, user: str) -> tuple[str, str]:
    """(the code of the answer's ```cuda block, the text around it), with one repair request."""
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)]

    def parse(text: str) -> tuple[str, str]:
        blocks = [b for b in re.findall(r"```(?:cuda|cpp|c\+\+|c)?\n(.*?)```", text, re.DOTALL) if b.strip()]
        if not blocks:
            raise ValueError("no ```cuda code block in the answer")
        code = max(blocks, key=len)
        return code, _FENCE.sub("", text).strip()

    return _with_repair(model, messages, parse, "Answer again with the whole kernel in one ```cuda block")


def _keys(model: BaseChatModel) -> list[str]:
    """The secrets a model object holds (a key passed to it rather than through the environment)."""
    return [v.get_secret_value() for v in vars(model).values() if isinstance(v, SecretStr)]


def _invoke(model: BaseChatModel, messages: list[BaseMessage]) -> BaseMessage:
    """The model's answer, or ModelUnavailable saying why there is none. Any exception counts:
    providers raise their own types, and a non-chat body surfaces as ValueError or TypeError."""
    try:
        return model.invoke(messages)
    except Exception as exc:
        text = redact(f"the chat model did not answer: {type(exc).__name__}: {exc}", *_keys(model))
        raise ModelUnavailable(text[:600]) from exc


def _why(error: Exception, answer: BaseMessage) -> str:
    """The parser's complaint, and that the answer was cut off when the model hit its output limit
    (the usual cause of a code block that never closes)."""
    why = str(error)[:600]
    if (answer.response_metadata or {}).get("finish_reason") == "length":
        why += " (the answer was cut off at the model's output limit: finish_reason length)"
    return why


def _with_repair(model, messages, parse, ask_again: str):
    answer = _invoke(model, messages)
    try:
        return parse(_text(answer))
    except (ValueError, ValidationError, json.JSONDecodeError) as first:
        repair = messages + [AIMessage(_text(answer)),
                             HumanMessage(f"That answer could not be used: {_why(first, answer)}. {ask_again}.")]
        second = _invoke(model, repair)
        try:
            return parse(_text(second))
        except (ValueError, ValidationError, json.JSONDecodeError) as exc:
            raise MalformedAnswer(f"the answer was unusable twice: {_why(exc, second)[:400]}") from exc
