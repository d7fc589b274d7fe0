"""A worker with no GPU behind it: it answers evaluations from a recorded results store.

Every number the project reports comes from a real GPU, but notebooks, LangGraph Studio, CI and
a laptop have none. A results store written by a GPU run (`astra tune`, `astra optimize`) holds
real measurements, each with its device and date; replaying it lets the tuner, the dispatch
table and the agent walk their whole logic anywhere. The store is consulted first by
`StoredEvaluator`, so what reaches this worker is exactly what the recording lacks: it is refused
with status "unrecorded", never estimated, and never written back as a measurement.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .errors import AstraError, WorkerError
from .evaluation import EvaluationRequest, EvaluationResult


class ReplayWorker:
    """Stands where an EvaluationWorker would; `device` is the recording's GPU."""

    def __init__(self, store_path: str | Path, device: str | None = None, recording: str | Path | None = None):
        """`recording` names where the store came from when `store_path` is a working copy of it."""
        self.store_path = Path(store_path)
        if not self.store_path.is_file():
            raise AstraError(f"no results store at {self.store_path} to replay")
        devices = self.recorded_devices(self.store_path)
        if not devices:
            raise AstraError(f"{self.store_path} holds no measurement to replay")
        if device is None and len(devices) > 1:
            raise AstraError(f"{self.store_path} holds measurements from {len(devices)} GPUs "
                             f"({', '.join(d for d, _ in devices)}); name one")
        chosen = [(d, a) for d, a in devices if device is None or d == device]
        if not chosen:
            raise AstraError(f"{self.store_path} has no measurement from {device!r}; it has "
                             + ", ".join(d for d, _ in devices))
        name, arch = chosen[0]
        # The recording does not hold the GPU's multiprocessor count: callers fall back to their
        # default (132, an H100 or H200), and a candidate whose launch depends on it differently
        # simply finds no record.
        self.device = {"name": name, "arch": arch, "replay": str(recording or self.store_path)}
        self.restarts = 0

    @staticmethod
    def recorded_devices(path: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return [tuple(r) for r in db.execute(
                "SELECT DISTINCT device, arch FROM results WHERE device != '' ORDER BY device")]

    def __enter__(self) -> "ReplayWorker":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def evaluate(self, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        return EvaluationResult(
            status="unrecorded", label=request.label, kernel=request.kernel, device=self.device["name"],
            arch=self.device["arch"], bytes_moved=request.problem.bytes_moved,
            message=f"{self.store_path} has no measurement of this candidate on {self.device['name']}; "
                    "a replay answers only what a GPU run recorded")

    def call(self, function, *args, timeout_s: float | None = None):
        raise WorkerError(f"a replay of {self.store_path} runs nothing on a GPU ({getattr(function, '__name__', function)})")
