"""The agent as a LangGraph graph: state, context, routing, and the builder.

    from astra_kernels.graph import build_graph, RunContext
    app = build_graph().compile(checkpointer=...)
    app.invoke({"kernel": "silu_and_mul"}, context=RunContext(model="openai:o4-mini"))

The builder imports every node, and every node imports graph.state and graph.context, so this
package imports the builder only when `build_graph`, `graph` or `recursion_limit` is first asked
for: importing a node in a fresh interpreter must not start a cycle through here.
"""

from .context import RunContext
from .state import AgentInput, AgentOutput, AgentState, Candidate, Decision

__all__ = ["AgentInput", "AgentOutput", "AgentState", "Candidate", "Decision", "RunContext", "build_graph", "graph",
           "recursion_limit"]

_FROM_BUILDER = ("build_graph", "graph", "recursion_limit")


def __getattr__(name: str):
    if name in _FROM_BUILDER:
        from . import builder
        return getattr(builder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
