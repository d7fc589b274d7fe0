"""compute-sanitizer's memcheck over a candidate's correctness launches, where the tool exists.

Guard bands (guards.py) see writes that land just outside a buffer. Memcheck sees every access
outside any allocation, reads included, and names the thread and the instruction, at the price
of a run many times slower in a process of its own. So it is an optional second opinion,
`sanitize(request)`: the correctness launches (no timing) under
`compute-sanitizer --tool memcheck`, each buffer in an allocation of exactly its size and with no
bands, since a stray write into a band is inside an allocation and so legal to memcheck.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field

from astra_kernels.tools.toolchain.toolkit import toolkit_program
from .evaluation import EvaluationRequest, EvaluationResult
from .tool_process import not_installed, request_folder, run_under

ERROR_EXIT_CODE = 86  # what compute-sanitizer exits with when it found errors (--error-exitcode)
_PREFIX = "========= "
_SUMMARY = re.compile(r"^========= ERROR SUMMARY: (\d+) errors?")


class SanitizerReport(BaseModel):
    """What memcheck said about a candidate's correctness launches."""

    available: bool
    binary: str | None = None
    clean: bool | None = None  # None: the run did not happen or did not finish
    error_count: int | None = None
    errors: list[str] = Field(default_factory=list)  # one line per reported error, its details joined
    exit_code: int | None = None
    result: EvaluationResult | None = None  # the correctness launches' own verdict, from inside
    message: str = ""
    output_tail: str = ""
    seconds: float = 0.0


def find_compute_sanitizer() -> str | None:
    """On PATH, else in the CUDA toolkit (toolkit.toolkit_program)."""
    return toolkit_program("compute-sanitizer")


def parse_memcheck(output: str) -> tuple[list[str], int | None]:
    """The reported errors, each as its headline with its indented detail lines joined
    (host backtraces left out), and the count from the ERROR SUMMARY line."""
    errors: list[list[str]] = []
    count = None
    for line in output.splitlines():
        if (summary := _SUMMARY.match(line)) is not None:
            count = int(summary.group(1))
            continue
        if not line.startswith(_PREFIX):
            continue
        text = line[len(_PREFIX):]
        if not text.strip() or text.startswith("COMPUTE-SANITIZER"):
            continue
        if not text.startswith(" "):
            errors.append([text.strip()])
        elif errors and "Host Frame" not in text and "backtrace" not in text.lower():
            errors[-1].append(text.strip())
    return [" | ".join(parts) for parts in errors], count


def sanitize(request: EvaluationRequest, *, binary: str | None = None, timeout_s: float = 600.0,
             device_index: int = 0) -> SanitizerReport:
    """Run the request's correctness launches under memcheck in a child process.

    The request must be picklable with an importable case factory, as for the worker. A run past
    `timeout_s` is killed with its process group and reported unfinished.
    """
    binary = binary or find_compute_sanitizer()
    if binary is None:
        return SanitizerReport(available=False, message=not_installed("compute-sanitizer"))
    started = time.perf_counter()
    with request_folder(request, "astra-sanitize-") as folder:
        request_path, result_path = folder / "request.pickle", folder / "result.json"
        # API errors are left out: cuda-python probes driver entry points with cuGetProcAddress at
        # import, and each probe this driver lacks would count; a failed launch shows in `result`.
        code, text = run_under([binary, "--tool", "memcheck", "--report-api-errors", "no",
                                "--error-exitcode", str(ERROR_EXIT_CODE)],
                               __name__, [str(request_path), str(result_path), str(device_index)], timeout_s)
        if code is None:
            return SanitizerReport(
                available=True, binary=binary, exit_code=None, seconds=time.perf_counter() - started,
                message=f"memcheck did not finish within {timeout_s:g} s; it was killed", output_tail=text[-4000:])
        result = (EvaluationResult.model_validate_json(result_path.read_text())
                  if result_path.exists() else None)
    errors, count = parse_memcheck(text)
    clean = code == 0 and not errors and (count or 0) == 0
    if clean:
        message = "memcheck found no errors"
    elif errors or count:
        message = f"memcheck found {count if count is not None else len(errors)} error(s): " + "; ".join(errors[:3])
    else:
        message = f"the run under memcheck failed with exit code {code}"
    return SanitizerReport(available=True, binary=binary, clean=clean, error_count=count, errors=errors,
                           exit_code=code, result=result, message=message, output_tail=text[-4000:],
                           seconds=time.perf_counter() - started)


def _run(request_path: str, result_path: str, device_index: str) -> None:
    """Inside memcheck: the correctness launches only, on exact-size allocations."""
    from astra_kernels.tools.toolchain.device import Device
    from .evaluation import evaluate

    request = pickle.loads(Path(request_path).read_bytes())
    request = dataclasses.replace(request, time=False, input_layout="separate")
    result = evaluate(Device(int(device_index)), request, guard_bytes=0)
    Path(result_path).write_text(result.model_dump_json())


if __name__ == "__main__":
    _run(*sys.argv[1:4])
