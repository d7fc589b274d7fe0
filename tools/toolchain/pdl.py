"""Programmatic dependent launch (PDL): the kernel version that may start before its predecessor ends.

In a serving step, kernels run back to back and each reads what the one before wrote. With PDL
(sm_90+) the driver launches the next grid while the previous one is still running; the new grid
executes its prologue, then `griddepcontrol.wait` holds it until every grid it depends on has
finished and its writes are visible. What that saves is the launch latency, which at decode
sizes is most of a kernel's time. The wait keeps the result exact, so a PDL version reads only
finished data, just as SGLang's kernels do when they launch with PDL enabled.

A kernel of the suite is made PDL-ready by putting, at the top of its body, the trigger that lets
the next grid launch (`griddepcontrol.launch_dependents`) and then the wait. The kernel text
itself is left alone: results stores key on the source, so the plain version keeps its
recorded measurements and the PDL version is measured as a version of its own. docs/design.md asks
for PDL to be reported separately, with both sides compared with it off.
"""

from __future__ import annotations

import re

from astra_kernels.tools.errors import AstraError

PROLOGUE = (
    "\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"griddepcontrol.launch_dependents;\");\n"
    "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "#endif\n"
)
MIN_ARCH = 90


class PdlError(AstraError):
    """The source has no definition of the kernel to make PDL-ready."""


def _body_start(source: str, kernel: str) -> int:
    """Index just after the opening brace of `kernel`'s definition (a `__global__` function)."""
    for glob in re.finditer(r"\b__global__\b", source):
        name = re.compile(rf"\b{re.escape(kernel)}\s*\(").search(source, glob.end())
        if name is None:
            break
        if re.search(r"[;{}]", source[glob.end():name.start()]):
            continue  # another __global__ declaration ends before this name
        depth, i = 0, name.end() - 1
        while i < len(source):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
            if depth == 0:
                break
        rest = re.match(r"\s*\{", source[i:])
        if rest:
            return i + rest.end()
    raise PdlError(f"no definition of __global__ {kernel}(...) {{ ... }} in the source to make PDL-ready")


def dependent_source(source: str, kernel: str) -> str:
    """`source` with `kernel` waiting for its predecessor grid and releasing its dependents first."""
    at = _body_start(source, kernel)
    return source[:at] + PROLOGUE + source[at:]


def supported(arch: str) -> bool:
    """Whether a GPU of compute capability `arch` ("sm_90", "90") has griddepcontrol."""
    digits = re.sub(r"\D", "", arch or "")
    return bool(digits) and int(digits) >= MIN_ARCH
