"""The graph LangGraph Studio serves (langgraph.json points at this file).

The server loads this file by path, not as part of the package, so it imports absolutely from
the installed package; `langgraph dev` installs it from the repository (dependencies: ["."]).
Any client of the server sets the context, so it is a StudioContext: paths under the server's
working root, a known replay, a model server on this machine (nodes/context.py, docs/studio.md).
"""

from astra_kernels.graph.builder import build_graph
from astra_kernels.nodes.context import StudioContext

graph = build_graph(StudioContext).compile()

__all__ = ["graph"]
