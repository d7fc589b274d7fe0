"""Starting a Python child process of this package (the compiler process, the sanitizer's run):
the same interpreter, the same import path, never the working directory."""

from __future__ import annotations

import os
import sys


def python_command(module: str) -> list[str]:
    """`python -P -m module`: never the working directory on the child's import path. The child
    imports what this process imports (child_environment passes our import path on), wherever
    the command was started: a checkout's astra_kernels/ folder, which holds only part of the
    package, must not shadow the installed package (`-m` alone would put it first)."""
    return [sys.executable, "-P", "-m", module]


def child_environment() -> dict[str, str]:
    """This process's environment, with its import path, so the child imports what we import
    (a source checkout, a test folder) and not only what is installed."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    return env
