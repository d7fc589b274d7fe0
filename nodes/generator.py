"""generator: the chat model rewrites the kernel directly (Astra's move).

It sees the best kernel so far, the measured facts, the planner's optimizations and, on a retry,
the compile log or the failing shape with its largest differences. Its answer must be a kernel
in the template format without parameters (so its launch geometry is explicit); one that does
not parse is a failed attempt with the parser's message, fed back on the next try.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate, Decision
from astra_kernels.kernels_sglang import suite
from astra_kernels.tools.errors import AstraError

from astra_kernels.nodes.shared.attempts import failed, feedback, next_id
from astra_kernels.nodes.shared.chat import ask_code, make_chat_model, prompt
from astra_kernels.nodes.shared.facts import describe
from astra_kernels.nodes.shared.measure import parse_candidate
from astra_kernels.nodes.shared.progress import say


def generate(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    model = make_chat_model(context)
    decision = Decision.model_validate(state["decision"])
    best = Candidate.model_validate(state["best"])
    spec = suite.load(state["kernel"]).spec
    configs = ("" if not best.configs else
               "It runs with these parameter values per shape (write them in as constants):\n"
               + "\n".join(f"- {label}: {config}" for label, config in best.configs.items()) + "\n")
    user = prompt("generator", symbols=", ".join(spec.symbols), source=best.source, configs=configs,
                  facts=describe(state), optimizations="\n".join(f"- {o}" for o in decision.optimizations) or "-",
                  feedback=feedback(state))
    candidate = Candidate(id=next_id(state), origin="rewrite", source="")
    try:
        code, words = ask_code(model, prompt("generator_system"), user)
        candidate = candidate.model_copy(update={"source": code, "rationale": words[:2000]})
        if parse_candidate(state["kernel"], code).parameters:
            candidate.rationale += " (its parameters run at their defaults)"
    except AstraError as exc:  # an unusable answer (MalformedAnswer), a template that does not parse
        return failed(state, candidate.model_copy(update={"verdict": "invalid", "message": str(exc)}), "generator")
    line = say("generator", f"candidate {candidate.id}: {candidate.rationale.splitlines()[0][:200] if candidate.rationale else 'a rewrite'}")
    return {"candidate": candidate.model_dump(), "events": [line]}
