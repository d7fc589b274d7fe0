"""Programs of the CUDA toolkit the project runs beside its compilers (compute-sanitizer, ncu):
on the PATH, else in the toolkit's bin folder ($CUDA_HOME, $CUDA_PATH or /usr/local/cuda)."""

from __future__ import annotations

import os
import shutil


def toolkit_program(name: str) -> str | None:
    """The path of the toolkit program `name`, or None where it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(candidate := os.path.join(root, "bin", name), os.X_OK):
            return candidate
    return None
