"""templater: the chat model refactors the kernel into a template (the two-stage tuner's move).

The answer is parsed (undefined names, empty spaces and malformed constraints are errors naming
the line) and its default configuration compiled at the first shape before it is accepted as the
template the tuner searches next; a failure is fed back on the next try. That compile runs
in a child process under a deadline: the model's code may take NVRTC forever (constexpr loops),
and the agent must not hang on it.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from astra_kernels.graph.context import RunContext
from astra_kernels.graph.state import AgentState, Candidate, Decision
from astra_kernels.kernels_sglang import suite
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.errors import AstraError, CompileError
from astra_kernels.tools.templating.template import Exclusion

from astra_kernels.nodes.shared.chat import ask_code, make_chat_model, prompt
from astra_kernels.nodes.shared.facts import describe
from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S
from astra_kernels.nodes.shared.attempts import failed, feedback, next_id
from astra_kernels.nodes.shared.measure import parse_candidate
from astra_kernels.nodes.shared.progress import say



def templatize(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    model = make_chat_model(context)
    decision = Decision.model_validate(state["decision"])
    best = Candidate.model_validate(state["best"])
    folder = suite.load(state["kernel"])
    user = prompt("templater", format=(suite.SUITE_DIR / "FORMAT.md").read_text(), source=best.source,
                  facts=describe(state), optimizations="\n".join(f"- {o}" for o in decision.optimizations) or "-",
                  feedback=feedback(state))
    candidate = Candidate(id=next_id(state), origin="template", source="")
    try:
        code, words = ask_code(model, prompt("generator_system"), user)
        candidate = candidate.model_copy(update={"source": code, "rationale": words[:2000]})
        template = parse_candidate(state["kernel"], code)
        if not template.parameters:
            raise AstraError("the template declares no //@ param: there is nothing to search")
        shape = state["shapes"][0]
        env = suite.environment(folder.spec, shape, state["dtype"], "default")
        instance = template.instantiate(template.default, env)
        if isinstance(instance, Exclusion):
            raise AstraError(f"the default configuration is excluded at {folder.spec.label(shape)}: {instance.reason}")
        options = instance.compile_options(suite.base_options(state["dtype"], folder.spec.variants["default"], None))
        compile_source(code, options, timeout_s=COMPILE_TIMEOUT_S)
    except CompileError as exc:
        return failed(state, candidate.model_copy(update={"verdict": "compile_error", "message": str(exc)}), "templater")
    except AstraError as exc:  # an unusable answer, a malformed template, an excluded default
        return failed(state, candidate.model_copy(update={"verdict": "invalid", "message": str(exc)}), "templater")
    candidate = candidate.model_copy(update={"verdict": "passed"})
    line = say("templater", f"candidate {candidate.id}: a template of {len(template.parameters)} parameters, "
                            f"{template.size()} configurations before constraints")
    return {"candidate": candidate.model_dump(), "template": code, "events": [line]}
