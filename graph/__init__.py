"""The agent as a LangGraph graph: state, context, routing, and the builder.

    from astra_kernels.graph import build_graph, RunContext
    app = build_graph().compile(checkpointer=...)
    app.invoke({"kernel": "silu_and_mul"}, context=RunContext(model="openai:o4-mini"))
"""

from .builder import build_graph, graph, recursion_limit
from .context import RunContext
from .state import AgentInput, AgentOutput, AgentState, Candidate, Decision

__all__ = ["AgentInput", "AgentOutput", "AgentState", "Candidate", "Decision", "RunContext", "build_graph", "graph",
           "recursion_limit"]
