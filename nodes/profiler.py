"""profiler: judge the round's correct candidates shape by shape, and keep what wins.

Every candidate was checked and timed in one evaluation per shape (tester, or the tuner's
search). A candidate wins the shapes where it beats the fastest kernel measured there so far
(the front) by more than the timing noise, and only those: the run's result is the front, a
dispatch table over everything measured, so no shape ever regresses for a gain at another. A
candidate that wins somewhere is accepted (after a person's yes when the run asks for approval:
an interrupt that the CLI, a notebook or Studio answers); one that wins nowhere is "slower", and
the next rewrite starts again from the kernel that holds the most shapes.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from astra_kernels.defaults import TIMING_NOISE
from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, FrontEntry

from astra_kernels.nodes.shared.attempts import holder, per_shape_change
from astra_kernels.nodes.shared.evidence import nsight_profiles
from astra_kernels.nodes.shared.progress import say


def wins(candidate: Candidate, front: dict[str, dict]) -> dict[str, float]:
    """The shapes (label: its time) where the candidate beats the front beyond the noise."""
    return {m.label: m.median_us for m in candidate.measurements
            if m.status == "ok" and m.median_us is not None and m.label in front
            and m.median_us < front[m.label]["median_us"] * (1 - TIMING_NOISE)}


def judged(state: AgentState) -> list[Candidate]:
    """The round's candidates that reached the profiler: the tested rewrites, or the tuned template."""
    if state.get("drafts"):
        return [Candidate.model_validate(d) for d in state["drafts"] if d["verdict"] in ("passed", "unmeasured")]
    candidate = state.get("candidate")
    return [Candidate.model_validate(candidate)] if candidate and candidate["verdict"] == "passed" else []


def profile(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    front = dict(state["front"])
    finished, lines = [], []
    for candidate in sorted(judged(state), key=lambda c: c.id):
        if candidate.verdict == "unmeasured":
            finished.append(candidate)
            lines.append(say("profiler", f"candidate {candidate.id} is unmeasured: {candidate.message[:200]}"))
            continue
        change = per_shape_change(candidate, front)
        won = wins(candidate, front)
        if not won:
            candidate = candidate.model_copy(update={"verdict": "slower", "message": f"faster nowhere: {change}"})
            lines.append(say("profiler", f"candidate {candidate.id} is correct but faster at no shape ({change})",
                             verdict="slower"))
            finished.append(candidate)
            continue
        approved = True
        if runtime.context.approve:
            approved = bool(interrupt({
                "question": f"accept candidate {candidate.id} ({candidate.origin}) at {', '.join(won)}? "
                            f"per shape against the best so far: {change}",
                "candidate": candidate.id, "wins": won, "times": candidate.times()}))
        if approved:
            for m in candidate.measurements:
                if m.label in won:
                    front[m.label] = FrontEntry(candidate=candidate.id, origin=candidate.origin, median_us=m.median_us,
                                                config=m.config, floor_us=m.floor_us,
                                                fraction_of_copy_bandwidth=m.fraction_of_copy_bandwidth).model_dump()
        verdict = "accepted" if approved else "rejected"
        odd = "" if candidate.odd_shapes in ("", "passed") else f" (odd shapes {candidate.odd_shapes})"
        candidate = candidate.model_copy(update={"verdict": verdict,
                                                 "message": f"won {', '.join(won)}: {change}{odd}"})
        lines.append(say("profiler", f"candidate {candidate.id} {verdict if approved else 'rejected by the person'} "
                                     f"at {len(won)} of {len(candidate.measurements)} shapes ({change})",
                         verdict=verdict, wins=list(won)))
        finished.append(candidate)
    records = [c.model_copy(update={"conversation": []}).model_dump() for c in finished]  # checkpoints stay small
    update = {"front": front, "history": records, "events": lines, "drafts": None, "candidate": None}
    update["best"] = holder({**state, "front": front, "history": state.get("history", []) + records}).model_dump()
    if profiles := nsight_profiles({**state, **update, "history": state.get("history", []) + records}, runtime.context):
        update["nsight"] = profiles
        lines += [say("profiler", f"Nsight Compute at {label} (candidate {p['candidate']}): {p['facts'] or p['message']}")
                  for label, p in profiles.items()]
    return update
