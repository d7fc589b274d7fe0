"""Where measurements come from: this machine's GPU, or a recording of one. Decided here only.

The CLI (`astra tune`, `astra optimize`), the agent's nodes and the notebooks all open their
evaluator with `open_evaluator`, so "measure on this GPU or replay a recording" has one owner.
A replay answers from a working copy of a recorded results store (the recording itself is never
written) and refuses what the recording lacks rather than estimating it. The agent's runs borrow
their evaluators and results stores from an EvaluatorSession (the context's, else this process's),
so a server running many graphs starts one worker per GPU and a resumed thread finds its store.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from pathlib import Path
from typing import Literal

from astra_kernels.suite import recordings
from astra_kernels.tools.errors import AstraError, NoGpuError
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.measuring.replay import ReplayWorker
from astra_kernels.tools.measuring.worker import EVALUATION_TIMEOUT_S, EvaluationWorker
from astra_kernels.tools.toolchain.driver import gpu_available

RECORDED = recordings.PREFIX  # `replay="recorded"`: the newest recording shipped for the kernel


def open_evaluator(kernel: str, results: str | Path, *, replay: str | Path | None = None, gpu: int = 0,
                   timeout_s: float = EVALUATION_TIMEOUT_S, without_gpu: Literal["error", "replay"] = "error",
                   needs: str = "this measures kernels, so it needs an NVIDIA GPU") -> EvaluationWorker | ReplayWorker:
    """An evaluator for `kernel`, not yet started (use it as a context manager, or `start()` it).

    `replay`: a results store to answer from (`recorded`, `recorded:SESSION` or a path); its
    working copy is `results`. Without it, the GPU `gpu` of this machine. Where there is no GPU,
    `without_gpu="replay"` replays the kernel's shipped recording (the notebooks run anywhere),
    and "error" raises NoGpuError whose message is `needs`."""
    if replay is not None:
        return ReplayWorker.from_recording(recordings.resolve(str(replay), kernel), results)
    if gpu_available():
        return EvaluationWorker(device_index=gpu, timeout_s=timeout_s)
    if without_gpu == "replay":
        return ReplayWorker.from_recording(recordings.resolve(RECORDED, kernel), results)
    raise NoGpuError(needs)


def replayed(evaluator) -> bool:
    """Whether the evaluator answers from a recording (which cannot measure anything new)."""
    return "replay" in (getattr(evaluator, "device", None) or {})


def provenance(evaluator) -> str:
    """Where an evaluator's answers come from, in words: for a line a user reads first."""
    if replayed(evaluator):
        device = evaluator.device
        recording = Path(device["replay"])
        return f"replaying {recording.parent.name}/{recording.name} ({device['name']})"
    return f"measuring on the local GPU {getattr(evaluator, 'device_index', 0)}"


class EvaluatorSession:
    """The evaluators and results stores that runs share, opened on first use and closed together:
    this machine's worker per GPU (started once: its CUDA context and compile cache stay warm from
    run to run), a replay per working copy (copied from its recording once; a resumed run reuses
    it), a results store per path. A server runs graphs on several threads at once, hence the lock.
    Use it as a context manager, or pass it as RunContext.session; runs given none share the
    process's (`process_session`), closed when the process exits."""

    def __init__(self) -> None:
        self._workers: dict[int, EvaluationWorker] = {}
        self._stores: dict[str, ResultsStore] = {}
        self._replays: dict[str, tuple[Path, ReplayWorker]] = {}  # results path: (recording, its replay)
        self._lock = threading.RLock()

    def worker(self, kernel: str, results: str, gpu: int, needs: str) -> EvaluationWorker:
        """This machine's started worker on GPU `gpu` (NoGpuError, saying `needs`, without one)."""
        with self._lock:
            if gpu not in self._workers:
                worker = open_evaluator(kernel, results, gpu=gpu, needs=needs)
                worker.start()
                self._workers[gpu] = worker
            return self._workers[gpu]

    def replay(self, kernel: str, results: str, replay: str) -> ReplayWorker:
        """The replay of `replay` (for `kernel`) whose working copy is `results`. Another recording
        is refused that path rather than replacing a store an open connection or a concurrent run
        is reading, as is a path that is already a store of runs on another evaluator."""
        recording = recordings.resolve(replay, kernel).resolve()
        with self._lock:
            if results in self._replays:
                held, worker = self._replays[results]
                if held != recording:
                    raise AstraError(f"{results} is this process's working copy of {held}; replaying "
                                     f"{recording} needs another results path")
                return worker
            if results in self._stores:
                raise AstraError(f"{results} is already this process's store of runs with another "
                                 f"evaluator; replaying {recording} needs another results path")
            self._claim(results, "replay")
            worker = open_evaluator(kernel, results, replay=recording)
            self._replays[results] = (recording, worker)
            return worker

    def store(self, results: str) -> ResultsStore:
        """The results store at `results`, opened once."""
        with self._lock:
            if results not in self._stores:
                self._claim(results, "store")
                self._stores[results] = ResultsStore(results)
            return self._stores[results]

    def _claim(self, results: str, how: str) -> None:
        """Mark `results` as this session's replay working copy or store. A replay's copy is made by
        replacing the file, so no other session of the process may use that path while this one
        does, as a replay or as a store (two stores of one path are two SQLite connections: safe)."""
        key = str(Path(results).resolve())
        with _CLAIMS_LOCK:
            held = [(ref, kind) for ref, kind in _CLAIMS.get(key, []) if ref() is not None]
            for ref, kind in held:
                if ref() is not self and "replay" in (how, kind):
                    raise AstraError(f"{results} is the {'working copy of a replay' if kind == 'replay' else 'results store'}"
                                     " of another evaluator session of this process; give this run another results path")
            _CLAIMS[key] = [*held, (weakref.ref(self), how)]

    def close(self) -> None:
        """Close every worker, replay and store it opened; it may be used again after."""
        with self._lock:
            opened = [*self._workers.values(), *(w for _, w in self._replays.values()), *self._stores.values()]
            self._workers, self._replays, self._stores = {}, {}, {}
        with _CLAIMS_LOCK:
            for key in list(_CLAIMS):
                _CLAIMS[key] = [(ref, kind) for ref, kind in _CLAIMS[key] if ref() not in (None, self)]
                if not _CLAIMS[key]:
                    del _CLAIMS[key]
        for thing in opened:
            thing.close()

    def __enter__(self) -> EvaluatorSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# A results path (resolved): the sessions using it, and how ("replay" or "store"); see _claim.
_CLAIMS: dict[str, list[tuple[weakref.ref, str]]] = {}
_CLAIMS_LOCK = threading.Lock()
_PROCESS_SESSION: EvaluatorSession | None = None
_PROCESS_LOCK = threading.Lock()


def process_session() -> EvaluatorSession:
    """The session of runs given none: one per process, closed at its exit."""
    global _PROCESS_SESSION
    with _PROCESS_LOCK:
        if _PROCESS_SESSION is None:
            _PROCESS_SESSION = EvaluatorSession()
            atexit.register(_PROCESS_SESSION.close)
        return _PROCESS_SESSION
