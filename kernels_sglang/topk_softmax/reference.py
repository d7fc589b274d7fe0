"""float64 reference for topk_softmax, and router logits with deliberate exact ties.

Selection is by the logits as stored (exact in every storage type), largest first, ties to the
lower expert index: softmax is strictly increasing, so this is the top-k of the exact
probabilities. Selecting on rounded fp32 probabilities instead could merge two different logits
(exp rounds them to one float) or order near-ties differently, and the indices are compared
exactly. The weights are the float64 softmax probabilities of the selected experts.
"""

from __future__ import annotations

import numpy as np

from astra_kernels.tools.toolchain.dtypes import numpy_dtype

# Row kinds drawn by make_inputs: exact ties across the k-th boundary, ties on the maximum, rows
# on a coarse grid (many ties everywhere, exact zeros of both signs), and plain rows.
BOUNDARY_TIE, TOP_TIE, COARSE = 0, 1, 2
_KINDS = 10  # kinds 3..9 are plain rows: 70% plain, 10% of each tie kind


def make_inputs(rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
    """Router logits as a gating layer produces them, N(0, s^2) with s in [1, 3] per token, with
    exact ties planted so that tie-breaking (to the lower index) decides some selections."""
    t, e, k = shape["T"], shape["E"], shape["K"]
    storage = numpy_dtype(dtype)
    scale = rng.uniform(1.0, 3.0, size=(t, 1))
    x = rng.standard_normal((t, e)) * scale
    kind = rng.integers(0, _KINDS, size=t)
    kind[0] = BOUNDARY_TIE  # single-token shapes always see a tie at the k-th place
    coarse = kind == COARSE
    x[coarse] = np.round(x[coarse] * 2.0) / 2.0  # multiples of 0.5; np.round gives -0.0 too
    g = x.astype(storage)
    if e >= 2:
        # Copy values in the storage type, so the ties are exact whatever the rounding.
        order = np.argsort(-g.astype(np.float64), axis=1, kind="stable")
        # Rank hi and hi + 1 share a value: the k-th selection is decided by the index
        # (when k == E, the last two selected share one instead).
        hi = k - 1 if k < e else k - 2
        rows = np.nonzero(kind == BOUNDARY_TIE)[0]
        g[rows, order[rows, hi + 1]] = g[rows, order[rows, hi]]
        if hi + 2 < e:  # half of them: a three-way tie straddling the boundary
            three = rows[rng.random(rows.size) < 0.5]
            g[three, order[three, hi + 2]] = g[three, order[three, hi]]
        rows = np.nonzero(kind == TOP_TIE)[0]
        g[rows, order[rows, 1]] = g[rows, order[rows, 0]]
        if e >= 3:
            three = rows[rng.random(rows.size) < 0.5]
            g[three, order[three, 2]] = g[three, order[three, 0]]
    return {"gating": g}


def reference(inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
    k = shape["K"]
    x = inputs["gating"].astype(np.float64)
    # Stable sort of the negated logits: largest first, equal logits in index order.
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    m = x.max(axis=1, keepdims=True)
    ex = np.exp(x - m)
    p = ex / ex.sum(axis=1, keepdims=True)
    w = np.take_along_axis(p, order, axis=1)
    if variant == "renormalize":
        w = w / w.sum(axis=1, keepdims=True)
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}")
    return {"weights": w, "indices": order.astype(np.int32)}
