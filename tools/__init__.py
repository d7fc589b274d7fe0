"""The CUDA toolchain: everything that touches the GPU or the compiler, and nothing about agents.

compiler (NVRTC, resource report, cache, parallel compile) -> device (context, buffers, launch,
occupancy) -> timing (graph replay, copy bandwidth) -> correctness (checks against the float64
reference) -> evaluation (the measuring protocol) -> worker (the process that isolates faults).
"""

from .compiler import CompiledModule, CompileOptions, compile_many, compile_source, nvrtc_version
from .errors import (
    AstraError, CompileError, CompileTimeoutError, KernelNotFoundError, LaunchArgumentError,
    LaunchError, NoGpuError, ToolchainError, UnknownArchError, WorkerError,
)
from .evaluation import EvaluationRequest, EvaluationResult, LaunchShape
from .problem import Case, Param, Problem, Tolerance
from .resources import ResourceUsage
from .worker import EvaluationWorker

__all__ = [
    "AstraError", "Case", "CompileError", "CompileOptions", "CompileTimeoutError", "CompiledModule",
    "EvaluationRequest", "EvaluationResult", "EvaluationWorker", "KernelNotFoundError",
    "LaunchArgumentError", "LaunchError", "LaunchShape", "NoGpuError", "Param", "Problem",
    "ResourceUsage", "Tolerance", "ToolchainError", "UnknownArchError", "WorkerError",
    "compile_many", "compile_source", "nvrtc_version",
]
