"""The one factory that wires the agent: nodes, edges, routing, schemas.

`build_graph()` returns the uncompiled StateGraph (to compile with a checkpointer, or to embed
as a subgraph); `graph` is it compiled without a checkpointer, which is what LangGraph Studio
loads (langgraph.json points here; the server brings its own persistence).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from astra_kernels.nodes.generator import generate
from astra_kernels.nodes.loader import load
from astra_kernels.nodes.planner import plan
from astra_kernels.nodes.profiler import profile
from astra_kernels.nodes.reporter import report
from astra_kernels.nodes.templater import templatize
from astra_kernels.nodes.tester import test
from astra_kernels.nodes.tuner import tune

from . import routing
from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentInput, AgentOutput, AgentState


def build_graph(context_schema: type[RunContext] = RunContext) -> StateGraph:
    """The agent's graph; `context_schema` is RunContext, or StudioContext for a served graph (studio.py)."""
    builder = StateGraph(AgentState, context_schema=context_schema, input_schema=AgentInput, output_schema=AgentOutput)
    builder.add_node("load", load)
    builder.add_node("planner", plan)
    builder.add_node("generator", generate)
    builder.add_node("templater", templatize)
    builder.add_node("tester", test)
    builder.add_node("profiler", profile)
    builder.add_node("tuner", tune)
    builder.add_node("reporter", report)
    builder.add_edge(START, "load")
    builder.add_conditional_edges("load", routing.after_load)
    builder.add_conditional_edges("planner", routing.after_planner, ["generator", "templater", "tuner", "reporter"])
    builder.add_edge("generator", "tester")
    builder.add_conditional_edges("templater", routing.after_templater)
    builder.add_conditional_edges("tester", routing.after_tester, ["generator", "profiler"])
    builder.add_conditional_edges("tuner", routing.after_tuner)
    builder.add_edge("profiler", "planner")
    builder.add_edge("reporter", END)
    return builder


def recursion_limit(context: RunContext) -> int:
    """Steps a run can take at most: every round may repair its candidates `fixes` times (the
    parallel branches of a round count as one step) and a template as often again after its tuning."""
    return 8 + context.rounds * (4 * (context.fixes + 1) + 3)


graph = build_graph().compile()
