"""Find the CUDA headers (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) for NVRTC without a CUDA toolkit.

NVRTC needs these headers at compile time but the pip NVRTC wheel does not carry them; the pip
CUDA runtime wheel does. Order: an explicit `ASTRA_CUDA_INCLUDE`, then what cuda.pathfinder finds
(the pip runtime wheel, or a toolkit under CUDA_HOME/CUDA_PATH), then the conventional toolkit
location. The first directory holding cuda_fp16.h wins.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from astra_kernels.tools.errors import ToolchainError

REQUIRED_HEADER = "cuda_fp16.h"


def _candidates() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    explicit = os.environ.get("ASTRA_CUDA_INCLUDE")
    if explicit:
        found.append(("ASTRA_CUDA_INCLUDE", Path(explicit)))
    try:
        import cuda.pathfinder as pathfinder

        located = pathfinder.find_nvidia_header_directory("cudart")
        if located:
            found.append(("cuda.pathfinder", Path(located)))
    except Exception:  # pathfinder missing or too old: fall through to the toolkit paths
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found.append((var, Path(os.environ[var]) / "include"))
    found.append(("/usr/local/cuda", Path("/usr/local/cuda/include")))
    return found


@functools.cache
def cuda_include_dir() -> Path:
    """The directory passed to NVRTC with -I; raises ToolchainError naming every place tried."""
    tried = []
    for origin, path in _candidates():
        if (path / REQUIRED_HEADER).is_file():
            return path
        tried.append(f"{origin}: {path}")
    raise ToolchainError(
        f"cannot find the CUDA headers ({REQUIRED_HEADER}); tried " + "; ".join(tried)
        + ". Install them with `pip install nvidia-cuda-runtime` or set ASTRA_CUDA_INCLUDE."
    )
