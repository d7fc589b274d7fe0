"""templater: the chat model refactors the kernel into a template (the two-stage tuner's move).

It is shown the kernel that holds the most shapes, the template the tuner searched last with the
configurations it found and how its space was pruned, and the facts. The answer is parsed
(undefined names, empty spaces and malformed constraints are errors naming the line) and its
default configuration compiled at the first shape before it becomes the template the tuner
searches next. A failure, here or a search in which no configuration was correct at some
shape (with sample errors), is asked to be fixed in the same conversation. That compile runs
in a child process under a deadline: the model's code may take NVRTC forever (constexpr
loops), and the agent must not hang on it.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentState, Candidate, Decision, next_candidate_id
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError, CompileError
from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S
from astra_kernels.tools.templating.template import Exclusion
from astra_kernels.tools.toolchain.compiler import compile_source

from astra_kernels.nodes.shared.attempts import failed, holder, lessons_text, repair_messages, template_key
from astra_kernels.nodes.shared.chat import BudgetSpent, ask_code, from_messages, prompt, role_asker
from astra_kernels.nodes.shared.facts import model_facts
from astra_kernels.nodes.shared.measure import parse_candidate
from astra_kernels.nodes.shared.progress import say


def searched(state: AgentState) -> str:
    """The template searched last, what the search found per shape and how its space was pruned."""
    tuning = state.get("tuning")
    if not tuning or tuning.get("source_key") != template_key(state["template"]):
        return "The current template (not searched yet in this run):\n```cuda\n" + state["template"] + "```\n"
    configs = "\n".join(f"- {label}: {config}" for label, config in tuning["configs"].items())
    return (f"The template the tuner searched last:\n```cuda\n{state['template']}```\n"
            f"The best configuration it found per shape:\n{configs}\nIts space per shape:\n{tuning['space']}\n")


def templatize(state: AgentState, runtime: Runtime[RunContext]) -> dict:
    context = runtime.context
    asker = role_asker(context, "coder", state, "templater")
    decision = Decision.model_validate(state["decision"])
    folder = suite.load(state["kernel"])
    previous = state.get("candidate")
    if previous and previous.get("conversation") and previous["verdict"] in ("invalid", "compile_error", "incorrect"):
        messages = repair_messages(Candidate.model_validate(previous))
    else:
        best = holder(state)
        user = prompt("templater", format=(suite.SUITE_DIR / "FORMAT.md").read_text(), source=best.source,
                      searched=searched(state), facts=model_facts(state), lessons=lessons_text(state),
                      optimizations="\n".join(f"- {o}" for o in decision.optimizations) or "-")
        messages = [SystemMessage(prompt("generator_system")), HumanMessage(user)]
    candidate = Candidate(id=next_candidate_id(state), origin="template", source="", idea=decision.optimizations,
                          conversation=from_messages(messages))
    try:
        code, words, conversation = ask_code(asker, messages)
        candidate = candidate.model_copy(update={"source": code, "rationale": words[:2000],
                                                 "conversation": from_messages(conversation)})
        template = parse_candidate(state["kernel"], code)
        if not template.parameters:
            raise AstraError("the template declares no //@ param: there is nothing to search")
        shape = state["shapes"][0]
        env = suite.environment(folder.spec, shape, state["dtype"], "default")
        instance = template.instantiate(template.default, env)
        if isinstance(instance, Exclusion):
            raise AstraError(f"the default configuration is excluded at {folder.spec.label(shape)}: {instance.reason}")
        options = instance.compile_options(suite.base_options(state["dtype"], folder.spec.variants["default"], None))
        compile_source(template.code, options, timeout_s=COMPILE_TIMEOUT_S)  # what the tuner's requests compile
    except CompileError as exc:
        return {**failed(state, candidate.model_copy(update={"verdict": "compile_error", "message": str(exc)}),
                         "templater"), "calls": asker.calls}
    except AstraError as exc:  # an unusable answer, a malformed template, an excluded default
        if getattr(exc, "conversation", None):
            candidate = candidate.model_copy(update={"conversation": from_messages(exc.conversation)})
        update = failed(state, candidate.model_copy(update={"verdict": "invalid", "message": str(exc)}), "templater")
        if isinstance(exc, BudgetSpent):  # no repair could be asked either: back to the planner
            update["failed_attempts"] = context.fixes + 1
        return {**update, "calls": asker.calls}
    candidate = candidate.model_copy(update={"verdict": "passed"})
    line = say("templater", f"candidate {candidate.id}: a template of {len(template.parameters)} parameters, "
                            f"{template.size()} configurations before constraints")
    return {"candidate": candidate.model_dump(), "template": code, "events": [line], "calls": asker.calls}
