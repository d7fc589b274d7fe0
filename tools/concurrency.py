"""Work that waits on several GPUs at once, on threads of this process.

A cluster's driver (tools/cluster/) searches several shapes, and the agent tests several candidates,
at once: each call mostly waits for a worker's answer, so threads suffice. Each runs in a copy of
the caller's context variables, so what a LangGraph node's code reads from its context (the stream
that `say` writes to) is there on every thread.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


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


class SmallestFirst:
    """One holder at a time; of the threads waiting, the one with the least work goes next.

    For work that fills every core by itself (a space's compiles on a cluster's CPUs): run side by
    side, several jobs all finish near the end of their sum; one after another, each is done after
    its own share, and the smallest first are done soonest, so what waits on them starts earliest.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = False
        self._waiting: list[tuple[int, int]] = []  # (size, arrival) heap: ties go in arrival order
        self._arrivals = itertools.count()

    @contextmanager
    def __call__(self, size: int) -> Iterator[None]:
        ticket = (size, next(self._arrivals))
        with self._changed:
            heapq.heappush(self._waiting, ticket)
            try:
                while self._held or self._waiting[0] != ticket:
                    self._changed.wait()
            except BaseException:  # interrupted while waiting: leave the queue to the others
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
                self._changed.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._held = True
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()
