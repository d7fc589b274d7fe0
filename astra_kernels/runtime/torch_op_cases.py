"""Tensors for calling an exported kernel's op from PyTorch at a shape of its spec, shared by the op's
GPU test and bench/host_cost.py: each tensor argument drawn (inputs) or left empty (outputs) at
the sizes the spec's expressions give, and the scalars the shape does not give at the spec's values."""

from __future__ import annotations

from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.toolchain.dtypes import FLOAT_TYPES

from astra_kernels.kernels_sglang import suite
from .export_format import shape_args

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "int32": "int32",
                "fp8_e4m3": "float8_e4m3fn"}


def arguments(kernel: str, dtype: str, shape: dict[str, int], *, seed: int = 0, device: str = "cuda"):
    """(tensors in the spec's order, scalars by name) for one call at `shape`."""
    import torch

    spec = suite.load(kernel).spec
    generator = torch.Generator(device=device).manual_seed(seed)
    env = {**shape}
    tensors = []
    for arg in spec.args:
        if arg.role == "scalar":
            continue
        sizes = tuple(int(Expression(d)(env)) for d in arg.shape)
        torch_dtype = getattr(torch, TORCH_DTYPES[dtype if arg.dtype == "T" else arg.dtype])
        if arg.role == "out":
            tensors.append(torch.empty(sizes, dtype=torch_dtype, device=device))
        else:
            tensors.append(torch.randn(sizes, generator=generator, device=device).to(torch_dtype))
    carried = set(shape_args(spec).values())
    scalars = {a.name: (float(a.value) if a.dtype in FLOAT_TYPES else int(a.value))
               for a in spec.args if a.role == "scalar" and a.name not in carried}
    return tensors, scalars
