"""Run configuration, LangGraph's context schema: what to run with, never what was found.

Every field has a default and plain values, so LangGraph Studio can offer it as a form and the
CLI as flags. Some fields take objects for programmatic use: `chat_model` (any LangChain chat
model, e.g. a scripted one in tests; `planner_chat_model` and `coder_chat_model` per role) and `evaluator` (anything with `device` and
`evaluate(request)`, e.g. an EvaluationWorker the caller owns). Left empty they are built from
`model` / `base_url` and from `replay` or `gpu`: `replay` is the plain-value way to run without a
GPU, for clients that cannot pass objects (LangGraph Studio, the server's REST API). The
context is not checkpointed, so an API key passed in a model object never reaches a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from astra_kernels.defaults import TUNE_SECONDS


@dataclass
class RunContext:
    model: str | None = None  # "provider:name", e.g. "openai:o4-mini"; None runs the rule-based planner
    base_url: str | None = None  # an OpenAI-compatible server: vLLM, Ollama, SGLang
    temperature: float | None = None
    reasoning_effort: str | None = None  # "low" | "medium" | "high" for reasoning models
    # A role's own model and settings; unset, the role takes `model`, `temperature`, `reasoning_effort`.
    # The planner reasons over facts and answers in JSON; the coder (generator and templater) writes kernels.
    planner_model: str | None = None
    planner_temperature: float | None = None
    planner_reasoning_effort: str | None = None
    coder_model: str | None = None
    coder_temperature: float | None = None
    coder_reasoning_effort: str | None = None
    # Output tokens per answer: a plan is a short JSON object, a kernel a file of a few hundred
    # lines; without a cap a small model writes until its context ends (7,652 tokens in 354 s).
    planner_max_tokens: int = 2048
    coder_max_tokens: int = 8192
    timeout_s: float = 180.0  # per model request; a request that times out is a failed answer, not retried
    max_retries: int = 4  # per model request, on 429, 5xx and connection errors, with backoff
    rounds: int = 4  # planner decisions before the reporter
    candidates: int = 1  # rewrites asked for each round (best-of-N), compiled in parallel, timed one by one
    retries: int = 2  # fixes asked of the model per candidate after a compile error or failed test
    wall_seconds: float = 3600.0  # the whole run
    strategy: str = "auto"  # the tuner's search strategy
    l2: Literal["cold", "warm"] = "cold"  # the L2 regime every evaluation is timed in (EvaluationRequest.l2)
    tune_seconds: float = TUNE_SECONDS  # search time of one tune action, shared by the shapes
    tune_sample: int | None = None  # search a seeded sample of this many configurations (None: all)
    gpu: int = 0
    approve: bool = False  # pause before accepting a faster candidate, for a person's yes or no
    results: str = "out/agent/results.sqlite"  # the results store every evaluation goes through
    out: str | None = None  # where the reporter writes report.md / report.json (None: state only)
    # Answer from a recorded results store instead of a GPU: "recorded" (the newest shipped
    # recording of the kernel), "recorded:SESSION" or a store's path. Its working copy is `results`.
    replay: str | None = None
    chat_model: Any = None  # any LangChain chat model, for every role without its own
    planner_chat_model: Any = None
    coder_chat_model: Any = None
    evaluator: Any = None

    def has_model(self, role: str) -> bool:
        """Whether the role ("planner" or "coder") has a model: its own object or name, else the run's."""
        return bool(getattr(self, f"{role}_chat_model") or self.chat_model or getattr(self, f"{role}_model")
                    or self.model)
