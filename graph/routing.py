"""Where the graph goes after each node: named functions of the state and the run's context.

The loop caps itself: planner rounds and per-candidate attempts are counted in the state and
bounded by the context, so a run ends in the reporter long before LangGraph's recursion limit.
A rewrite round fans out: `best_of` generator branches at once (LangGraph's `Send`, each
with its slot), and after the tester only the failed ones go back for a repair.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import FAILED, AgentState, next_candidate_id


def after_load(state: AgentState) -> Literal["planner", "profiler", "reporter"]:
    """The search floor, where one was measured, to the profiler first (it judges it against the
    baseline and hands over to the planner)."""
    if state.get("stop_reason"):
        return "reporter"
    return "profiler" if state.get("candidate") else "planner"


def _to_generator(state: AgentState, slots: list[int]) -> list[Send]:
    first = next_candidate_id(state)
    return [Send("generator", {**state, "slot": slot, "next_id": first}) for slot in slots]


def after_planner(state: AgentState, runtime: Runtime[RunContext]):
    """To `best_of` generator branches, the templater, the tuner, or the reporter."""
    action = state["decision"]["action"]
    if action in ("rewrite", "templatize") and not runtime.context.has_model("coder"):
        return "reporter"  # only a model rewrites or re-templates; the rules never ask for it
    if action == "rewrite":
        return _to_generator(state, list(range(max(1, runtime.context.best_of))))
    return {"templatize": "templater", "tune": "tuner"}.get(action, "reporter")


def after_tester(state: AgentState, runtime: Runtime[RunContext]):
    """The failed drafts that have attempts left go back to their generator branch; the rest wait
    for them, then all go to the profiler."""
    again = [d["slot"] for d in state.get("drafts", [])
             if d["verdict"] in FAILED and d["attempts"] <= runtime.context.fixes]
    return _to_generator(state, again) if again else "profiler"


def _retry_or_plan(state: AgentState, runtime: Runtime[RunContext], again: str) -> str:
    return again if state.get("failed_attempts", 0) <= runtime.context.fixes else "planner"


def after_templater(state: AgentState, runtime: Runtime[RunContext]) -> Literal["tuner", "templater", "planner"]:
    if state["candidate"]["verdict"] in FAILED:
        return _retry_or_plan(state, runtime, "templater")
    return "tuner"


def after_tuner(state: AgentState, runtime: Runtime[RunContext]) -> Literal["profiler", "templater", "planner"]:
    """A template of the model's that no configuration ran correctly with goes back to the
    templater, with sample errors; the suite's own template never does."""
    candidate = state["candidate"]
    if candidate["verdict"] not in FAILED:
        return "profiler"
    if candidate.get("conversation") and runtime.context.has_model("coder"):
        return _retry_or_plan(state, runtime, "templater")
    return "planner"
