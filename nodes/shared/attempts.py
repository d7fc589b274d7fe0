"""Attempts and their bookkeeping, shared by the nodes that make candidates: the next candidate's
id, a failed attempt into the history (counted against the retries), its message fed back to the
model, and the key under which a template counts as tuned."""

from __future__ import annotations

import hashlib

from astra_kernels.graph.state import AgentState, Candidate

from .progress import say


def feedback(state: AgentState) -> str:
    """The last failed attempt's message, for the model to fix."""
    failed = state.get("candidate")
    if not failed or failed.get("verdict") in (None, "pending", "passed"):
        return ""
    return (f"\nYour previous attempt (candidate {failed['id']}) failed: {failed['verdict']}:\n"
            f"{failed['message'][:3000]}\nFix it.\n")


def next_id(state: AgentState) -> int:
    return len(state.get("history", [])) + 1


def failed(state: AgentState, candidate: Candidate, node: str) -> dict:
    """A finished, failed attempt: into the history, and counted against the retries."""
    line = say(node, f"candidate {candidate.id} {candidate.verdict}: {candidate.message.splitlines()[0][:200]}")
    return {"candidate": candidate.model_dump(), "history": [candidate.model_dump()],
            "retries": state.get("retries", 0) + 1, "events": [line]}


def template_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]
