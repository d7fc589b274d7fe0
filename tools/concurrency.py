"""Work that waits on several GPUs at once, on threads of this process.

A cluster's driver (tools/cluster/) searches several shapes, and the agent tests several candidates,
at once: each call mostly waits for a worker's answer, so threads suffice. Each runs in a copy of
the caller's context variables, so what a LangGraph node's code reads from its context (the stream
that `say` writes to) is there on every thread.

A signal reaches only the main thread. Work on another thread (a LangGraph node's search in
`astra optimize`, a shape's search among several) learns of a stop at its next stop_point(), once
whoever took the signal has called request_stop().
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

_stopping = threading.Event()
# Where concurrent.futures reports a done-callback that raised. Once a stop is requested, the
# KeyboardInterrupt a node's thread raises reaches LangGraph's executor callbacks, which then try
# to schedule on a pool already shut down: two tracebacks through this logger (Python's last-resort
# handler, stderr) under the run's own "interrupted" (`astra optimize` in CI, 2026-11-28, now and then:
# a race). Taken here, at import, so a signal handler only sets an attribute.
_CALLBACK_LOG = logging.getLogger("concurrent.futures")


def request_stop() -> None:
    """Ask every thread of this process to stop at its next stop_point(): for a signal handler
    (Ctrl-C, SIGTERM), which runs in the main thread while the work may run in another that the
    main thread waits for (LangGraph's runner waits for its node's thread before the interrupt can
    leave: `astra optimize` took the rest of its search, 44-49 s, to stop). Only sets a flag (and
    quiets the executors' callback reports until clear_stop), so it is safe in a handler."""
    _stopping.set()
    _CALLBACK_LOG.disabled = True


def clear_stop() -> None:
    """The stop is handled (the command has returned); a process that goes on (a test's, a
    notebook's) searches again."""
    _stopping.clear()
    _CALLBACK_LOG.disabled = False


def stop_point() -> None:
    """Raise KeyboardInterrupt on a thread other than the main one when a stop was requested; for
    loops that may run on such a thread, called between evaluations. The main thread has the
    signal's own exception already, and raising again there would cut its clean-up short."""
    if _stopping.is_set() and threading.current_thread() is not threading.main_thread():
        raise KeyboardInterrupt()


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
