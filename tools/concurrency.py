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
    one after another on this thread when `parallel` is 1 (or there is one item).

    The first exception (a Ctrl-C in this thread included) is raised at once: what has not started
    is cancelled and nothing waits for what runs, which the caller stops by closing what it waits
    on (tools/cluster/pool.py's close makes every waiting evaluation raise)."""
    items = list(items)
    if parallel <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    threads = ThreadPoolExecutor(max_workers=min(parallel, len(items)), thread_name_prefix="astra")
    try:
        jobs = [threads.submit(contextvars.copy_context().run, function, item) for item in items]
        results = [job.result() for job in jobs]
    except BaseException:
        threads.shutdown(wait=False, cancel_futures=True)
        raise
    threads.shutdown(wait=True)
    return results
