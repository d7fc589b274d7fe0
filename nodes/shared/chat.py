"""The chat model: built from the run context, checked before any GPU work, asked for JSON or code.

Any LangChain chat model works. `openai:NAME` (the default family) is built with
langchain-openai, which also reaches OpenAI-compatible servers through `base_url`. Each role
(planner, coder) may have its own model and settings, and every answer has an output-token cap.
`Asker` retries 429, 5xx and dropped connections with exponential backoff (`max_retries`); a
request that outlives `timeout_s` is asked once more (a reasoning model's long think, a server's
queue: issue 43), then is a failed answer (not a third time: the server may still be generating
the abandoned ones), and every request is recorded for the report's costs. Other providers go through `langchain.chat_models.init_chat_model`
when the `langchain` package is installed.

Plans are asked with the JSON schema in the prompt and, where the provider has one, as its
structured-output format; every answer is read by the lenient parsers of answers.py (real
models quote old code, think aloud, label fences as they like), validated with pydantic, and a
malformed answer gets exactly one repair request quoting the error before it counts as a failed
candidate. Model output is only ever parsed or compiled, never run by a shell or `eval`.

A request that fails for good (an outage, a rate limit or timeout that outlasted the client's
retries, a body that is not a chat completion) mid-run is `ModelUnavailable`: the nodes record it
and go on (the rules plan, the attempt counts as failed), so the measurements so far are kept.
Error texts may quote what a server sent back, and some servers echo the request's headers, so
every message made from one has the configured keys and credentials cut out (`redact`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, SecretStr, ValidationError

from astra_kernels.nodes.state import Message, ModelCall
from astra_kernels.redaction import redact
from astra_kernels.tools.errors import AstraError

from . import answers
from .presets import preset

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
    """The model's answer stayed unusable after one repair request; `conversation` holds both
    answers, so a later repair is asked after them (turns keep alternating)."""

    def __init__(self, message: str, conversation: list[BaseMessage] | None = None):
        super().__init__(message)
        self.conversation = conversation or []


class ModelUnavailable(AstraError):
    """A request to the model failed after the retries; the run goes on without it."""


class ModelTimedOut(ModelUnavailable):
    """A request outlived its timeout again after TIMEOUT_RETRIES more tries: a failed answer."""


class BudgetSpent(ModelUnavailable):
    """A budget of the run (its wall time, its tokens) is spent: the request was not sent, and no
    repair could be either."""


class TokenBudgetSpent(BudgetSpent):
    """The run's token budget is spent (RunContext.token_budget)."""


def tokens_used(calls: list[dict]) -> int:
    """The tokens the servers reported for `calls` (ModelCall records), in and out; unknown counts 0."""
    return sum((c.get("input_tokens") or 0) + (c.get("output_tokens") or 0) for c in calls)


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


def role_settings(context, role: str) -> dict:
    """The model and settings of one role ("planner" or "coder"): its own where set, else the run's,
    else the model's preset (nodes/shared/presets.py: a reasoning model's caps leave room to think)."""
    def own(name):
        return getattr(context, f"{role}_{name}", None)

    model = own("model") or context.model
    defaults = preset(model)
    return {"model": model,
            "temperature": own("temperature") if own("temperature") is not None else context.temperature,
            "reasoning_effort": own("reasoning_effort") or context.reasoning_effort or defaults.reasoning_effort,
            "max_tokens": own("max_tokens") or defaults.max_tokens(role),
            "preset": defaults.name}




