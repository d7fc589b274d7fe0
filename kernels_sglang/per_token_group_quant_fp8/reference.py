"""float64 reference for per-token-group fp8 quantisation, written from its definition.

Per group of GROUP = 128 contiguous elements of a row: s = max(eps, max|x|) / 448 and
q = clamp(x / s, -448, 448). The reference gives q UNROUNDED (float64): the kernel's rounding to
e4m3 (nearest-even, satfinite) is what the fp8_e4m3 tolerance of the spec measures. s is compared
as fp32. eps is the fp32 value the kernel receives (float32(1e-10)).
"""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

GROUP = 128
FP8_MAX = 448.0
EPS = 1e-10
EPS_F32 = float(np.float32(EPS))  # what the kernel sees: the scalar argument is fp32

# Group kinds drawn by make_inputs, and their probabilities.
NORMAL, OUTLIER, TINY, BELOW_EPS = 0, 1, 2, 3
_KIND_P = [0.78, 0.10, 0.10, 0.02]
_ROWS_PER_CHUNK = 512  # bounds the float64 temporaries of the reference on serving shapes


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """Activations as a transformer layer feeds an fp8 GEMM, with scales that vary widely.

    Every group is N(0, 1) times a per-group factor exp(N(0, 1)), and is one of:
    - normal (78%);
    - outlier (10%): one or two elements of magnitude U(100, 1000) (outlier channels), so the
      rest of the group quantises to small values, e4m3 subnormals included;
    - tiny (10%): scaled by 1e-3 (in fp16 partly subnormal inputs);
    - below eps (2%): |x| < 1e-10 in bf16, exact zeros in fp16 (which cannot hold such values;
      zero rows are what padded tokens look like), so s = eps / 448 is used.
    Group 0 of token 0 is always normal. Saturation by construction: each group's largest
    magnitude maps to exactly +-448, and in about a quarter of the groups a second element is
    the exact negation of the largest one, so a group then holds both +448 and -448.
    """
    t, h = shape["T"], shape["H"]
    if h % GROUP:
        raise ValueError(f"H = {h} is not a multiple of the group size {GROUP}")
    ng = h // GROUP
    x = rng.standard_normal((t, ng, GROUP), dtype=np.float32)
    x *= np.exp(rng.standard_normal((t, ng, 1))).astype(np.float32)
    kind = rng.choice(4, size=(t, ng), p=_KIND_P)
    kind[0, 0] = NORMAL
    ti, gi = np.nonzero(kind == OUTLIER)
    for extra in range(2):
        keep = rng.random(ti.size) < (1.0 if extra == 0 else 0.5)
        pos = rng.integers(0, GROUP, ti.size)
        mag = rng.uniform(100.0, 1000.0, ti.size) * rng.choice([-1.0, 1.0], ti.size)
        x[ti[keep], gi[keep], pos[keep]] = mag[keep].astype(np.float32)
    x[kind == TINY] *= np.float32(1e-3)
    below = kind == BELOW_EPS
    if dtype == "fp16":
        x[below] = 0.0
    else:
        x[below] = np.clip(x[below] * np.float32(1e-11), -8e-11, 8e-11)
    xs = x.astype(numpy_dtype(dtype))
    # Ties at the extremes: negate-copy the largest magnitude into another slot (exact in storage).
    tie_t, tie_g = np.nonzero((rng.random((t, ng)) < 0.25) & ~below)
    if tie_t.size:
        groups = xs[tie_t, tie_g].astype(np.float32)
        arg = np.argmax(np.abs(groups), axis=1)
        other = (arg + rng.integers(1, GROUP, tie_t.size)) % GROUP
        xs[tie_t, tie_g, other] = -xs[tie_t, tie_g, arg]
    return {"x": xs.reshape(t, h)}


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    t, h = shape["T"], shape["H"]
    ng = h // GROUP
    x = inputs["x"]
    q = np.empty((t, h), dtype=np.float64)
    scales = np.empty((t, ng), dtype=np.float64)
    for r0 in range(0, t, _ROWS_PER_CHUNK):
        r1 = min(t, r0 + _ROWS_PER_CHUNK)
        xg = x[r0:r1].astype(np.float32).reshape(r1 - r0, ng, GROUP)  # exact for bf16 and fp16
        absmax = np.abs(xg).max(axis=2).astype(np.float64)
        s = np.maximum(absmax, EPS_F32) / FP8_MAX
        scales[r0:r1] = s
        qg = xg.astype(np.float64) / s[:, :, None]
        np.clip(qg, -FP8_MAX, FP8_MAX, out=qg)
        q[r0:r1] = qg.reshape(r1 - r0, h)
    return {"q": q, "scales": scales}
