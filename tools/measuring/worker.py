"""The evaluation worker: a child process that owns the CUDA context and runs candidates.

Generated kernels fault and hang. An illegal address makes the context unusable and a hung kernel
never returns, so neither may happen in the process that holds the search's state. The parent
sends a request down a pipe and waits with a deadline; a dead or silent child is killed, the
candidate is recorded as crashed or timed out with the reason, and the next request gets a
fresh child.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from astra_kernels.tools.errors import NoGpuError, WorkerError
from astra_kernels.tools.toolchain.processes import die_with_parent, interrupts_blocked
from .evaluation import EvaluationRequest, EvaluationResult

_READY = "ready"

EVALUATION_TIMEOUT_S = 300.0  # one evaluation (compile, checks, timing) before the worker is replaced
COMPILE_TIMEOUT_S = EVALUATION_TIMEOUT_S / 2  # a compile that never ends is named before the evaluation times out


@dataclass(frozen=True)
class _Call:
    """Any GPU work other than an evaluation (a framework peer's timing, say): `function(device,
    *args)` runs in the worker, beside the context it shares, and its picklable result comes back."""

    function: Callable
    args: tuple


@dataclass(frozen=True)
class _Evaluation:
    """An evaluation and the compile deadline it runs under (not part of the request, whose
    fields key the results store)."""

    request: EvaluationRequest
    compile_timeout_s: float | None


def _serve(conn, device_index: int, parent_pid: int | None = None) -> None:
    """Child side: open the device, say so, then answer requests until told to stop. Dies with
    its parent (processes.py), so a SIGKILLed `astra` leaves no worker holding the GPU (or hung
    in a kernel for ever). Linux ties that to the thread that started the worker: one restarted
    in a LangGraph thread goes when that run of the graph ends, and the next request, finding
    it gone, starts another before sending anything."""
    die_with_parent(parent_pid)
    try:
        from astra_kernels.tools.toolchain.device import Device

        device = Device(device_index)
    except Exception as exc:  # NoGpuError and driver failures alike go back as text
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    props = device.properties
    conn.send((_READY, {"name": props.name, "arch": props.arch, "pid": os.getpid(),
                        "multiprocessors": props.multiprocessors,
                        "max_shared_per_block_optin": props.max_shared_per_block_optin}))
    from .evaluation import evaluate

    while True:
        try:
            request = conn.recv()
        except (EOFError, KeyboardInterrupt):
            # The parent gone (a notebook's kernel restarted): end quietly. Ctrl-C itself is held
            # back from this child (EvaluationWorker.start); the parent, interrupted while waiting
            # on it, kills it (_interrupted), so no late answer can be read as the next one's.
            return
        if request is None:
            return
        if isinstance(request, _Call):
            try:
                conn.send(("ok", request.function(device, *request.args)))
            except Exception as exc:  # the caller gets the reason; the context may still be fine
                conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"))
            continue
        result = evaluate(device, request.request, compile_timeout_s=request.compile_timeout_s)
        conn.send(result)
        if result.fatal:
            return


class NothingToStart:
    """The lifecycle of an EvaluationWorker, for a worker with no process of its own to start or
    stop (a replay, a view of a cluster's workers): usable as a context manager all the same."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


class EvaluationWorker:
    """Parent side. `evaluate` always returns a result; only a missing GPU raises."""

    def __init__(self, device_index: int = 0, timeout_s: float = EVALUATION_TIMEOUT_S, start_timeout_s: float = 120.0,
                 compile_timeout_s: float | None = None):
        """`compile_timeout_s`: how long NVRTC may take for one candidate before its process is
        killed and the candidate recorded as compile_timeout, the worker kept; None gives half of
        each evaluation's deadline, so that a compile that never ends is named as such before
        the whole evaluation times out."""
        if compile_timeout_s is not None and compile_timeout_s <= 0:
            raise ValueError(f"compile_timeout_s must be positive, not {compile_timeout_s}")
        self.device_index = device_index
        self.host = socket.gethostname()  # recorded with each result: where it was measured
        self.timeout_s = timeout_s
        self.compile_timeout_s = compile_timeout_s
        self.start_timeout_s = start_timeout_s
        self._process = None
        self._conn = None
        self.device: dict | None = None
        self.restarts = 0

    def __enter__(self) -> "EvaluationWorker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        # spawn, never fork: a CUDA context does not survive fork, and the child must start clean.
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, self.device_index, os.getpid()), daemon=True)
        with interrupts_blocked(multiprocessing=True):  # Ctrl-C and SIGTERM are the parent's to answer
            process.start()
        child.close()
        try:
            started = parent.poll(self.start_timeout_s)
        except KeyboardInterrupt:  # Ctrl-C while the worker opens the device: not kept, so killed
            process.kill()
            raise
        if not started:
            process.kill()
            raise WorkerError(f"the evaluation worker did not start within {self.start_timeout_s:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            process.join(5)
            raise WorkerError(f"the evaluation worker died while starting (exit code {process.exitcode})") from None
        if kind != _READY:
            process.join(5)
            raise NoGpuError(f"cannot evaluate kernels here: {payload}")
        self._process, self._conn, self.device = process, parent, payload

    def _replace(self) -> None:
        """Drop a worker whose context can no longer be trusted; the next request starts another."""
        self._discard()
        self.restarts += 1

    def _interrupted(self) -> None:
        """Ctrl-C or SIGTERM while the worker runs a request: kill it now rather than let close()
        wait out the request (a kernel's checks and timing take seconds), and so that its late
        answer cannot be read as the next request's. The next request starts a fresh worker."""
        with interrupts_blocked():
            self._discard()

    def _discard(self) -> None:
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(10)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def evaluate(self, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        """Run one request in the worker; a crash or a timeout is a result, and the worker is replaced."""
        if self._process is None or not self._process.is_alive():
            self._discard()
            self.start()
        deadline = timeout_s if timeout_s is not None else self.timeout_s
        started = time.perf_counter()
        base = dict(label=request.label, kernel=request.kernel,
                    device=self.device["name"], arch=self.device["arch"],
                    bytes_moved=request.problem.bytes_moved, host=self.host, gpu=str(self.device_index))
        compile_timeout = self.compile_timeout_s if self.compile_timeout_s is not None else deadline / 2
        try:
            self._conn.send(_Evaluation(request, min(compile_timeout, deadline)))
            ready = self._conn.poll(deadline)
            result = self._conn.recv() if ready else None
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(5)
            code = self._process.exitcode
            self._replace()
            return EvaluationResult(
                status="crashed", fatal=True, wall_seconds=time.perf_counter() - started,
                message=f"the evaluation worker died (exit code {code}); a fresh one takes the next request",
                **base,
            )
        if result is None:
            self._replace()
            return EvaluationResult(
                status="timeout", fatal=True, wall_seconds=time.perf_counter() - started,
                message=f"no answer within {deadline:.1f} s (a hung kernel or compile); the worker was killed",
                **base,
            )
        result.host, result.gpu = base["host"], base["gpu"]
        if result.fatal:
            self._replace()
        if result.status == "toolchain_error":
            # NVRTC missing, or the compiler process unable to start (a checkout shadowing the
            # installed package, say): no candidate can compile, so this is the run's error, not a
            # result to store or a row of dashes in a table.
            raise WorkerError(f"the evaluation worker cannot compile: {result.message}")
        return result

    def call(self, function: Callable, *args, timeout_s: float | None = None):
        """Run `function(device, *args)` in the worker and return its result. `function` must be
        importable by name (a module-level function). Its exception, the worker's death or a
        timeout raise WorkerError with the reason; the last two replace the worker."""
        if self._process is None or not self._process.is_alive():
            self._discard()
            self.start()
        deadline = timeout_s if timeout_s is not None else self.timeout_s
        name = getattr(function, "__qualname__", repr(function))
        try:
            self._conn.send(_Call(function, args))
            answer = self._conn.recv() if self._conn.poll(deadline) else None
        except KeyboardInterrupt:
            self._interrupted()
            raise
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(5)
            code = self._process.exitcode
            self._replace()
            raise WorkerError(f"the evaluation worker died running {name} (exit code {code})") from None
        if answer is None:
            self._replace()
            raise WorkerError(f"{name} gave no answer within {deadline:.1f} s; the worker was killed")
        kind, payload = answer
        if kind != "ok":
            raise WorkerError(f"{name} failed in the evaluation worker: {payload}")
        return payload

    def close(self) -> None:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
                self._process.join(10)
            except (BrokenPipeError, OSError):
                pass
        self._discard()