def make_chat_model(context, role: str = "coder") -> BaseChatModel | None:
    """The role's model object (`planner_chat_model`, `coder_chat_model`, else `chat_model`), or
    one built from the role's settings; None for no model.

    Built models carry the role's output-token cap and no client-side retries: `Asker` retries
    429, 5xx and connection errors itself, and asks a timed-out request once more before it is a
    failed answer (the openai client's own retries would resend it at once, while the server still
    generates the first)."""
    given = getattr(context, f"{role}_chat_model", None) or context.chat_model
    if given is not None:
        return given
    settings = role_settings(context, role)
    spelled = settings["model"]
    if not spelled:
        return None
    provider, _, name = spelled.partition(":")
    if not name:
        raise ModelConfigError(f"model {spelled!r} is not provider:name (for example openai:o4-mini)")
    if provider == "openai":
        from langchain_openai import ChatOpenAI

        kwargs = {"model": name, "timeout": context.timeout_s, "max_retries": 0}
        if settings["max_tokens"]:
            kwargs["max_tokens"] = settings["max_tokens"]
        if context.base_url:
            kwargs["base_url"] = context.base_url
            if settings["max_tokens"]:  # the client sends max_completion_tokens, which some servers ignore
                kwargs["extra_body"] = {"max_tokens": settings["max_tokens"]}
            kwargs.setdefault("api_key", os.environ.get("OPENAI_API_KEY") or "not-needed")
        if settings["temperature"] is not None:
            kwargs["temperature"] = settings["temperature"]
        if settings["reasoning_effort"]:
            kwargs["reasoning_effort"] = settings["reasoning_effort"]
        try:
            return ChatOpenAI(**kwargs)
        except Exception as exc:  # a missing key, an invalid option: the user must fix the configuration
            raise ModelConfigError(f"cannot build {spelled}: {exc}") from exc
    if provider not in PROVIDERS:
        raise ModelConfigError(f"unknown model provider {provider!r} in {spelled!r}; known: "
                               f"{', '.join(sorted(PROVIDERS))} (each as provider:name)")
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ModelConfigError(
            f"provider {provider!r} needs `pip install langchain {PROVIDERS[provider]}`; openai:NAME works "
            "with what is installed") from None
    extra = {k: settings[k] for k in ("temperature", "reasoning_effort", "max_tokens") if settings[k] is not None}
    return init_chat_model(spelled, base_url=context.base_url, timeout=context.timeout_s, max_retries=0, **extra)


def preflight(model: BaseChatModel, context) -> None:
    """One tiny request, so an unreachable endpoint is a clear error before any GPU work. Its answer
    is capped at a few tokens: a base model asked for one word may write until its cap."""
    short = model
    if _openai_endpoint(model) is not None and context.base_url:  # OpenAI's reasoning models refuse max_tokens
        short = model.bind(max_tokens=8, extra_body={"max_tokens": 8})
    try:
        short.invoke([HumanMessage("Reply with the single word: ready")])
    except Exception as exc:
        raise ModelConfigError(redact(f"the chat model at {_endpoint(context)} did not answer: "
                                      f"{type(exc).__name__}: {exc}", *_keys(model))) from exc


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, list):  # providers that return content blocks
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def to_messages(conversation: list[Message]) -> list[BaseMessage]:
    """A stored conversation as LangChain messages."""
    kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    return [kinds[m.role](m.content) for m in conversation]


def from_messages(messages: list[BaseMessage]) -> list[Message]:
    """LangChain messages as a conversation the state can hold (plain JSON in checkpoints)."""
    roles = {"system": "system", "human": "user", "ai": "assistant"}
    return [Message(role=roles[m.type], content=_text(m)) for m in messages]


TIMEOUT_RETRIES = 1  # a request that timed out is asked again this many times, at once


class Asker:
    """Asks one role's model and accounts for every request: the run's costs per role come from
    these records, and a request that failed is recorded as failed, not forgotten."""

    def __init__(self, model: BaseChatModel, role: str, retries: int = 4, backoff_s: float = 1.0,
                 budget: int | None = None, spent: int = 0, node: str = "", round: int | None = None):
        """`budget`: the run's token budget (RunContext.token_budget), of which `spent` was used by
        the requests before this asker's (tokens_used of the state's calls); `node` and `round`:
        where in the run its requests are made, for the report's cost by round and node."""
        self.model, self.role, self.retries, self.backoff_s = model, role, retries, backoff_s
        self.budget, self.spent, self.node, self.round = budget, spent, node, round
        self.calls: list[dict] = []

    def invoke(self, messages: list[BaseMessage], **bind) -> BaseMessage:
        """The model's answer, or ModelUnavailable (ModelTimedOut for a timeout, TokenBudgetSpent
        for a request the budget stops) saying why there is none. Any exception counts: providers
        raise their own types, and a non-chat body surfaces as ValueError or TypeError."""
        runnable = self.model.bind(**bind) if bind else self.model
        timeouts = 0
        for attempt in range(self.retries + 1):
            used = self.spent + tokens_used(self.calls)
            if self.budget is not None and used >= self.budget:
                self.calls.append(ModelCall(role=self.role, seconds=0.0, outcome="not_sent", node=self.node,
                                            round=self.round).model_dump())
                raise TokenBudgetSpent(f"the run's token budget of {self.budget} is spent ({used} used); "
                                       "the request was not sent")
            started = time.monotonic()
            try:
                answer = runnable.invoke(messages)
            except Exception as exc:
                kind = _failure_kind(exc)
                self._record(started, "timed_out" if kind == "timeout" else "failed")
                what = type(exc).__name__
                if isinstance(exc, (AttributeError, TypeError)):  # an HTML page from a proxy, read as a completion
                    what = f"Unexpected response type (not a chat completion): {what}"
                text = redact(f"the chat model did not answer: {what}: {exc}", *_keys(self.model))[:600]
                if kind == "timeout":
                    timeouts += 1
                    if timeouts > TIMEOUT_RETRIES or attempt == self.retries:
                        raise ModelTimedOut(text) from exc
                    continue
                if kind != "transient" or attempt == self.retries:
                    raise ModelUnavailable(text) from exc
                time.sleep(min(self.backoff_s * 2 ** attempt, 30.0))
                continue
            usage = getattr(answer, "usage_metadata", None) or {}
            self._record(started, "answered", usage.get("input_tokens"), usage.get("output_tokens"),
                         truncated=_cut_off(answer))
            return answer
        raise AssertionError("unreachable")

    def _record(self, started: float, outcome: str, tokens_in=None, tokens_out=None, truncated: bool = False) -> None:
        self.calls.append(ModelCall(role=self.role, seconds=round(time.monotonic() - started, 3), outcome=outcome,
                                    input_tokens=tokens_in, output_tokens=tokens_out, truncated=truncated,
                                    node=self.node, round=self.round).model_dump())


