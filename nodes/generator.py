"""generator: the chat model rewrites the kernel directly (Astra's move), one candidate per slot.

With `candidates` N above one the planner sends N of these at once (LangGraph's `Send`), each
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

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate, Decision
from astra_kernels.tools.errors import AstraError

from astra_kernels.nodes.shared import answers
from astra_kernels.nodes.shared.attempts import first_line, history_text, holder, repair_messages
from astra_kernels.nodes.shared.chat import Asker, ask_code, from_messages, make_chat_model, prompt
from astra_kernels.nodes.shared.facts import model_facts
from astra_kernels.nodes.shared.measure import parse_candidate
from astra_kernels.nodes.shared.progress import say


def first_request(state: AgentState, decision: Decision) -> list:
    """The system and user messages of a first draft."""
    best = holder(state)
    configs = ("" if not best.configs else
               "It runs with these parameter values per shape (write the values in as constants, or pick "
               "the launch from the shape symbols):\n"
               + "\n".join(f"- {label}: {config}" for label, config in best.configs.items()) + "\n")
    user = prompt("generator", source=best.source, configs=configs, facts=model_facts(state),
                  tried=history_text(state), optimizations="\n".join(f"- {o}" for o in decision.optimizations) or "-")
    return [SystemMessage(prompt("generator_system")), HumanMessage(user)]


def generate(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    slot = state.get("slot", 0)
    asker = Asker(make_chat_model(context, "coder"), "coder", retries=context.max_retries)
    decision = Decision.model_validate(state["decision"])
    previous = next((Candidate.model_validate(d) for d in state.get("drafts", []) if d["slot"] == slot), None)
    if previous is not None:  # a repair, in the conversation that made the failed draft
        messages, attempts = repair_messages(previous), previous.attempts + 1
    else:
        messages, attempts = first_request(state, decision), 1
    candidate = Candidate(id=state["next_id"] + slot, origin="rewrite", source="",
                          idea=decision.optimizations, slot=slot, attempts=attempts)
    try:
        if time.time() - state["started_at"] > context.wall_seconds:
            raise AstraError(f"not asked: the wall-time budget of {context.wall_seconds:.0f} s is spent")
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
    update = {"drafts": [candidate.model_dump()], "calls": asker.calls}
    if candidate.verdict == "pending":
        line = say("generator", f"candidate {candidate.id} (slot {slot}, attempt {attempts}): "
                                f"{first_line(candidate.rationale) or 'a rewrite'}")
    else:  # failed before any test: into the history here, its repair asked after the tester's turn
        line = say("generator", f"candidate {candidate.id} (slot {slot}) {candidate.verdict}: {first_line(candidate.message)}")
        update["history"] = [candidate.model_copy(update={"conversation": []}).model_dump()]
    return {**update, "events": [line]}
