"""NVRTC compiles as Ray tasks on any node's CPUs.

compile_many (tools/toolchain/compiler.py) sends the compiles its cache cannot answer to the
executor `compiling_with` names; this one makes each a task of one CPU, anywhere in the cluster,
and hands back a concurrent.futures.Future of its outcome. The driver keeps every module that
comes back in its own compile cache.
"""

from __future__ import annotations

import concurrent.futures as futures
from collections.abc import Callable

from .runtime import ray_module


class RayCompileExecutor(futures.Executor):
    def __init__(self):
        self._ray = ray_module()
        self._remote: dict[Callable, object] = {}

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        if fn not in self._remote:
            self._remote[fn] = self._ray.remote(fn).options(num_cpus=1, max_retries=2)
        ref = self._remote[fn].remote(*args, **kwargs)
        future = ref.future()
        ray = self._ray

        def cancel_task(done: futures.Future) -> None:
            if done.cancelled():
                ray.cancel(ref, force=True)

        future.add_done_callback(cancel_task)
        return future