def role_asker(context, role: str, state, node: str, model: BaseChatModel | None = None,
               round: int | None = None) -> Asker:
    """`node`'s Asker for `role` in this run: the role's model (or `model`), the run's retries, its
    token budget less what the run's requests so far used (the state's calls), and the planner
    round its requests belong to (`round`, else the state's: the plan that asked for them)."""
    return Asker(model or make_chat_model(context, role), role, retries=context.max_retries,
                 budget=context.token_budget, spent=tokens_used(state.get("calls") or []), node=node,
                 round=round if round is not None else state.get("round"))


def _failure_kind(exc: Exception) -> str:
    """"timeout", "transient" (429, 5xx, a dropped connection: worth another try) or "final".
    Integrations wrap the client's errors (langchain-openai's OpenAIRateLimitError), so the
    error's cause is read too."""
    if "response_format" in str(exc):  # the server refuses the option (llama.cpp: with a 500): not a fault
        return "final"
    if exc.__cause__ is not None and _failure_kind(exc.__cause__) != "final":
        return _failure_kind(exc.__cause__)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if any("RateLimit" in name for name in names):
        return "transient"
    if names & {"APITimeoutError", "TimeoutException", "ReadTimeout", "TimeoutError"}:
        return "timeout"
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int):
        return "transient" if status == 429 or status >= 500 else "final"
    if names & {"APIConnectionError", "ConnectError", "ConnectionError", "RemoteProtocolError"}:
        return "transient"
    return "final"


def ask_structured(asker: Asker, system: str, user: str, schema: type[Schema]) -> Schema:
    """An instance of `schema` from the model's answer, with one repair request.

    An OpenAI-compatible model is asked for the schema as its response format (OpenAI's
    `json_schema`; vLLM's server constrains its decoding to it); a server that refuses the option
    (a 400, or llama-cpp-python's 500 naming `response_format`) is asked again without it, and
    not offered it again. The lenient parser reads every answer either way, so a model that
    ignores the format still works."""
    instructions = (f"{system}\n\nAnswer with one JSON object that matches this JSON schema, and "
                    f"nothing else:\n{json.dumps(schema.model_json_schema())}")
    messages: list[BaseMessage] = [SystemMessage(instructions), HumanMessage(user)]
    again = "Answer again with only the JSON object, matching the schema"

    def parse(text: str) -> Schema:
        return answers.extract_json(text, schema)

    endpoint = _openai_endpoint(asker.model)
    if endpoint is not None and endpoint not in _REFUSES_RESPONSE_FORMAT:
        bind = {"response_format": {"type": "json_schema", "json_schema": {
            "name": schema.__name__, "schema": schema.model_json_schema(), "strict": False}}}
        try:
            return _with_repair(asker, messages, parse, again, bind)[0]
        except ModelUnavailable as exc:
            if isinstance(exc, ModelTimedOut) or not ("Error code: 400" in str(exc) or "response_format" in str(exc)):
                raise
            _REFUSES_RESPONSE_FORMAT.add(endpoint)  # asked once per process, not every round
    return _with_repair(asker, messages, parse, again)[0]


