"""The graph LangGraph Studio serves (langgraph.json points at this file).

The server loads this file by path, not as part of the package, so it imports absolutely from
the installed package; `langgraph dev` installs it from the repository (dependencies: ["."]).
"""

from astra_kernels.graph.builder import graph

__all__ = ["graph"]
