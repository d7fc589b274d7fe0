"""Running one thread of the graph to its end: the stream, the interrupts, the resume.

`astra optimize` and the agent notebook both run a thread this way, so a checkpoint is written
the same way (durability="sync": each step's checkpoint is on disk before the next step starts,
so a killed run loses at most the step in flight) and a question the graph asks (`--approve`) is
answered the same way, whoever asks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.types import Command


def run_thread(app, payload: dict | None, *, config: dict, context, on_event: Callable[[dict], None] | None = None,
               on_update: Callable[[dict], None] | None = None, answer: Callable[[dict], Any] | None = None,
               interrupt_after: list[str] | None = None) -> dict:
    """Stream `payload` (None: resume the thread from its last checkpoint) through the compiled
    graph `app` until it ends, and return the thread's final state values.

    `on_event` gets each progress event the nodes write ({"node", "message"}), `on_update` each
    node's state update. When the graph asks a question (an interrupt), `answer` gets its value
    and its return resumes the run; without `answer` the run stops there, resumable later, as it
    does after a node named in `interrupt_after`."""
    while True:
        for mode, chunk in app.stream(payload, config=config, context=context, stream_mode=["custom", "updates"],
                                      durability="sync", interrupt_after=interrupt_after):
            if mode == "custom" and on_event is not None:
                on_event(chunk)
            elif mode == "updates" and on_update is not None:
                on_update(chunk)
        pending = app.get_state(config).interrupts
        if not pending or answer is None:
            return app.get_state(config).values
        payload = Command(resume=answer(pending[0].value))
