"""planner: the next action from the measured facts, by the chat model or by rules.

With a model (the planner role's), the decision is structured output (nodes/state.py Decision)
from the facts: the kernel's meaning and the GPU, each shape's time against its bytes floor and
launch floor, the kernel that holds the most shapes, and what every earlier candidate tried
and what it changed per shape. Without one, or when the model's answer stays unusable, the
rules decide from the same facts: search the current template if it has not been searched, else
stop; the same holds when the model does not answer at all (an outage mid-run). Spent budgets
(planner rounds, wall time) stop the run whatever the model would say.
"""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Decision

from astra_kernels.nodes.shared.attempts import history_text, holder, lessons_text, template_key
from astra_kernels.nodes.shared.chat import (
    MalformedAnswer, ModelUnavailable, ask_structured, make_chat_model, prompt, role_asker,
)
from astra_kernels.nodes.shared.facts import model_facts
from astra_kernels.nodes.shared.progress import say


def rule_based(state: AgentState) -> Decision:
    if template_key(state["template"]) not in state.get("tuned", []):
        return Decision(action="tune", rationale="the current template's space has not been searched yet")
    return Decision(action="stop", rationale="the template's space has been searched and no chat model is "
                                             "configured to rewrite or re-template the kernel")


def plan(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    done = state.get("round", 0)
    calls = []
    if done >= context.rounds:
        decision = Decision(action="stop", rationale=f"the budget of {context.rounds} planner rounds is spent")
    elif time.time() - state["started_at"] > context.wall_seconds:
        decision = Decision(action="stop", rationale=f"the wall-time budget of {context.wall_seconds:.0f} s is spent")
    elif (model := make_chat_model(context, "planner")) is None:
        decision = rule_based(state)
    else:
        best = holder(state)
        tuned = "yes" if template_key(state["template"]) in state.get("tuned", []) else "no"
        user = prompt("planner", facts=model_facts(state), tried=history_text(state), lessons=lessons_text(state),
                      source=best.source, holder=f"candidate {best.id} ({best.origin})", tuned=tuned, round=str(done + 1),
                      rounds=str(context.rounds), best_of=str(context.best_of))
        asker = role_asker(context, "planner", state, "planner", model, round=done + 1)
        try:
            decision = ask_structured(asker, prompt("planner_system"), user, Decision)
        except (MalformedAnswer, ModelUnavailable) as exc:
            decision = rule_based(state)
            decision.rationale = f"no usable plan from the model ({exc}); by the rules: {decision.rationale}"
        calls = asker.calls
        if decision.action in ("rewrite", "templatize") and not context.has_model("coder"):
            wanted = decision.action
            decision = rule_based(state)
            decision.rationale = f"the plan was to {wanted} but no coder model is configured; by the rules: " \
                                 f"{decision.rationale}"
    line = say("planner", f"round {done + 1}: {decision.action}: {decision.rationale}", action=decision.action)
    return {"decision": decision.model_dump(), "round": done + 1, "failed_attempts": 0, "candidate": None, "drafts": None,
            "calls": calls, "events": [line], "lessons": [f"round {done + 1}: {lesson}" for lesson in decision.lessons]}
