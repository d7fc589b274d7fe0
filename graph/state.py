"""The agent's state: the kernel, the best candidate so far, every candidate tried, the counters.

Candidates and decisions are kept as plain JSON-able dicts validated through the pydantic models
below, so checkpoints hold no pickled objects, LangGraph Studio shows them as they are, and a
resumed run reads exactly what was written. `history` and `events` accumulate through reducers;
every other key is replaced by the node that returns it.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from pydantic import BaseModel, Field
# pydantic builds the JSON schemas LangGraph Studio draws its input form from, and before
# Python 3.12 it refuses typing.TypedDict (the form would be missing); pydantic requires this.
from typing_extensions import TypedDict

Origin = Literal["baseline", "rewrite", "template", "tune"]
Verdict = Literal["pending", "invalid", "compile_error", "incorrect", "passed", "accepted", "slower", "rejected"]
Action = Literal["rewrite", "templatize", "tune", "stop"]


class ShapeMeasurement(BaseModel):
    """One candidate at one shape."""

    label: str
    status: str
    median_us: float | None = None
    fraction_of_copy_bandwidth: float | None = None
    config: dict[str, int] = Field(default_factory=dict)
    message: str = ""


class Candidate(BaseModel):
    """A kernel in the template format: a rewrite is a template with no parameters, a template
    has them; `configs` holds the configuration to run per shape label (tuned or default)."""

    id: int
    origin: Origin
    source: str
    rationale: str = ""
    configs: dict[str, dict[str, int]] = Field(default_factory=dict)
    verdict: Verdict = "pending"
    measurements: list[ShapeMeasurement] = Field(default_factory=list)
    registers: int | None = None
    spills: bool | None = None
    occupancy_blocks_per_sm: int | None = None
    message: str = ""  # the compile log, or the failing shape and its largest differences

    def times(self) -> dict[str, float]:
        return {m.label: m.median_us for m in self.measurements if m.median_us is not None}

    def geomean_us(self) -> float | None:
        import math

        times = list(self.times().values())
        if not times or len(times) < len(self.measurements):
            return None
        return math.exp(sum(map(math.log, times)) / len(times))


class Decision(BaseModel):
    """The planner's choice, as structured output from the chat model or from the rules."""

    action: Action
    rationale: str = Field(description="why this action, from the measured facts")
    optimizations: list[str] = Field(default_factory=list,
                                     description="concrete changes to make (for rewrite or templatize)")


class AgentState(TypedDict, total=False):
    kernel: str
    dtype: str
    shapes: list[dict[str, int]]
    baseline: dict | None  # a Candidate
    best: dict | None  # a Candidate: the fastest correct one so far (the baseline at first)
    candidate: dict | None  # a Candidate: the one being built, tested or profiled
    template: str | None  # the template the tuner searches: the suite's, or the templater's
    decision: dict | None  # a Decision
    history: Annotated[list[dict], operator.add]  # every finished Candidate, in order
    events: Annotated[list[str], operator.add]  # what happened, one line each, for reports
    retries: int  # failed attempts at the current candidate
    round: int  # planner decisions made
    tuned: list[str]  # template sources already tuned (a hash each), so the planner moves on
    started_at: float
    stop_reason: str
    report: dict | None


class AgentInput(TypedDict, total=False):
    """What a caller (CLI, notebook, parent graph) passes in."""

    kernel: str
    dtype: str
    shapes: list[dict[str, int]]


class AgentOutput(TypedDict, total=False):
    """What the graph hands back: the report, the best and the baseline."""

    kernel: str
    baseline: dict | None
    best: dict | None
    history: list[dict]
    stop_reason: str
    report: dict | None
