"""The measured facts the planner and the model read, in words and numbers."""

from __future__ import annotations

from astra_kernels.graph.state import AgentState, Candidate


def describe(state: AgentState) -> str:
    baseline = Candidate.model_validate(state["baseline"])
    best = Candidate.model_validate(state["best"])
    base_times = baseline.times()
    lines = []
    for m in best.measurements:
        base = base_times.get(m.label)
        speedup = f", {base / m.median_us:.2f}x the baseline's {base:.2f} us" if base and m.median_us else ""
        fraction = f", {m.fraction_of_copy_bandwidth:.0%} of copy bandwidth" if m.fraction_of_copy_bandwidth else ""
        lines.append(f"- {m.label}: {m.median_us:.2f} us{fraction}{speedup}")
    lines.append(f"Best so far: candidate {best.id} ({best.origin}); registers {best.registers}, "
                 f"spills {'yes' if best.spills else 'no'}, {best.occupancy_blocks_per_sm} CTAs per SM.")
    return "\n".join(lines)


def tried(state: AgentState) -> str:
    lines = []
    for record in state.get("history", []):
        c = Candidate.model_validate(record)
        geo = c.geomean_us()
        lines.append(f"- candidate {c.id} ({c.origin}): {c.verdict}"
                     + (f", geometric mean {geo:.2f} us" if geo else "")
                     + (f": {c.message.splitlines()[0][:160]}" if c.message and c.verdict != "accepted" else ""))
    return "\n".join(lines) or "nothing yet"
