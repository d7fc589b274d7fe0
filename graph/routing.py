"""Where the graph goes after each node: named functions of the state and the run's context.

The loop caps itself: planner rounds and per-candidate retries are counted in the state and
bounded by the context, so a run ends in the reporter long before LangGraph's recursion limit.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime

from .context import RunContext
from .state import AgentState

FAILED = ("invalid", "compile_error", "incorrect")


def after_load(state: AgentState) -> Literal["planner", "reporter"]:
    return "reporter" if state.get("stop_reason") else "planner"


def after_planner(state: AgentState, runtime: Runtime[RunContext]) -> Literal[
        "generator", "templater", "tuner", "reporter"]:
    action = state["decision"]["action"]
    if action in ("rewrite", "templatize") and runtime.context.model is None and runtime.context.chat_model is None:
        return "reporter"  # only a model rewrites or re-templates; the rules never ask for it
    return {"rewrite": "generator", "templatize": "templater", "tune": "tuner"}.get(action, "reporter")


def _retry_or_plan(state: AgentState, runtime: Runtime[RunContext], again: str) -> str:
    return again if state.get("retries", 0) <= runtime.context.retries else "planner"


def after_generator(state: AgentState, runtime: Runtime[RunContext]) -> Literal["tester", "generator", "planner"]:
    if state["candidate"]["verdict"] in FAILED:
        return _retry_or_plan(state, runtime, "generator")
    return "tester"


def after_templater(state: AgentState, runtime: Runtime[RunContext]) -> Literal["tuner", "templater", "planner"]:
    if state["candidate"]["verdict"] in FAILED:
        return _retry_or_plan(state, runtime, "templater")
    return "tuner"


def after_tester(state: AgentState, runtime: Runtime[RunContext]) -> Literal["profiler", "generator", "planner"]:
    if state["candidate"]["verdict"] in FAILED:
        return _retry_or_plan(state, runtime, "generator")
    return "profiler"


def after_tuner(state: AgentState) -> Literal["profiler", "planner"]:
    return "planner" if state["candidate"]["verdict"] in FAILED else "profiler"
