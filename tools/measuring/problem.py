"""What a kernel computes, stated so the evaluation worker can check and time any version of it.

A Problem lists the kernel's parameters (buffers with a role, or scalars) and a seeded case
factory that draws fresh inputs and computes the float64 reference. The factory runs inside the
worker, so gigabyte inputs never cross a process boundary; it must therefore be picklable (a
module-level function, or functools.partial of one).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel

from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.errors import LaunchArgumentError

Role = Literal["in", "out", "inout", "scalar"]


class Tolerance(BaseModel):
    """Elementwise |out - ref| <= atol + rtol * |ref|, and a bound on the relative norm error."""

    rtol: float
    atol: float
    max_norm_error: float


# Storage rounding alone is half a unit in the last place; these leave room for fp32 math in a
# different order and for fast-math intrinsics, and no more.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "fp64": Tolerance(rtol=1e-9, atol=1e-12, max_norm_error=1e-10),
    "fp32": Tolerance(rtol=1e-4, atol=1e-5, max_norm_error=1e-5),
    "fp16": Tolerance(rtol=4e-3, atol=1e-3, max_norm_error=2e-3),
    "bf16": Tolerance(rtol=2e-2, atol=1e-2, max_norm_error=1e-2),
    "fp8_e4m3": Tolerance(rtol=0.13, atol=2e-2, max_norm_error=0.07),
    "fp8_e5m2": Tolerance(rtol=0.26, atol=4e-2, max_norm_error=0.13),
}


@dataclass(frozen=True)
class Param:
    """One kernel parameter, in the kernel's order."""

    name: str
    role: Role
    dtype: str
    shape: tuple[int, ...] = ()
    value: float | int | None = None  # for scalars

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * numpy_dtype(self.dtype).itemsize if self.is_buffer else 0

    def scalar(self) -> np.generic:
        return numpy_dtype(self.dtype).type(self.value)


@dataclass
class Case:
    """One draw of inputs and the reference outputs they imply."""

    inputs: dict[str, np.ndarray]  # every in and inout buffer, in its storage dtype
    expected: dict[str, np.ndarray]  # every out and inout buffer, float64 (or exact integers)


@dataclass
class Problem:
    params: list[Param]
    make_case: Callable[[int], Case]
    bytes_moved: int  # each input read once, each output written once: the roofline's numerator
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    label: str = ""
    bytes_written: int | None = None  # of bytes_moved; None: the out and inout buffers

    def tolerance(self, dtype: str) -> Tolerance:
        return self.tolerances.get(dtype) or DEFAULT_TOLERANCES.get(dtype) or Tolerance(
            rtol=0.0, atol=0.0, max_norm_error=0.0
        )

    @property
    def buffers(self) -> list[Param]:
        return [p for p in self.params if p.is_buffer]

    @property
    def read_bytes(self) -> int:
        """Bytes the kernel reads: the rest of bytes_moved where the written bytes are given, else
        its `in` and `inout` buffers, each once (the read side of its mix)."""
        if self.bytes_written is not None:
            return max(0, self.bytes_moved - self.bytes_written)
        return sum(p.nbytes for p in self.buffers if p.role in ("in", "inout"))

    @property
    def write_bytes(self) -> int:
        """Bytes the kernel writes: as given, else its `out` and `inout` buffers, each once."""
        if self.bytes_written is not None:
            return self.bytes_written
        return sum(p.nbytes for p in self.buffers if p.role in ("out", "inout"))

    @property
    def set_bytes(self) -> int:
        """Device bytes one full set of this problem's buffers occupies."""
        return sum(p.nbytes for p in self.buffers)

    def validate_case(self, case: Case) -> None:
        """A case factory that returns the wrong arrays is a bug in the spec, said plainly."""
        for p in self.buffers:
            if p.role in ("in", "inout"):
                arr = case.inputs.get(p.name)
                if arr is None:
                    raise LaunchArgumentError(f"case has no input for {p.name!r}")
                if arr.shape != p.shape or arr.dtype != numpy_dtype(p.dtype):
                    raise LaunchArgumentError(
                        f"input {p.name!r} is {arr.dtype}{list(arr.shape)}, "
                        f"the problem says {p.dtype}{list(p.shape)}"
                    )
            if p.role in ("out", "inout"):
                ref = case.expected.get(p.name)
                if ref is None:
                    raise LaunchArgumentError(f"case has no expected output for {p.name!r}")
                if ref.shape != p.shape:  # the GPU's comparison reads as many elements as the output has
                    raise LaunchArgumentError(
                        f"expected output {p.name!r} is {list(ref.shape)}, the problem says {list(p.shape)}")
