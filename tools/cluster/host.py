"""What runs inside each of the cluster's actors: the worker of one GPU.

An actor is placed on a node with a free GPU (Ray sets CUDA_VISIBLE_DEVICES to it, so it is
device 0 here) and starts an EvaluationWorker, whose child process owns the CUDA context: a
kernel that faults or hangs kills that child, never the actor, and the result says so as it does
locally. For a replay the actor holds the recordings instead (RecordedWorker), each answer the
recorded one. Either way the actor measures and answers; it never writes a results store (the
driver does: tools/cluster/pool.py).
"""

from __future__ import annotations

import os
import socket
import threading

from astra_kernels.tools.measuring.evaluation import EvaluationRequest, EvaluationResult
from astra_kernels.tools.measuring.replay import RecordedWorker, recorded_devices
from astra_kernels.tools.measuring.worker import EVALUATION_TIMEOUT_S, EvaluationWorker


class EvaluationHost:
    """One GPU's worker in one actor (made a Ray actor class by pool.py)."""

    def __init__(self, recordings: list[str] | None = None, device: str | None = None, pace: float = 0.0,
                 timeout_s: float = EVALUATION_TIMEOUT_S, environment: dict[str, str] | None = None):
        """`recordings`: answer from these (a replay) instead of the GPU; `environment`: variables
        the driver's kernels need here (ASTRA_KERNELS_PATH: the user's kernel folders)."""
        os.environ.update(environment or {})
        import ray

        self.where = {"host": socket.gethostname(), "gpu": ",".join(str(g) for g in ray.get_gpu_ids()) or "-",
                      "pid": os.getpid()}
        if recordings:  # those that hold `device` (all of them when it is None: each holds one GPU)
            held = [r for r in recordings if device is None or device in recorded_devices(r)]
            self.workers = [RecordedWorker(r, device=device, pace=pace) for r in held or recordings]
        else:
            self.workers = [EvaluationWorker(device_index=0, timeout_s=timeout_s)]
        for worker in self.workers:
            worker.start()
        # One request at a time through a worker's pipe: the actor runs two calls at once (an
        # evaluation and a prefetch), and their messages must not interleave.
        self._using = threading.Lock()
        self._prefetched = 0  # the number of the last list of draws ahead taken (prefetch)

    def describe(self) -> dict:
        """The GPU (name, arch, multiprocessors, ...) and where it is (host, gpu, pid)."""
        return {**self.workers[0].device, **self.where}

    def evaluate(self, request: EvaluationRequest) -> EvaluationResult:
        for worker in self.workers:
            with self._using:
                result = worker.evaluate(request)
            if result.status != "unrecorded":
                break
        else:
            if len(self.workers) > 1:  # the last one's message would name one recording of several
                names = ", ".join(w.device.get("replay", "?") for w in self.workers)
                result = result.model_copy(update={"message": f"none of the recordings this worker holds ({names}) "
                                                   f"has a measurement of this candidate on {result.device}; a "
                                                   "replay answers only what a GPU run recorded"})
        return result.model_copy(update={"host": self.where["host"], "gpu": self.where["gpu"]})

    def prefetch(self, items: list, number: int = 0) -> int:
        """Have this GPU's worker draw `items` ((problem, seed) pairs, in their order) on the host's
        other cores ahead of their evaluations (tools/measuring/draws.py), replacing the list it
        had; a list numbered below the last taken is dropped (the actor runs two calls at once, so
        two lists can arrive out of order); a replay draws nothing. Returns the drawing threads
        started (0 for a replay or a list dropped)."""
        from astra_kernels.tools.measuring import draws

        worker = self.workers[0]
        if not isinstance(worker, EvaluationWorker):
            return 0
        with self._using:  # after the evaluation in flight, if any: the child answers at once
            if number < self._prefetched:
                return 0
            self._prefetched = number
            return worker.call(draws.prefetch, items)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
