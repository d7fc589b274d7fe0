"""The kernels' PyTorch peers, and the one mapping between the suite's NumPy arrays and torch.

Each folder's peer.py holds `forward(tensors, scalars, variant)`: the kernel's math as a user
writes it in plain PyTorch, the bar a tuned kernel must clear eager and under torch.compile. A
peer is checked and timed on the suite's own seeded inputs against the same float64 reference,
so the bytes must cross unchanged: NumPy keeps bf16 and fp8 as ml_dtypes types, which torch
cannot read directly, so those travel as raw bits of the same width.

torch is optional for the project: it is imported only inside these functions, so a module that
imports this one still loads where torch is absent.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from astra_kernels.tools.measuring.problem import Problem
from astra_kernels.tools.toolchain.dtypes import numpy_dtype

from astra_kernels import suite

# NumPy storage dtypes torch cannot take from NumPy: (same-width integer view, torch dtype name).
_BIT_VIEWS = {
    np.dtype(ml_dtypes.bfloat16): (np.int16, "bfloat16"),
    np.dtype(ml_dtypes.float8_e4m3fn): (np.uint8, "float8_e4m3fn"),
    np.dtype(ml_dtypes.float8_e5m2): (np.uint8, "float8_e5m2"),
}


def to_torch(array: np.ndarray, device="cpu"):
    """A fresh torch tensor with the array's exact bytes, on `device` (never sharing memory with
    the array, so a peer's in-place update cannot reach the caller's inputs)."""
    import torch

    host = np.array(array, order="C", copy=True)
    view = _BIT_VIEWS.get(host.dtype)
    if view is None:
        return torch.from_numpy(host).to(device)
    bits, name = view
    return torch.from_numpy(host.view(bits)).view(getattr(torch, name)).to(device)


def torch_dtype(dtype: str):
    """The torch dtype of a kernel dtype ("bf16", "fp32", "int32", ...)."""
    import torch

    host = numpy_dtype(dtype)
    view = _BIT_VIEWS.get(host)
    return getattr(torch, view[1] if view else host.name)


def to_numpy(tensor) -> np.ndarray:
    """A fresh host array with the tensor's exact bytes, bf16 and fp8 as ml_dtypes types."""
    import torch

    host = tensor.detach().to("cpu").contiguous()
    for np_dtype, (bits, name) in _BIT_VIEWS.items():
        if host.dtype == getattr(torch, name):
            return host.view(getattr(torch, np.dtype(bits).name)).numpy().view(np_dtype).copy()
    return host.numpy().copy()


def scalars(problem: Problem) -> dict[str, int | float]:
    return {p.name: p.value for p in problem.params if not p.is_buffer}


def arguments(problem: Problem, inputs: dict[str, np.ndarray], device="cpu") -> tuple[dict, dict]:
    """(tensors, scalars) for a peer: every `in` and `inout` buffer of the signature, and every scalar."""
    tensors = {p.name: to_torch(inputs[p.name], device) for p in problem.buffers if p.role != "out"}
    return tensors, scalars(problem)


def results(problem: Problem, tensors: dict, outputs: dict) -> dict[str, np.ndarray]:
    """The peer's `out` buffers (returned) and `inout` buffers, as NumPy: an `inout` buffer the
    peer returns is its new value (SGLang's PyTorch paths are out of place), else the argument,
    updated in place."""
    return {p.name: to_numpy(outputs[p.name] if p.role == "out" or p.name in outputs else tensors[p.name])
            for p in problem.buffers if p.role in ("out", "inout")}


def run_peer(kernel_name: str, inputs_numpy: dict[str, np.ndarray], shape: dict[str, int], dtype: str,
             variant: str = "default", device="cpu", forward: Callable | None = None) -> dict[str, np.ndarray]:
    """Run a kernel's peer once on NumPy inputs (as `make_inputs` draws them); `forward` replaces
    the module's own, e.g. by its torch.compile'd form."""
    problem = suite.problem(suite.load(kernel_name), shape, dtype, variant)
    tensors, values = arguments(problem, inputs_numpy, device)
    outputs = (forward or suite.load_peer(kernel_name).forward)(tensors, values, variant)
    return results(problem, tensors, outputs)


def op_arguments(kernel: str, dtype: str, shape: dict[str, int], *, seed: int = 0, variant: str = "default",
                 device: str = "cuda") -> tuple[list, dict]:
    """(tensors in the signature's order, scalars by name) to call an exported kernel's PyTorch op or
    Python callable once at `shape`: the kernel's own seeded inputs (so rotary's positions lie in its
    cache), outputs left empty, and the scalars a caller passes (runtime/export_format.caller_scalars)
    at the spec's values. The op's GPU test and bench/host_cost.py call it."""
    import torch

    from astra_kernels.runtime.export_format import caller_scalars

    folder = suite.load(kernel)
    problem = suite.problem(folder, shape, dtype, variant)
    inputs = folder.reference.make_inputs(np.random.default_rng(seed), shape, dtype, variant)
    tensors = [torch.empty(p.shape, dtype=torch_dtype(p.dtype), device=device) if p.role == "out"
               else to_torch(inputs[p.name], device) for p in problem.buffers]
    given = {a.name for a in caller_scalars(folder.spec)}
    return tensors, {name: value for name, value in scalars(problem).items() if name in given}
