"""Where measurements come from: this machine's GPU, or a recording of one. Decided here only.

The CLI (`astra tune`, `astra optimize`), the agent's nodes and the notebooks all open their
evaluator with `open_evaluator`, so "measure on this GPU or replay a recording" has one owner.
A replay answers from a working copy of a recorded results store (the recording itself is never
written) and refuses what the recording lacks rather than estimating it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from astra_kernels.suite import recordings
from astra_kernels.tools.errors import NoGpuError
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
