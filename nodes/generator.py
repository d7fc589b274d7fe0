"""generator: the chat model rewrites the kernel directly (Astra's move), one candidate per slot.

With `best_of` N above one the planner sends N of these at once (LangGraph's `Send`), each
its own conversation, so the model's answers come in parallel. A first draft is asked with the
kernel that holds the most shapes, the facts (the kernel's meaning, the GPU, the per-shape
floors), what was tried and the planner's optimizations; a repair is asked in the conversation
that made the failed draft, so the model sees its own code beside the compiler's log or the
failing shape. An answer must be a kernel in the template format without parameters (its
launch geometry explicit); one that does not parse, or repeats a kernel already measured, is a
failed attempt fed back the same way.
"""

from __future__ import annotations

import time

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, Decision
from astra_kernels.tools.errors import AstraError

from astra_kernels.nodes.shared import answers
from astra_kernels.nodes.shared.attempts import (
    first_line, front_holders, held_shapes, history_text, lessons_text, repair_messages,
)
from astra_kernels.nodes.shared.chat import BudgetSpent, ask_code, from_messages, prompt, role_asker
from astra_kernels.nodes.shared.facts import model_facts
from astra_kernels.nodes.shared.measure import parse_candidate
from astra_kernels.nodes.shared.progress import say


def first_request(state: AgentState, decision: Decision, slot: int = 0, slots: int = 1) -> list:
    """The system and user messages of a first draft for `slot` of the round's `slots`. A population,
    not N copies of one prompt: slot i starts from the i-th kernel of the front (by shapes held,
    so a kernel winning a minority of shapes is refined too) and is given its own direction, the
    planner's i-th optimization, with the others named as its siblings' (they are tried beside it)."""
    parents = front_holders(state)
    parent = parents[slot % len(parents)]
    configs = ("" if not parent.configs else
               "It runs with these parameter values per shape (write the values in as constants, or pick "
               "the launch from the shape symbols):\n"
               + "\n".join(f"- {label}: {config}" for label, config in parent.configs.items()) + "\n")
    held = held_shapes(state, parent.id)
    start = (f"candidate {parent.id} ({parent.origin}), the fastest measured at "
             f"{', '.join(held) if held else 'no shape yet'}")
    user = prompt("generator", source=parent.source, configs=configs, facts=model_facts(state), start=start,
                  tried=history_text(state), lessons=lessons_text(state),
                  optimizations=_direction(decision.optimizations, slot, slots))
    return [SystemMessage(prompt("generator_system")), HumanMessage(user)]


def _direction(optimizations: list[str], slot: int, slots: int) -> str:
    """What this slot is asked to apply: with one slot, every optimization; with several, its own
    (the planner's in turn), its siblings' named so that the round's drafts differ."""
    if not optimizations:
        return "-"
    if slots <= 1:
        return "\n".join(f"- {o}" for o in optimizations)
    own = optimizations[slot % len(optimizations)]
    siblings = [optimizations[s % len(optimizations)] for s in range(slots) if s != slot]
    others = [o for o in dict.fromkeys(siblings) if o != own]
    text = f"- {own} (this draft's direction: {slots} drafts are written at once, each with its own)"
    if others:
        text += "\n\nThe other drafts of this round try: " + "; ".join(others) + ". Do not write theirs."
    if own in siblings:
        text += "\n\nAnother draft of this round takes the same direction from another kernel or angle: vary the method."
    return text


def generate(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    slot = state.get("slot", 0)
    asker = role_asker(context, "coder", state, "generator")
    decision = Decision.model_validate(state["decision"])
    previous = next((Candidate.model_validate(d) for d in state.get("drafts", []) if d["slot"] == slot), None)
    if previous is not None:  # a repair, in the conversation that made the failed draft
        messages, attempts = repair_messages(previous), previous.attempts + 1
    else:
        messages, attempts = first_request(state, decision, slot, max(1, context.best_of)), 1
    candidate = Candidate(id=state["next_id"] + slot, origin="rewrite", source="",
                          idea=decision.optimizations, slot=slot, attempts=attempts)
    try:
        if time.time() - state["started_at"] > context.wall_seconds:
            raise BudgetSpent(f"not asked: the wall-time budget of {context.wall_seconds:.0f} s is spent")
        code, words, conversation = ask_code(asker, messages)
        candidate = candidate.model_copy(update={"source": code, "rationale": words[:2000],
                                                 "conversation": from_messages(conversation)})
        if parse_candidate(state["kernel"], code).parameters:
            candidate.rationale += " (its parameters run at their defaults)"
        measured = [c for c in state.get("history", []) + [state["baseline"]] if c.get("source")]
        same = next((c for c in measured if answers.same_code(c["source"], code)), None)
        if same is not None:
            candidate = candidate.model_copy(update={"verdict": "duplicate", "message": (
                f"it is candidate {same['id']} ({same['origin']}) again, measured already; write a different kernel")})
    except AstraError as exc:  # an unusable answer (MalformedAnswer), a model that did not answer, a bad template
        conversation = candidate.conversation or from_messages(getattr(exc, "conversation", None) or messages)
        candidate = candidate.model_copy(update={"verdict": "invalid", "message": str(exc),
                                                 "conversation": conversation})
        if isinstance(exc, BudgetSpent):  # no repair could be asked either: the slot is done
            candidate.attempts = context.fixes + 1
    update = {"drafts": [candidate.model_dump()], "calls": asker.calls}
    if candidate.verdict == "pending":
        line = say("generator", f"candidate {candidate.id} (slot {slot}, attempt {attempts}): "
                                f"{first_line(candidate.rationale) or 'a rewrite'}")
    else:  # failed before any test: into the history here, its repair asked after the tester's turn
        line = say("generator", f"candidate {candidate.id} (slot {slot}) {candidate.verdict}: {first_line(candidate.message)}")
        update["history"] = [candidate.model_copy(update={"conversation": []}).model_dump()]
    return {**update, "events": [line]}
