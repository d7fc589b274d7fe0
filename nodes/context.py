"""Run configuration, LangGraph's context schema: what to run with, never what was found.

Every field has a default and plain values, so LangGraph Studio can offer it as a form and the
CLI as flags. Some fields take objects for programmatic use: `chat_model` (any LangChain chat
model, e.g. a scripted one in tests; `planner_chat_model` and `coder_chat_model` per role) and `evaluator` (anything with `device` and
`evaluate(request)`, e.g. an EvaluationWorker the caller owns) and `session` (an EvaluatorSession
whose workers and stores the run borrows: the process's when empty). Left empty they are built from
`model` / `base_url` and from `replay` or `gpu`: `replay` is the plain-value way to run without a
GPU, for clients that cannot pass objects (LangGraph Studio, the server's REST API). The
context is not checkpointed, so an API key passed in a model object never reaches a checkpoint.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from astra_kernels.defaults import TUNE_SECONDS
from astra_kernels.tools.errors import UsageError
from astra_kernels.tools.measuring.regimes import L2Regime


@dataclass
class RunContext:
    model: str | None = None  # "provider:name", e.g. "openai:o4-mini"; None runs the rule-based planner
    base_url: str | None = None  # an OpenAI-compatible server: vLLM, Ollama, SGLang
    temperature: float | None = None
    reasoning_effort: str | None = None  # "low" | "medium" | "high" for reasoning models (None: the model's preset)
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
    # None: the model's preset (nodes/shared/presets.py: 2048 and 8192 for a chat model, more for a
    # reasoning model, whose cap counts its thinking).
    planner_max_tokens: int | None = None
    coder_max_tokens: int | None = None
    timeout_s: float = 180.0  # per model request; one that times out is asked once more, then is a failed answer
    # Tokens (in and out, as the servers report them) the run's model requests may use in all; once
    # spent no request is sent: the planner takes the rules (search alone) and a draft fails saying
    # so. None: no limit. Checked before each request, so drafts asked side by side can pass it by
    # their own requests; answers whose server reports no usage count nothing.
    token_budget: int | None = None
    max_retries: int = 4  # per model request, on 429, 5xx and connection errors, with backoff
    rounds: int = 4  # planner decisions before the reporter
    best_of: int = 1  # rewrites asked for each round (best-of-N), compiled in parallel, timed one by one
    fixes: int = 2  # fixes asked of the model per candidate after a compile error or failed test
    wall_seconds: float = 3600.0  # the whole run
    strategy: str = "auto"  # the tuner's search strategy
    l2: L2Regime = "cold"  # the L2 regime every evaluation is timed in
    tune_seconds: float = TUNE_SECONDS  # search time of one tune action, shared by the shapes
    tune_sample: int | None = None  # search a seeded sample of this many configurations (None: all)
    # The search floor: the run first measures, at every shape, the table shipped for its GPU (the
    # search's result, tuned offline), so no shape it measures correct ends worse than search alone;
    # off, it starts from the baseline only.
    search_floor: bool = True
    gpu: int = 0
    # Profile the slowest shape of each class for its holder with Nsight Compute after each round,
    # where ncu is installed and the run measures on a GPU of this machine (nodes/shared/evidence.py)
    nsight: bool = True
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
    # The EvaluatorSession (astra_kernels/evaluators.py) whose workers, replays and results stores
    # the run borrows; None: the process's, which every run given none shares.
    session: Any = None

    def has_model(self, role: str) -> bool:
        """Whether the role ("planner" or "coder") has a model: its own object or name, else the run's."""
        return bool(getattr(self, f"{role}_chat_model") or self.chat_model or getattr(self, f"{role}_model")
                    or self.model)


STUDIO_ROOT = "ASTRA_STUDIO_ROOT"  # the folder a served run may read and write under (default: the working directory)
STUDIO_MODEL_HOSTS = "ASTRA_STUDIO_MODEL_HOSTS"  # hosts besides this machine a served run may send requests to
_RECORDED = re.compile(r"recorded(:[A-Za-z0-9][A-Za-z0-9_-]*)?\Z")
_OBJECTS = ("chat_model", "planner_chat_model", "coder_chat_model", "evaluator", "session")


@dataclass
class StudioContext(RunContext):
    """RunContext as LangGraph's server (`langgraph dev`, Studio) takes it: from any client's JSON.

    The dev server answers `access-control-allow-origin: *`, so a web page open in the user's
    browser can start a run with a context of its choosing, and a run writes where `out` and
    `results` say, reads the store `replay` names and sends the model requests, with the API key of
    the server's environment, to `base_url`. So a served run takes paths only under a working root
    (the server's working directory, or $ASTRA_STUDIO_ROOT), a shipped recording or a store under
    that root as `replay`, a model server only on this machine unless $ASTRA_STUDIO_MODEL_HOSTS
    names the host (comma-separated; `*` for any), and no objects (JSON cannot carry them; a dict in
    their place would reach the nodes). A refusal is one line naming the field. Python's own use
    (RunContext, the CLI) keeps every freedom: its caller is the user."""

    def __post_init__(self) -> None:
        root = Path(os.environ.get(STUDIO_ROOT) or Path.cwd()).resolve()
        for name in _OBJECTS:
            if getattr(self, name) is not None:
                raise UsageError(f"Studio context: {name} cannot be given through the server; "
                                 "set `model` (and `base_url`) or `replay` instead")
        if self.replay is not None and self.replay.startswith("recorded:") and not _RECORDED.match(self.replay):
            raise UsageError(f"Studio context: replay {self.replay!r} names no shipped recording's session "
                             "(letters, digits, - and _, e.g. recorded:h200-2026-11-24)")
        if self.replay is not None and not _RECORDED.match(self.replay):
            _under_root("replay", self.replay, root, "or `recorded` / `recorded:SESSION` for a shipped recording")
        _under_root("results", self.results, root)
        if self.out is not None:
            _under_root("out", self.out, root)
        if self.base_url is not None:
            _allowed_host(self.base_url)


def _under_root(field: str, value: str, root: Path, alternative: str = "") -> None:
    """Refuse a path (relative ones are to the working directory, as the nodes take them) that is not
    under `root`, symbolic links and `..` followed."""
    try:
        Path(value).resolve().relative_to(root)
    except (ValueError, OSError, TypeError):
        raise UsageError(f"Studio context: {field} {value!r} is not under the server's working root {root} "
                         f"(a relative path there{', ' + alternative if alternative else ''}; "
                         f"${STUDIO_ROOT} sets another root)") from None


def _allowed_host(url: str) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        parts, host = None, ""
    allowed = {h.strip().lower() for h in os.environ.get(STUDIO_MODEL_HOSTS, "").split(",") if h.strip()}
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"Studio context: base_url {url!r} is not an http(s) URL with a host")
    if "*" in allowed or host.lower() in allowed or _loopback(host):
        return
    raise UsageError(f"Studio context: base_url {url!r} is not on this machine; a served run sends the API key "
                     f"there, so allow its host by starting the server with {STUDIO_MODEL_HOSTS}={host}")


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
