"""The agent as a LangGraph graph: routing, the builder, checkpoints, Studio's entry.

    from astra_kernels.graph import build_graph, RunContext
    app = build_graph().compile(checkpointer=...)
    app.invoke({"kernel": "silu_and_mul"}, context=RunContext(model="openai:o4-mini"))

The state and context schema are nodes/state.py and nodes/context.py: every node reads them, so
they sit below the nodes, and no node imports this package. They are named here too, as the
graph's schema.
"""

from astra_kernels.nodes.context import RunContext
from astra_kernels.nodes.state import AgentInput, AgentOutput, AgentState, Candidate, Decision

from .builder import build_graph, graph, recursion_limit

__all__ = ["AgentInput", "AgentOutput", "AgentState", "Candidate", "Decision", "RunContext", "build_graph", "graph",
           "recursion_limit"]
