"""NVRTC in a child process, so that a compile that never ends can be stopped.

NVRTC holds the interpreter for a whole compile and has no way to cancel one, and a generated
source can keep it busy for as long as it likes (constant evaluation of a long loop, one such
evaluation per line). A compile with a deadline therefore runs in a child process, killed when
the deadline passes: the caller gets CompileTimeoutError, and the next compile starts a fresh
child. The child lives on between compiles, so its start (an interpreter and the NVRTC bindings,
about a second) is paid once per process that compiles, and never counts against a deadline.

The child is a plain subprocess rather than a multiprocessing one: the evaluation worker, which
compiles this way, is a daemonic process, and those may not have multiprocessing children.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from .nvrtc import CompiledModule, CompileOptions, Diagnostic
from .processes import child_environment, die_with_parent, interrupts_blocked, python_command
from astra_kernels.tools.errors import CompileError, CompileTimeoutError, ToolchainError

START_TIMEOUT_S = 120.0


class CompilerProcess:
    """One child that compiles on request; `compile` waits at most `timeout_s` for each."""

    def __init__(self, start_timeout_s: float = START_TIMEOUT_S):
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen | None = None
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self.kills = 0  # compiles cut off at their deadline

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        try:
            with interrupts_blocked():  # our caller answers Ctrl-C and SIGTERM, and kills this child
                self._process = subprocess.Popen(
                    [*python_command(__name__), str(to_child_read), str(from_child_write), str(os.getpid())],
                    pass_fds=(to_child_read, from_child_write), stdin=subprocess.DEVNULL,
                    env=child_environment(),
                )
        finally:
            os.close(to_child_read)
            os.close(from_child_write)
        self._to_child = Connection(to_child_write, readable=False)
        self._from_child = Connection(from_child_read, writable=False)
        if not self._from_child.poll(self.start_timeout_s):
            self.close()
            raise ToolchainError(f"the compiler process did not start within {self.start_timeout_s:.0f} s")
        try:
            kind, payload = self._from_child.recv()
        except EOFError:
            code = self._process.wait(10)
            self.close()
            raise ToolchainError(f"the compiler process died while starting (exit code {code})") from None
        if kind != "ready":
            self.close()
            raise ToolchainError(f"the compiler process could not start: {payload}")

    def compile(self, source: str, options: CompileOptions, *, name: str, cache_dir: str | None,
                timeout_s: float) -> CompiledModule:
        """compile_source in the child; a CompileError or ToolchainError comes back as such."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self._start()
        started = time.perf_counter()
        try:
            self._to_child.send((source, options, name, cache_dir))
            answer = self._from_child.recv() if self._from_child.poll(timeout_s) else None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self._process.wait(10)
            self.close()
            # NVRTC crashing on a source is that source's fault as much as a syntax error is.
            raise CompileError(f"the compiler crashed on this source (exit code {code})") from None
        except BaseException:
            # Ctrl-C or SIGTERM while the child compiles: its late answer would be read as the
            # next compile's, so this child goes, and the next compile starts a fresh one.
            self.close()
            raise
        if answer is None:
            self.kills += 1
            self.close()
            raise CompileTimeoutError(
                f"compilation did not finish within {timeout_s:g} s (stopped after "
                f"{time.perf_counter() - started:.1f} s; the compiler process was killed)")
        kind, payload = answer
        if kind == "ok":
            return payload
        if kind == "compile_error":
            message, log, diagnostics = payload
            raise CompileError(message, log=log, diagnostics=[Diagnostic(**d) for d in diagnostics])
        raise ToolchainError(f"the compiler process failed: {payload}")

    def close(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait(10)
        for conn in (self._to_child, self._from_child):
            if conn is not None:
                conn.close()
        self._process = self._to_child = self._from_child = None


_SHARED: CompilerProcess | None = None
_SHARED_LOCK = threading.Lock()  # one pipe, one compile at a time, whichever thread asks


def compile_in_child(source: str, options: CompileOptions, *, name: str, cache_dir: str | None,
                     timeout_s: float) -> CompiledModule:
    """The process's one compiler child, started on first use."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = CompilerProcess()
        return _SHARED.compile(source, options, name=name, cache_dir=cache_dir, timeout_s=timeout_s)


def _serve(read_fd: int, write_fd: int, parent_pid: int | None = None) -> None:
    # Killed when the parent dies, so a worker killed mid-compile leaves no orphan running a
    # compile that never ends (an orphan reading its pipe would see EOF, but only once the
    # compile is over).
    die_with_parent(parent_pid)
    requests, answers = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    try:
        from .compile_cache import CompileCache
        from .nvrtc import compile_here
    except Exception as exc:  # a broken installation: said once, at start
        answers.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    answers.send(("ready", os.getpid()))
    while True:
        try:
            source, options, name, cache_dir = requests.recv()
        except EOFError:
            return
        try:
            module = compile_here(source, options, name=name, cache=CompileCache(cache_dir) if cache_dir else None)
        except CompileError as exc:
            answers.send(("compile_error", (str(exc), exc.log, [d.model_dump() for d in exc.diagnostics])))
        except Exception as exc:
            answers.send(("error", f"{type(exc).__name__}: {exc}"))
        else:
            answers.send(("ok", module))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
