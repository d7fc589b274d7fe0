"""Progress as custom stream events: the CLI, notebooks and LangGraph Studio all show them.

A node calls `say(node, message, **data)`: the event goes to LangGraph's custom stream (stream
mode "custom") when the graph is streamed, and the returned line goes into the state's `events`,
which the reporter turns into the run's story.
"""

from __future__ import annotations

from langgraph.config import get_stream_writer


def say(node: str, message: str, **data) -> str:
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (a unit test of one node)
        writer = None
    if writer is not None:
        writer({"node": node, "message": message, **data})
    return f"{node}: {message}"
