"""float64 reference for merge_attn_states, written from the math in docs/kernels.md section 4.

Semantics of infinite LSEs (the kernels implement the same): an LSE of +inf or -inf marks an
empty partial state and is treated as -inf, as SGLang's merge_state_v2 does. With one side
empty the merge returns the other side exactly (weights 1 and 0); with both empty, v = 0 and
s = -inf (SGLang itself would produce NaN from -inf - -inf; we define the empty merge instead).
"""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

# Shares of (token, head) entries given each special LSE pattern, on top of the forced ones.
TIE_FRACTION = 0.05  # sb == sa exactly
NEG_INF_FRACTION = 0.02  # each of sa, sb independently -inf (both: ~0.04%, plus the forced one)
BOTH_NEG_INF_FRACTION = 0.01  # sa = sb = -inf
POS_INF_FRACTION = 0.005  # each of sa, sb independently +inf (treated as empty)

# (sa, sb) patterns every draw contains, most important first, when the shape has room:
# a shape of k entries gets the first min(len, k // 2) of them.
FORCED = [
    (-np.inf, -np.inf),  # both empty -> v = 0, s = -inf
    (-np.inf, None),  # a empty -> v = vb, s = sb
    (None, -np.inf),  # b empty -> v = va, s = sa
    ("tie", "tie"),  # sa == sb -> v = (va + vb) / 2, s = sa + ln 2
    (np.inf, None),  # +inf treated as empty
    (None, np.inf),
    (np.inf, -np.inf),  # both empty, mixed signs
]


def base_is_two(variant: str) -> bool:
    if variant == "default":
        return False
    if variant == "base2":
        return True
    raise ValueError(f"unknown variant {variant!r}")


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """Partial outputs ~N(0, 1); LSEs ~N(5, 3) as attention over a few hundred keys gives them,
    with ties and a few empty (infinite) partial states placed at random entries."""
    n, hd, d = shape["N"], shape["HD"], shape["D"]
    t = numpy_dtype(dtype)
    va = rng.standard_normal((n, hd, d), dtype=np.float32).astype(t)
    vb = rng.standard_normal((n, hd, d), dtype=np.float32).astype(t)
    sa = (5.0 + 3.0 * rng.standard_normal((n, hd))).astype(np.float32)
    sb = (5.0 + 3.0 * rng.standard_normal((n, hd))).astype(np.float32)
    fa, fb = sa.reshape(-1), sb.reshape(-1)  # views
    size = fa.size

    def pick(p: float) -> np.ndarray:
        return rng.random(size) < p

    tie = pick(TIE_FRACTION)
    fb[tie] = fa[tie]
    fa[pick(NEG_INF_FRACTION)] = -np.inf
    fb[pick(NEG_INF_FRACTION)] = -np.inf
    both = pick(BOTH_NEG_INF_FRACTION)
    fa[both] = -np.inf
    fb[both] = -np.inf
    fa[pick(POS_INF_FRACTION)] = np.inf
    fb[pick(POS_INF_FRACTION)] = np.inf

    forced = FORCED[: min(len(FORCED), size // 2)]
    where = rng.permutation(size)[: len(forced)]
    for i, (a, b) in zip(where, forced):
        if a == "tie":
            fb[i] = fa[i] = np.float32(5.0 + 3.0 * rng.standard_normal())
            continue
        if a is not None:
            fa[i] = a
        if b is not None:
            fb[i] = b
        # a finite partner stays finite (the random marks above may have touched it)
        if a is None and not np.isfinite(fa[i]):
            fa[i] = np.float32(5.0 + 3.0 * rng.standard_normal())
        if b is None and not np.isfinite(fb[i]):
            fb[i] = np.float32(5.0 + 3.0 * rng.standard_normal())
    return {"va": va, "sa": sa, "vb": vb, "sb": sb}


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    base2 = base_is_two(variant)
    exp = np.exp2 if base2 else np.exp
    log = np.log2 if base2 else np.log
    a = inputs["sa"].astype(np.float64)
    b = inputs["sb"].astype(np.float64)
    a = np.where(np.isinf(a), -np.inf, a)  # +inf and -inf both mean "empty"
    b = np.where(np.isinf(b), -np.inf, b)
    m = np.maximum(a, b)
    empty = np.isneginf(m)  # both sides empty
    m_safe = np.where(empty, 0.0, m)
    wa = exp(a - m_safe)  # exp(-inf) = 0; the larger side gets exactly 1
    wb = exp(b - m_safe)
    total = wa + wb  # in [1, 2] where not empty, 0 where empty
    inv = np.where(empty, 0.0, 1.0 / np.where(empty, 1.0, total))
    va = inputs["va"].astype(np.float64)
    vb = inputs["vb"].astype(np.float64)
    v = va * (wa * inv)[..., None] + vb * (wb * inv)[..., None]
    s = np.where(empty, -np.inf, m_safe + log(np.where(empty, 1.0, total)))
    return {"v": v, "s": s}
