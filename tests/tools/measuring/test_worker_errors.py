"""A compiler that cannot run is the run's error, named, never a candidate's result: evaluate()
marks it toolchain_error, and the worker raises it instead of returning a row to store or print."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_kernels.tools.errors import ToolchainError, WorkerError
from astra_kernels.tools.measuring import evaluation
from astra_kernels.tools.measuring.evaluation import EvaluationResult, evaluate
from astra_kernels.tools.measuring.worker import EvaluationWorker
from support import faulty


def test_a_toolchain_failure_is_marked_as_such_not_as_an_invalid_candidate(monkeypatch):
    def broken(*_args, **_kw):
        raise ToolchainError("the compiler process died while starting (exit code 1)")

    monkeypatch.setattr(evaluation, "compile_source", broken)
    device = SimpleNamespace(properties=SimpleNamespace(name="no device needed", arch="sm_90"))
    result = evaluate(device, faulty.scale_request(0), compile_timeout_s=30)
    assert result.status == "toolchain_error" and "died while starting" in result.message


class _Answering:
    """The parent's end of the worker's pipe, answering with one prepared result."""

    def __init__(self, result: EvaluationResult):
        self.result = result

    def send(self, _message) -> None:
        pass

    def poll(self, _timeout) -> bool:
        return True

    def recv(self) -> EvaluationResult:
        return self.result


def _worker_answering(result: EvaluationResult) -> EvaluationWorker:
    worker = EvaluationWorker()
    worker._process = SimpleNamespace(is_alive=lambda: True)
    worker._conn = _Answering(result)
    worker.device = {"name": "scripted", "arch": "sm_90"}
    return worker


def test_the_worker_raises_a_toolchain_error_naming_why():
    worker = _worker_answering(EvaluationResult(status="toolchain_error", message="cannot load NVRTC"))
    with pytest.raises(WorkerError, match="cannot compile: cannot load NVRTC"):
        worker.evaluate(faulty.scale_request(0))


def test_the_worker_returns_a_candidate_s_own_failure():
    worker = _worker_answering(EvaluationResult(status="compile_error", message="line 3: expected a ;"))
    assert worker.evaluate(faulty.scale_request(0)).status == "compile_error"