_REFUSES_RESPONSE_FORMAT: set[tuple] = set()


def _openai_endpoint(model) -> tuple | None:
    """(base URL, model name) of an OpenAI-compatible model, else None (another provider, a
    scripted model): only those are sent OpenAI's `response_format`."""
    if type(model).__name__ not in ("ChatOpenAI", "AzureChatOpenAI"):
        return None
    return (str(getattr(model, "openai_api_base", None)), str(getattr(model, "model_name", None)))


def ask_code(asker: Asker, messages: list[BaseMessage]) -> tuple[str, str, list[BaseMessage]]:
    """(the kernel's code, the text around it, the conversation including the answer), with one
    repair request in the same conversation."""
    (code, words), conversation = _with_repair(asker, messages, answers.extract_code,
                                               "Answer again with the whole kernel in one ```cuda block")
    return code, words, conversation


def _keys(model: BaseChatModel) -> list[str]:
    """The secrets a model object holds (a key passed to it rather than through the environment)."""
    return [v.get_secret_value() for v in vars(model).values() if isinstance(v, SecretStr)]


def _cut_off(answer: BaseMessage) -> bool:
    """The answer stopped at the output cap (OpenAI's and compatible servers' finish_reason)."""
    return (getattr(answer, "response_metadata", None) or {}).get("finish_reason") == "length"


TRUNCATED_CAP_FACTOR = 2  # an answer cut off at the cap is asked again once with this many times the cap


def _larger_cap(model: BaseChatModel) -> dict | None:
    """Bind arguments that raise the model's output cap by TRUNCATED_CAP_FACTOR, or None where its
    cap is unknown. A reasoning model's cap counts its hidden reasoning too (OpenAI's
    max_completion_tokens), so a cap that fits the code can still cut the answer off."""
    cap = getattr(model, "max_tokens", None)
    if not isinstance(cap, int) or cap <= 0:
        return None
    bind = {"max_tokens": cap * TRUNCATED_CAP_FACTOR}
    extra = getattr(model, "extra_body", None)
    if isinstance(extra, dict) and "max_tokens" in extra:  # an OpenAI-compatible server reads this one
        bind["extra_body"] = {**extra, "max_tokens": cap * TRUNCATED_CAP_FACTOR}
    return bind


def _why(error: Exception, answer: BaseMessage) -> str:
    """The parser's complaint, and that the answer was cut off when the model hit its output limit
    (the usual cause of a code block that never closes)."""
    why = str(error)[:600]
    if (answer.response_metadata or {}).get("finish_reason") == "length":
        why += " (the answer was cut off at the model's output limit: finish_reason length)"
    return why


def _with_repair(asker: Asker, messages: list[BaseMessage], parse, ask_again: str, bind: dict | None = None):
    """(what `parse` made of the answer, the conversation including the answer used)."""
    answer = asker.invoke(messages, **(bind or {}))
    try:
        return parse(_text(answer)), messages + [AIMessage(_text(answer))]
    except (ValueError, ValidationError, json.JSONDecodeError) as first:
        larger = _larger_cap(asker.model) if _cut_off(answer) else None
        if larger is not None:  # cut off at the cap: the same question once more with room to finish
            try:
                longer = asker.invoke(messages, **{**(bind or {}), **larger})
            except ModelUnavailable:  # the server refuses the cap (over its context or output limit), or
                longer = None         # it timed out twice: the repair below, at the cap that answered
            if longer is not None:
                answer = longer
                try:
                    return parse(_text(answer)), messages + [AIMessage(_text(answer))]
                except (ValueError, ValidationError, json.JSONDecodeError) as again:
                    first = again
        repair = messages + [AIMessage(_text(answer)),
                             HumanMessage(f"That answer could not be used: {_why(first, answer)}. {ask_again}.")]
        second = asker.invoke(repair, **(bind or {}))
        try:
            return parse(_text(second)), repair + [AIMessage(_text(second))]
        except (ValueError, ValidationError, json.JSONDecodeError) as exc:
            raise MalformedAnswer(f"the answer was unusable twice: {_why(exc, second)[:400]}",
                                  repair + [AIMessage(_text(second))]) from exc
