"""Work that waits on several GPUs at once, on threads of this process.

A cluster's driver (tools/cluster/) searches several shapes, and the agent tests several candidates,
at once: each call mostly waits for a worker's answer, so threads suffice. Each runs in a copy of
the caller's context variables, so what a LangGraph node's code reads from its context (the stream
that `say` writes to) is there on every thread.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor


def map_in_threads(function: Callable, items: Iterable, parallel: int) -> list:
    """`function` over `items`, results in their order: up to `parallel` at a time on threads, or
    one after another on this thread when `parallel` is 1 (or there is one item)."""
    items = list(items)
    if parallel <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=min(parallel, len(items)), thread_name_prefix="astra") as threads:
        return list(threads.map(lambda pair: pair[0].run(function, pair[1]), zip(contexts, items)))
