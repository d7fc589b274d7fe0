"""The kinds of FlashInfer-Bench definition this project can write a CUDA kernel for, soundly.

A definition's reference is arbitrary PyTorch; turning it into CUDA in general is the agent's job
(a generator fills a folder's baseline when a model is configured). What the importer can do
without a model is recognise a definition as one of these families and prove it: a family names
the pattern of tensors it takes (shapes over one var and one const axis, dtypes), holds a float64
NumPy statement of its math with the few constants a definition may choose (the norm's eps, the
gated activation), and its template and baseline, whose kernel takes the family's arguments in the
family's order. A definition matches when its tensors fit the pattern AND its own reference,
run on the CPU, agrees with the family's math at every probe (inputs at scales where eps decides
the result; odd token counts) for exactly one choice of the constants. The tuner then checks the
kernel against the definition's own reference at every shape, as for any kernel folder.

Each family's sources are a folder beside this file (add_rmsnorm/) or a suite kernel's own files
(the suite's rmsnorm and silu_and_mul templates take exactly these arguments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from astra_kernels import suite

FAMILIES_DIR = Path(__file__).parent
EPS_CANDIDATES = (1e-6, 1e-5, 1e-8, 1e-12, 1e-3)  # what norms use, commonest first
ACTS = {"silu": 0, "gelu": 1, "gelu_tanh": 2}  # silu_and_mul's ACT define per activation


@dataclass(frozen=True)
class Slot:
    """One tensor argument of a family's kernel: its role, its shape over the family's symbols."""
    key: str            # the family's own name for it (x, w, out, ...)
    role: str           # in / out
    shape: tuple[str, ...]


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    symbols: tuple[str, str]           # (tokens, width): the var axis and the const axis
    slots: tuple[Slot, ...]            # the kernel's tensor arguments, in its order
    scalars: tuple[tuple[str, str, str], ...]  # (name, dtype, value) after the tensors, in the kernel's order
    sources: Path                      # the folder holding template.cu and baseline.cu
    bytes_moved: str
    flops: str
    math: Callable[..., dict]          # float64 NumPy: (arrays by slot key, constants) -> {out key: array}
    constants: dict[str, tuple] = field(default_factory=dict)  # a constant and the values to probe
    seeds_from: str | None = None      # a suite kernel whose spec's seeds fit this template
    tolerances_from: str | None = None  # a suite kernel whose tolerances this kernel keeps
    width_scale: int = 1               # the input row is this many widths (gated: 2, gate then up)

    def defines(self, constants: dict) -> dict[str, int]:
        return {"ACT": ACTS[constants["act"]]} if "act" in constants else {}


def _rms(s: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return s / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + eps) * w


def _rmsnorm(a: dict, c: dict) -> dict:
    return {"out": _rms(a["x"], a["w"], c["eps"])}


def _add_rmsnorm(a: dict, c: dict) -> dict:
    return {"out": _rms(a["x"] + a["r"], a["w"], c["eps"])}


def _act(u: np.ndarray, act: str) -> np.ndarray:
    if act == "silu":
        return u / (1.0 + np.exp(-u))
    if act == "gelu":
        return 0.5 * u * (1.0 + np.vectorize(math.erf)(u / math.sqrt(2.0)))
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def _gated(a: dict, c: dict) -> dict:
    d = a["x"].shape[-1] // 2
    return {"out": _act(a["x"][:, :d], c["act"]) * a["x"][:, d:]}


_NORM_SCALARS = (("eps", "fp32", "eps"), ("tokens", "int32", "T"), ("hidden", "int32", "H"))

FAMILIES = (
    Family("rmsnorm", "out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, fp32 math", ("T", "H"),
           (Slot("x", "in", ("T", "H")), Slot("w", "in", ("H",)), Slot("out", "out", ("T", "H"))),
           _NORM_SCALARS, suite.SUITE_DIR / "rmsnorm", "(2 * T * H + H) * ELEM_BYTES", "4 * T * H",
           _rmsnorm, {"eps": EPS_CANDIDATES}, seeds_from="rmsnorm", tolerances_from="rmsnorm"),
    Family("add_rmsnorm", "s = x + r in fp32; out = s / sqrt(mean(s^2) + eps) * w; x and r unchanged",
           ("T", "H"),
           (Slot("x", "in", ("T", "H")), Slot("r", "in", ("T", "H")), Slot("w", "in", ("H",)),
            Slot("out", "out", ("T", "H"))),
           _NORM_SCALARS, FAMILIES_DIR / "add_rmsnorm", "(3 * T * H + H) * ELEM_BYTES", "5 * T * H",
           _add_rmsnorm, {"eps": EPS_CANDIDATES}, tolerances_from="fused_add_rmsnorm"),
    Family("gated_activation", "out[t, i] = act(x[t, i]) * x[t, D + i]; act silu, gelu or gelu_tanh; fp32 math",
           ("T", "D"),
           (Slot("x", "in", ("T", "2 * D")), Slot("out", "out", ("T", "D"))),
           (("tokens", "int32", "T"), ("d", "int32", "D")), suite.SUITE_DIR / "silu_and_mul",
           "3 * T * D * ELEM_BYTES", "T * D * 6", _gated, {"act": tuple(ACTS)},
           tolerances_from="silu_and_mul", width_scale=2),
)


def by_name(name: str) -> Family:
    return next(f for f in FAMILIES if f.name == name)
