"""Typed errors for everything that can go wrong below the agent.

Callers (the CLI, the tuner, the graph) catch `AstraError` and show its message; each subclass
names one failure so a caller can react to it (a compile error goes back to the generator, a
missing GPU tells the user what can run without one) instead of parsing strings.
"""

from __future__ import annotations


class AstraError(RuntimeError):
    """Base of every error this package raises on purpose. A RuntimeError, because LangGraph's
    server (`langgraph dev`, Studio) passes a failed run's message to the client only for builtin
    exception types and answers "An internal error occurred" for any other: a kernel name typed
    wrong in Studio must come back as the project's own sentence."""


class UsageError(AstraError, ValueError):
    """An input the user wrote that the command cannot take (a malformed shape, an unknown dtype,
    a negative budget): the CLI exits 2 on it, argparse's convention for a bad argument. A
    ValueError too, so code that parses without the CLI can catch what it always caught."""


class NoGpuError(AstraError):
    """No CUDA driver or no device: launching is impossible, compiling still works."""


class ToolchainError(AstraError):
    """NVRTC or the CUDA headers could not be found or loaded."""


class UnknownArchError(AstraError):
    """A target architecture NVRTC does not support, or a string that is not one."""


class CompileError(AstraError):
    """NVRTC rejected the source; `log` holds its full output, `diagnostics` the parsed lines."""

    def __init__(self, message: str, log: str = "", diagnostics: list | None = None):
        super().__init__(message)
        self.log = log
        self.diagnostics = diagnostics or []


class CompileTimeoutError(CompileError):
    """The compiler did not finish within its time limit."""


class KernelNotFoundError(AstraError):
    """The requested kernel name is not an entry point of the compiled source."""


class LaunchArgumentError(AstraError):
    """Arguments that do not match the kernel's parameters in count, size or type."""


class LaunchError(AstraError):
    """The driver refused a launch or a launched kernel faulted."""


class WorkerError(AstraError):
    """The evaluation worker died, hung or answered nonsense."""
