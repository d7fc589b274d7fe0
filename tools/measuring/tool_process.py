"""A CUDA tool (compute-sanitizer, ncu) over a child process of this package: the tool runs
`python -P -m MODULE ARGUMENTS` with this process's import path, in a session of its own, and a
run past its deadline is killed with its whole group (the tool and the Python it runs). Used by
sanitizer.py and nsight.py, whose children read their request from a private temporary folder."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from astra_kernels.tools.toolchain.processes import child_environment, python_command


def run_under(tool: list[str], module: str, arguments: list[str], timeout_s: float) -> tuple[int | None, str]:
    """(exit code, output) of the tool over the module's child; the exit code is None where the
    run outlived `timeout_s` and was killed."""
    process = subprocess.Popen([*tool, *python_command(module), *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_environment(),
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output.decode(errors="replace")
    return process.returncode, output.decode(errors="replace")


def not_installed(tool: str) -> str:
    """What a report says where the tool is missing (toolkit.toolkit_program's search, in words)."""
    return f"{tool} is not installed here (not on PATH, nor in $CUDA_HOME/bin or /usr/local/cuda/bin)"


@contextlib.contextmanager
def request_folder(request, prefix: str) -> Iterator[Path]:
    """A private temporary folder holding `request` pickled as request.pickle, for the child to read
    (and write its answers beside); removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        (Path(folder) / "request.pickle").write_bytes(pickle.dumps(request))
        yield Path(folder)
