"""float64 reference for rmsnorm, written from docs/kernels.md section 2, and its input generator."""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

# The kernel receives eps as an fp32 scalar; the reference uses that exact value.
EPS = float(np.float32(1e-6))
# Rows per reference chunk: about 4M elements at a time keeps float64 temporaries small.
_CHUNK_ELEMS = 1 << 22


def outlier_columns(rng: np.random.Generator, h: int) -> tuple[np.ndarray, np.ndarray]:
    """A few channels (about one in 512, at least one) with a large scale (x10 to x20), as LLM
    hidden states have: they dominate mean(x^2) and so exercise the normalisation's range."""
    count = max(1, h // 512)
    cols = rng.choice(h, size=count, replace=False)
    scales = rng.uniform(10.0, 20.0, size=count).astype(np.float32)
    return cols, scales


def activations(rng: np.random.Generator, t: int, h: int, cols: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """N(0, 1) float32 activations with the outlier channels scaled."""
    x = rng.standard_normal((t, h), dtype=np.float32)
    x[:, cols] *= scales
    return x


def norm_weight(rng: np.random.Generator, h: int) -> np.ndarray:
    """A trained norm weight: around 1 (1 + 0.1 N(0, 1)), clipped to [0.5, 1.5] so never zero."""
    return np.clip(1.0 + 0.1 * rng.standard_normal(h, dtype=np.float32), 0.5, 1.5)


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    t, h = shape["T"], shape["H"]
    storage = numpy_dtype(dtype)
    cols, scales = outlier_columns(rng, h)
    return {
        "x": activations(rng, t, h, cols, scales).astype(storage),
        "w": norm_weight(rng, h).astype(storage),
    }


def rms_normalize(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """s / sqrt(mean(s^2) + eps) * w per row, in float64 (s float64 [rows, H], w float64 [H])."""
    mean_sq = np.einsum("ij,ij->i", s, s)[:, None] / s.shape[1]
    return s / np.sqrt(mean_sq + EPS) * w


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    x = inputs["x"]
    t, h = x.shape
    w = inputs["w"].astype(np.float64)
    out = np.empty((t, h), dtype=np.float64)
    step = max(1, _CHUNK_ELEMS // h)
    for start in range(0, t, step):
        out[start:start + step] = rms_normalize(x[start:start + step].astype(np.float64), w)
    return {"out": out}
