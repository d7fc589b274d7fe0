"""float64 reference for fused_add_rmsnorm, written from docs/kernels.md section 3.

The sum is the kernel's fp32 sum s = fp32(x) + fp32(residual) (one fp32 rounding, exact for most
bf16/fp16 pairs). residual receives s rounded to the storage dtype; the normalisation reads the
unrounded fp32 s, both for mean(s^2) and for s * rsqrt(...) * w: docs/kernels.md's "(from the fp32
sum)", and what SGLang's kernel does (it keeps the fp32 row, not the stored one, between passes).
"""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

from astra_kernels.kernels_sglang.rmsnorm.reference import (
    EPS, activations, norm_weight, outlier_columns, rms_normalize,
)

__all__ = ["EPS", "make_inputs", "reference"]

_CHUNK_ELEMS = 1 << 22


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """x (a layer's output) and residual (the residual stream): N(0, 1) with the same few outlier
    channels (x10 to x20, each its own scale), as LLM hidden states have; w around 1."""
    t, h = shape["T"], shape["H"]
    storage = numpy_dtype(dtype)
    cols, x_scales = outlier_columns(rng, h)
    r_scales = rng.uniform(10.0, 20.0, size=cols.size).astype(np.float32)
    return {
        "x": activations(rng, t, h, cols, x_scales).astype(storage),
        "residual": activations(rng, t, h, cols, r_scales).astype(storage),
        "w": norm_weight(rng, h).astype(storage),
    }


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    x, residual = inputs["x"], inputs["residual"]
    t, h = x.shape
    storage = x.dtype
    w = inputs["w"].astype(np.float64)
    x_out = np.empty((t, h), dtype=np.float64)
    r_out = np.empty((t, h), dtype=np.float64)
    step = max(1, _CHUNK_ELEMS // h)
    for start in range(0, t, step):
        rows = slice(start, start + step)
        s32 = x[rows].astype(np.float32) + residual[rows].astype(np.float32)  # the kernel's fp32 sum
        r_out[rows] = s32.astype(storage).astype(np.float64)
        x_out[rows] = rms_normalize(s32.astype(np.float64), w)
    return {"x": x_out, "residual": r_out}
