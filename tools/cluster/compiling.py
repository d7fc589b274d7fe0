"""NVRTC compiles as Ray tasks on any node's CPUs.

compile_many (tools/toolchain/compiler.py) sends the compiles its cache cannot answer to the
executor `compiling_with` names; this one makes each a task of one CPU, anywhere in the cluster,
and hands back a concurrent.futures.Future of its outcome. The driver keeps every module that
comes back in its own compile cache. A compile error is an outcome, as it is locally; a task that
raised (the toolchain cannot run on that node) or died raises a one-line ToolchainError.
"""

from __future__ import annotations

import concurrent.futures as futures
import threading
from collections.abc import Callable

from astra_kernels.tools.errors import AstraError, ToolchainError
from .runtime import ray_module


class RayCompileExecutor(futures.Executor):
    def __init__(self):
        self._ray = ray_module()
        self._remote: dict[Callable, object] = {}
        self._lock = threading.Lock()
        self._pending: set[futures.Future] = set()
        self._closed = False

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No compile is waited for: each still pending fails at once (its task is cancelled), so
        that no thread waits on a cluster that is going away."""
        with self._lock:
            self._closed, pending = True, list(self._pending)
        for answer in pending:
            if not answer.done():
                try:
                    answer.set_exception(ToolchainError("the cluster's compiles were stopped"))
                except futures.InvalidStateError:
                    pass

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        ray = self._ray
        with self._lock:
            if self._closed:
                raise ToolchainError("the cluster's compiles were stopped")
            if fn not in self._remote:
                self._remote[fn] = ray.remote(fn).options(num_cpus=1, max_retries=2)
            remote = self._remote[fn]
        ref = remote.remote(*args, **kwargs)
        answer: futures.Future = futures.Future()
        with self._lock:
            self._pending.add(answer)

        def settle(done: futures.Future) -> None:
            with self._lock:
                self._pending.discard(answer)
            if answer.done():
                return
            try:
                outcome = done.result()
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                answer.set_exception(cause if isinstance(cause, AstraError) else ToolchainError(
                    f"a compile task failed on the cluster: {type(cause).__name__}: {_line(cause)}"))
            except BaseException as exc:  # the task's worker or node died, the cluster went away
                answer.set_exception(ToolchainError(f"a compile task was lost on the cluster: "
                                                    f"{type(exc).__name__}: {_line(exc)}"))
            else:
                answer.set_result(outcome)

        def cancel_task(done: futures.Future) -> None:
            if done.cancelled():
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass

        answer.add_done_callback(cancel_task)
        ref.future().add_done_callback(settle)
        return answer


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
