"""float64 reference for rotary position embedding (NeoX and interleaved), from its definition."""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

ROPE_BASE = 10000.0
_CHUNK = 1024  # tokens per step of the reference: keeps float64 temporaries to tens of MB


def make_cos_sin_cache(max_positions: int, rotary_dim: int, base: float = ROPE_BASE) -> np.ndarray:
    """[P, R] fp32: cos(p * f_i) for i < R/2, then sin(p * f_i), f_i = base^(-2i/R), as models build it."""
    inv_freq = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """q, k ~ N(0, 1) as projections produce them; positions uniform in the cache, with repeats,
    the last row of the cache and position 0 (the identity rotation) always among them."""
    n, hq, hk, d, r, p = (shape[s] for s in ("N", "HQ", "HK", "D", "R", "P"))
    positions = rng.integers(0, p, size=n, dtype=np.int64)
    if n >= 2:
        positions[-1] = positions[0]  # a repeated position
    if n >= 3:
        positions[1] = p - 1          # the cache's last row
    if n >= 4:
        positions[2] = 0              # cos = 1, sin = 0
    storage = numpy_dtype(dtype)
    q = rng.standard_normal((n, hq * d), dtype=np.float32).astype(storage)
    k = rng.standard_normal((n, hk * d), dtype=np.float32).astype(storage)
    return {"positions": positions, "q": q, "k": k, "cos_sin_cache": make_cos_sin_cache(p, r)}


def rotate(x: np.ndarray, cos_sin: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    """x[n, H, D] (float64), cos_sin[n, R] (float64) -> the rotated heads; dims >= R as given."""
    half = rotary_dim // 2
    c = cos_sin[:, None, :half]
    s = cos_sin[:, None, half:rotary_dim]
    out = x.copy()
    if interleaved:
        even, odd = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = even * c - odd * s
        out[..., 1:rotary_dim:2] = odd * c + even * s
    else:
        first, second = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = first * c - second * s
        out[..., half:rotary_dim] = second * c + first * s
    return out


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    n, d, r = shape["N"], shape["D"], shape["R"]
    interleaved = variant == "interleaved"
    if variant not in ("default", "interleaved"):
        raise ValueError(f"unknown variant {variant!r}")
    table = inputs["cos_sin_cache"]
    positions = inputs["positions"]
    result = {}
    for name in ("q", "k"):
        x = inputs[name]
        out = np.empty(x.shape, dtype=np.float64)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            heads = x[start:stop].astype(np.float64).reshape(stop - start, -1, d)
            cos_sin = table[positions[start:stop]].astype(np.float64)
            out[start:stop] = rotate(heads, cos_sin, r, interleaved).reshape(stop - start, -1)
        result[name] = out
    return result
