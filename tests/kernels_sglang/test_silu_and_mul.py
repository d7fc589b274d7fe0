"""silu_and_mul's reference against the textbook formulas, element by element."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_kernels.kernels_sglang.silu_and_mul import reference as ref
from astra_kernels.tools.toolchain.dtypes import numpy_dtype


def _scalar(a: float, b: float, variant: str) -> float:
    if variant == "default":
        act = a / (1 + math.exp(-a))
    elif variant == "gelu":
        act = 0.5 * a * (1 + math.erf(a / math.sqrt(2)))
    else:
        act = 0.5 * a * (1 + math.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    return act * b


@pytest.mark.parametrize("variant", ["default", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [{"T": 1, "D": 5}, {"T": 3, "D": 8}])
def test_reference_matches_scalar_formulas(variant, shape):
    rng = np.random.default_rng(0)
    inputs = ref.make_inputs(rng, shape, "fp32", variant)
    out = ref.reference(inputs, shape, "fp32", variant)["out"]
    x = inputs["x"].astype(np.float64)
    d = shape["D"]
    for t in range(shape["T"]):
        for i in range(d):
            a, b = x[t, i], x[t, d + i]
            erf_bound = 0.5 * abs(a * b) * 1.5e-7 if variant == "gelu" else 0.0
            assert out[t, i] == pytest.approx(_scalar(a, b, variant), rel=1e-9, abs=erf_bound + 1e-12)


def test_vectorised_erf_is_within_its_stated_bound():
    x = np.linspace(-6, 6, 20001)
    exact = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(ref.erf(x) - exact)) < 1.5e-7


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_inputs_are_real_and_fresh(dtype):
    shape = {"T": 4, "D": 100}
    a = ref.make_inputs(np.random.default_rng(1), shape, dtype, "default")["x"]
    b = ref.make_inputs(np.random.default_rng(2), shape, dtype, "default")["x"]
    assert a.dtype == numpy_dtype(dtype) and a.shape == (4, 200)
    assert np.count_nonzero(a.astype(np.float64)) > 0.99 * a.size
    assert a.tobytes() != b.tobytes()
    assert 1.0 < np.std(a.astype(np.float64)) < 4.0
