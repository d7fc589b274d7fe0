"""Attempts and their bookkeeping, shared by the nodes that make candidates: a failed attempt into the history (counted against the fixes), the repair asked in the
conversation that made it, the history told to the model, and the key under which a template
counts as tuned."""

from __future__ import annotations

import hashlib

from langchain_core.messages import HumanMessage

from astra_kernels.nodes.state import AgentState, Candidate, FrontEntry

from .chat import to_messages
from .progress import say

REPAIR = {
    "compile_error": "It did not compile. The compiler's log (line numbers count from the first line of the "
                     "code in your answer):",
    "invalid": "It could not be used:",
    "incorrect": "It compiled but its results are wrong (the shape, the outputs that differ and by how much):",
    "duplicate": "It is the same code as a kernel already measured:",
}


def repair_request(candidate: Candidate) -> str:
    """What the model is told after its attempt failed: the verdict, the compiler log or the
    failing shape with its largest differences. The failed code itself is the model's previous
    answer in the same conversation, so the line numbers point at code it can see."""
    return (f"{REPAIR.get(candidate.verdict, candidate.verdict + ':')}\n{candidate.message[:4000]}\n\n"
            "Fix it: answer with the whole corrected kernel in one ```cuda block, keeping the extern \"C\" "
            "signature.")


def repair_messages(candidate: Candidate) -> list:
    """The failed draft's conversation with the repair asked at its end. A conversation that ends
    on our own question (the model never answered: a timeout, an outage) is asked again as it was,
    so turns keep alternating, which many servers' chat templates require."""
    messages = to_messages(candidate.conversation)
    if messages and messages[-1].type == "human":
        return messages
    return messages + [HumanMessage(repair_request(candidate))]


def failed(state: AgentState, candidate: Candidate, node: str) -> dict:
    """A finished, failed attempt: into the history, and counted against the fixes."""
    line = say(node, f"candidate {candidate.id} {candidate.verdict}: {first_line(candidate.message)}")
    return {"candidate": candidate.model_dump(), "history": [candidate.model_copy(update={"conversation": []}).model_dump()],
            "failed_attempts": state.get("failed_attempts", 0) + 1, "events": [line]}


def first_line(text: str, width: int = 200) -> str:
    return text.splitlines()[0][:width] if text else ""


def template_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def per_shape_change(candidate: Candidate, front: dict[str, dict]) -> str:
    """Its time at each shape against the best there before it ("-12%" is faster), for the history."""
    parts = []
    for m in candidate.measurements:
        held = front.get(m.label)
        if m.median_us is None or not held:
            parts.append(f"{m.label} {m.status}")
        else:
            parts.append(f"{m.label} {100 * (m.median_us / held['median_us'] - 1):+.0f}%")
    return ", ".join(parts)


def history_text(state: AgentState, limit: int = 12) -> str:
    """Each candidate so far: what it tried (its idea), what the model said it changed, its verdict
    and its per-shape change against the best before it; the latest `limit` in full."""
    lines = []
    for record in state.get("history", [])[-limit:]:
        c = Candidate.model_validate(record)
        line = f"- candidate {c.id} ({c.origin}): {c.verdict}"
        if c.idea:
            line += f"; idea: {'; '.join(c.idea)[:300]}"
        if c.rationale and c.origin != "tune":
            line += f"; it said: {first_line(c.rationale, 200)}"
        elif c.rationale:  # a search: what it was (the shipped table, or this run's search and its size)
            line += f"; {first_line(c.rationale, 200)}"
        if c.measurements and c.verdict in ("accepted", "slower", "rejected"):
            line += f"; per shape against the best before it: {c.message or per_shape_change(c, {})}"
        elif c.message:
            line += f"; {first_line(c.message, 240)}"
        lines.append(line)
    skipped = len(state.get("history", [])) - limit
    return ("\n".join(([f"- ({skipped} earlier candidates not shown)"] if skipped > 0 else []) + lines)
            or "nothing yet")


def lessons_text(state: AgentState, limit: int = 12) -> str:
    """The planner's lessons from earlier rounds (Decision.lessons), the latest `limit`: the memory a
    run carries from round to round beside the history of candidates."""
    lessons = state.get("lessons") or []
    skipped = len(lessons) - limit
    lines = ([f"- ({skipped} earlier lessons not shown)"] if skipped > 0 else []) + [f"- {l}" for l in lessons[-limit:]]
    return "\n".join(lines) or "none yet"


def front_holders(state: AgentState) -> list[Candidate]:
    """Every kernel that holds a shape of the front, the one holding most first (the latest on a
    tie): the round's parents, so a kernel winning a minority of shapes is refined too."""
    front = {label: FrontEntry.model_validate(e) for label, e in (state.get("front") or {}).items()}
    counts: dict[int, int] = {}
    for entry in front.values():
        counts[entry.candidate] = counts.get(entry.candidate, 0) + 1
    known = {c["id"]: c for c in state.get("history", [])}
    known[state["baseline"]["id"]] = state["baseline"]
    order = sorted(counts, key=lambda i: (counts[i], i), reverse=True)
    return [Candidate.model_validate(known[i]) for i in order if i in known] or [Candidate.model_validate(state["best"])]


def holder(state: AgentState) -> Candidate:
    """The candidate that holds the most shapes of the front (the latest on a tie): the kernel
    a single rewrite starts from."""
    return front_holders(state)[0]


def held_shapes(state: AgentState, candidate_id: int) -> list[str]:
    """The front's shapes `candidate_id` holds."""
    return [label for label, e in (state.get("front") or {}).items() if e["candidate"] == candidate_id]
