"""float64 reference for the gated activations, written from their definitions."""

from __future__ import annotations

import math

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz and Stegun 7.1.26: |error| < 1.5e-7, vectorised.

    NumPy has no erf and math.erf is per element (seconds on serving shapes). 1.5e-7 is far
    inside every tolerance here (fp32's is 1e-4 relative); tests compare it with math.erf.
    """
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def activation(a: np.ndarray, variant: str) -> np.ndarray:
    if variant == "default":
        return a / (1.0 + np.exp(-a))
    if variant == "gelu":
        return 0.5 * a * (1.0 + erf(a / math.sqrt(2.0)))
    if variant == "gelu_tanh":
        return 0.5 * a * (1.0 + np.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a**3)))
    raise ValueError(f"unknown variant {variant!r}")


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """Activations as an MLP produces them: mostly within a few units, some large gates."""
    t, d = shape["T"], shape["D"]
    x = rng.standard_normal((t, 2 * d), dtype=np.float32) * 2.0
    return {"x": x.astype(numpy_dtype(dtype))}


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    d = shape["D"]
    x = inputs["x"].astype(np.float64)
    return {"out": activation(x[:, :d], variant) * x[:, d:]}
