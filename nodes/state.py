"""The agent's state: the kernel, the best candidate so far, every candidate tried, the counters.

Candidates and decisions are kept as plain JSON-able dicts validated through the pydantic models
below, so checkpoints hold no pickled objects, LangGraph Studio shows them as they are, and a
resumed run reads exactly what was written. `history` and `events` accumulate through reducers;
every other key is replaced by the node that returns it.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
# pydantic builds the JSON schemas LangGraph Studio draws its input form from, and before
# Python 3.12 it refuses typing.TypedDict (the form would be missing); pydantic requires this.
from typing_extensions import TypedDict

Origin = Literal["baseline", "rewrite", "template", "tune"]
Verdict = Literal["pending", "invalid", "compile_error", "incorrect", "passed", "accepted", "slower", "rejected",
                  "unmeasured", "duplicate"]
Action = Literal["rewrite", "templatize", "tune", "stop"]
FAILED = ("invalid", "compile_error", "incorrect", "duplicate")  # a repair can fix these; "unmeasured" is not one


class ShapeMeasurement(BaseModel):
    """One candidate at one shape."""

    label: str
    status: str
    median_us: float | None = None
    fraction_of_copy_bandwidth: float | None = None
    floor_us: float | None = None  # bytes moved over the measured bandwidth of the kernel's own read/write mix (copy's in old recordings)
    config: dict[str, int] = Field(default_factory=dict)
    message: str = ""
    # what the compile and the occupancy query said for this shape's configuration (the profiler
    # evidence's, nodes/shared/evidence.py); None where the evaluation did not report them
    registers: int | None = None
    occupancy_blocks_per_sm: int | None = None


class Message(BaseModel):
    """One turn of a conversation with the model, kept so a repair is asked in the same
    conversation as the attempt it repairs (the model sees its own failed code)."""

    role: Literal["system", "user", "assistant"]
    content: str


class Candidate(BaseModel):
    """A kernel in the template format: a rewrite is a template with no parameters, a template
    has them; `configs` holds the configuration to run per shape label (tuned or default).

    `idea` is what it set out to do (the planner's optimizations), `rationale` what the model
    said it changed; `slot` is its place among the round's candidates (best-of-N), `attempts`
    the answers it took, `conversation` the messages that produced it (for its repairs)."""

    id: int
    origin: Origin
    source: str
    rationale: str = ""
    idea: list[str] = Field(default_factory=list)
    slot: int = 0
    attempts: int = 1
    conversation: list[Message] = Field(default_factory=list)
    odd_shapes: str = ""  # how the kernel's odd shapes went: "passed", "unmeasured", or the failure
    configs: dict[str, dict[str, int]] = Field(default_factory=dict)
    verdict: Verdict = "pending"
    measurements: list[ShapeMeasurement] = Field(default_factory=list)
    registers: int | None = None
    spills: bool | None = None
    occupancy_blocks_per_sm: int | None = None
    gpu_seconds: float = 0.0  # its evaluations' time on the GPU (a replay: the recorded time)
    copy_bandwidth_gbs: float | None = None  # measured in the same process as its timings
    message: str = ""  # the compile log, or the failing shape and its largest differences

    def times(self) -> dict[str, float]:
        return {m.label: m.median_us for m in self.measurements if m.median_us is not None}

    def geomean_us(self) -> float | None:
        import math

        times = list(self.times().values())
        if not times or len(times) < len(self.measurements):
            return None
        return math.exp(sum(map(math.log, times)) / len(times))


class FrontEntry(BaseModel):
    """The fastest correct kernel measured at one shape so far: the run's dispatch table is the
    front over every shape, so a candidate wins only the shapes where it beats it."""

    candidate: int
    origin: Origin
    median_us: float
    config: dict[str, int] = Field(default_factory=dict)
    fraction_of_copy_bandwidth: float | None = None
    floor_us: float | None = None


class ModelCall(BaseModel):
    """One request to a chat model, for the report's cost accounting."""

    role: Literal["planner", "coder", "preflight"]
    seconds: float
    node: str = ""  # the graph node that asked (planner, generator, templater; "" for the preflight)
    round: int | None = None  # the planner round it belongs to (1 = the first plan and what it asked for)
    input_tokens: int | None = None
    output_tokens: int | None = None
    # "not_sent": never sent, the run's token budget being spent (RunContext.token_budget)
    outcome: Literal["answered", "failed", "timed_out", "not_sent"] = "answered"
    truncated: bool = False  # answered, but cut off at the output cap (finish_reason length)


LESSONS_PER_ROUND = 3  # a plan's lessons kept (Decision.lessons)
LESSON_CHARS = 300


class Decision(BaseModel):
    """The planner's choice, as structured output from the chat model or from the rules."""

    action: Action
    rationale: str = Field(description="why this action, from the measured facts")
    optimizations: list[str] = Field(default_factory=list,
                                     description="concrete changes to make (for rewrite or templatize)")
    lessons: list[str] = Field(default_factory=list, description=(
        "up to three short sentences of what the results so far taught (an idea that failed and why, a shape "
        "class that resists a technique); shown to the planner and the coder in every later round"))

    @field_validator("action", mode="before")
    @classmethod
    def _plain(cls, value):
        """Models write "Rewrite", " rewrite" or "'tune'": the choice, not its spelling, counts."""
        return value.strip().strip("'\"").lower() if isinstance(value, str) else value

    @field_validator("optimizations", "lessons", mode="before")
    @classmethod
    def _listed(cls, value):
        """One optimization (or lesson) given as a string is a list of one."""
        return [value] if isinstance(value, str) else value

    @field_validator("lessons")
    @classmethod
    def _few(cls, value: list[str]) -> list[str]:
        """Kept short: they are sent with every later request."""
        return [v.strip()[:LESSON_CHARS] for v in value if v.strip()][:LESSONS_PER_ROUND]


def merge_drafts(current: list[dict] | None, update: list[dict] | None) -> list[dict]:
    """The round's candidates by slot: a branch's update replaces its slot's entry (a repair
    replaces the failed attempt), and None starts a new round."""
    if update is None:
        return []
    merged = {d["slot"]: d for d in current or []}
    merged.update({d["slot"]: d for d in update})
    return [merged[slot] for slot in sorted(merged)]


def next_candidate_id(state: dict) -> int:
    """One more than any candidate id so far: the branches of a fan-out add their slot to it, so
    ids never collide."""
    ids = [c["id"] for c in state.get("history", [])] + [d["id"] for d in state.get("drafts", [])]
    ids += [c["id"] for c in (state.get("candidate"), state.get("baseline")) if c]
    return max(ids, default=0) + 1


class AgentState(TypedDict, total=False):
    kernel: str
    dtype: str
    shapes: list[dict[str, int]]
    baseline: dict | None  # a Candidate
    best: dict | None  # a Candidate: the one holding the most shapes of the front (the baseline at first)
    candidate: dict | None  # a Candidate: the template being built or tuned
    drafts: Annotated[list[dict], merge_drafts]  # the round's rewrites (Candidates), one per slot
    front: dict[str, dict]  # shape label: FrontEntry, the fastest correct kernel measured there
    gpu: dict  # the device, its copy bandwidth and launch floor, as the facts show them
    slot: int  # a generator branch's slot (only in what `Send` hands that branch)
    next_id: int  # the first id of the candidates a fan-out makes (idem)
    template: str | None  # the template the tuner searches: the suite's, or the templater's
    decision: dict | None  # a Decision
    history: Annotated[list[dict], operator.add]  # every finished Candidate, in order
    lessons: Annotated[list[str], operator.add]  # the planner's notes of what the results taught, "round N: ..."
    nsight: Annotated[dict[str, dict], operator.or_]  # shape label: Nsight Compute's counters for its holder (evidence.py)
    events: Annotated[list[str], operator.add]  # what happened, one line each, for reports
    calls: Annotated[list[dict], operator.add]  # every model request (ModelCall), for the costs
    gpu_seconds: Annotated[float, operator.add]  # the agent's own evaluations on the GPU (a replay: as recorded)
    search_seconds: Annotated[float, operator.add]  # the tuner's searches, wall time (compiles and evaluations)
    failed_attempts: int  # failed attempts at the current candidate (a fix each, up to context.fixes)
    round: int  # planner decisions made
    tuned: list[str]  # template sources already tuned (a hash each), so the planner moves on
    tuning: dict | None  # the last search: its template's key, space and pruning per shape, configurations
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
    front: dict[str, dict]
    history: list[dict]
    stop_reason: str
    report: dict | None
