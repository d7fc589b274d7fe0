"""What each chat model is sent unless told otherwise: its output-token caps and reasoning effort.

A reasoning model counts its hidden reasoning against the output cap (OpenAI's
max_completion_tokens), so the caps that suit a chat model (a plan in 2,048 tokens, a kernel in
8,192) cut a reasoning model off before it answers: the README's own example, o4-mini, got one
repair and then the rules instead of its plan. OpenAI's guidance for its reasoning models is to
leave at least 25,000 tokens for reasoning and output; a reasoning model here gets 16,384 for a plan
and 32,768 for a kernel, and the API's own reasoning-effort setting where the provider takes one
("medium", OpenAI's default, said explicitly so the report shows it). A setting given for a run or
a role (RunContext, `astra optimize --max-tokens`, `--reasoning-effort`) always wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    planner_max_tokens: int
    coder_max_tokens: int
    reasoning_effort: str | None = None  # sent only where the provider's API takes it

    def max_tokens(self, role: str) -> int:
        return self.planner_max_tokens if role == "planner" else self.coder_max_tokens


CHAT = Preset("a chat model", planner_max_tokens=2048, coder_max_tokens=8192)
REASONING = Preset("a reasoning model", planner_max_tokens=16384, coder_max_tokens=32768)
# (pattern over "provider:name", the preset): the first that matches
PRESETS = (
    (re.compile(r"^openai:(o\d|gpt-5)", re.I),
     Preset("an OpenAI reasoning model", REASONING.planner_max_tokens, REASONING.coder_max_tokens,
            reasoning_effort="medium")),
    (re.compile(r"(reasoner|[-_/:]r1\b|qwq|thinking)", re.I), REASONING),
)


def preset(model: str | None) -> Preset:
    """The preset of `model` ("provider:name"); a chat model's for any other, or none."""
    for pattern, found in PRESETS:
        if model and pattern.search(model):
            return found
    return CHAT
