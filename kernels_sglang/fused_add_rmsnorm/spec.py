"""fused_add_rmsnorm: the residual add and RMS norm between transformer layers (docs/kernels.md section 3)."""

from astra_kernels.kernels_sglang.rmsnorm.spec import _ASTRA, _ODD, _SERVING, ROW_SEEDS
from astra_kernels.suite.schema import Anchor, ArgSpec, KernelSpec, Seed

# The same shape sets as rmsnorm: Astra's norm shapes are this kernel's (section 3); docs/kernels.md
# lists serving shapes for rmsnorm only, but the norm runs on the same token counts and widths
# (the 16384x8192 anchor below is one of them); the odd set covers the same edge cases, and its
# 3x20000 row is 80 KB of fp32 in the baseline's shared memory.
# torch.compile's own form of this kernel, as the template expresses it (docs/performance.md entry
# 31: Inductor's generated kernel under ncu on an H200, 2026-11-29): a CTA of 512 threads per row,
# two passes, the second reading x and residual again from L2 (RELOAD) under eviction hints, nothing
# held between them, so few registers (26-30 in Inductor's). Measured first at every shape: in the
# focused grid it was the fastest form at 5175x4096, 16384x4096 (32 registers, the row length
# compiled in) and 11643x8192 (128 registers, the row length at run time), where a search of a
# few evaluations a shape in a space of thousands rarely lands on it.
TWO_PASS_SEEDS = [
    Seed(note=f"torch.compile's fused add-norm: two passes, 512 threads a row, pass 2 re-reading from L2; {note}",
         config={"ROW_THREADS": "512", "ROWS": "1", "VEC": "16 // ELEM_BYTES", "ITEMS": "0", "PRELOAD_W": "0",
                 "REG_CAP": reg_cap, "CLUSTER": "1", "HINT": "1", "STATIC_ROW": static_row, "RELOAD": "1"})
    for reg_cap, static_row, note in (("32", "1", "32 registers, the row length compiled in"),
                                      ("128", "0", "128 registers, the row length at run time"))
]
_ANCHORS = [
    # (shape, H200 SGLang us, H200 torch.compile us, H100 SGLang us, H100 torch.compile us)
    ((128, 4096), 3.82, 3.36, 4.23, 3.60),
    ((256, 4096), 4.88, 3.79, 5.52, 4.29),
    ((1024, 4096), 11.20, 9.27, 14.32, 11.53),
    ((2048, 8192), 36.91, 34.54, 48.51, 47.15),
    ((128, 11008), 6.38, 8.24, 7.32, 8.96),
    ((256, 13824), 9.94, 14.01, 12.25, 16.98),
    ((512, 14336), 18.42, 18.54, 23.39, 23.04),
    ((1024, 8192), 20.25, 18.69, 26.06, 23.93),
    ((16384, 8192), 265.42, 253.71, 364.17, 358.52),
]

SPEC = KernelSpec(
    name="fused_add_rmsnorm",
    summary=("s = fp32(x) + fp32(residual); residual <- s rounded to T; "
             "x <- s / sqrt(mean(s^2) + eps) * w from the unrounded fp32 s; in place, contiguous rows"),
    symbols=["T", "H"],
    args=[
        ArgSpec(name="x", role="inout", dtype="T", shape=["T", "H"],
                doc="in: the layer's output; out: the normalised sum"),
        ArgSpec(name="residual", role="inout", dtype="T", shape=["T", "H"],
                doc="in: the residual stream; out: x + residual"),
        ArgSpec(name="w", role="in", dtype="T", shape=["H"], doc="the norm's weight"),
        ArgSpec(name="eps", role="scalar", dtype="fp32", value="1e-6"),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="T"),
        ArgSpec(name="hidden", role="scalar", dtype="int32", value="H"),
    ],
    dtypes=["bf16", "fp16"],
    variants={"default": {}},
    shapes={"astra": _ASTRA, "serving": _SERVING, "odd": _ODD},
    bytes_moved="(4 * T * H + H) * ELEM_BYTES",
    flops="5 * T * H",
    seeds=[*TWO_PASS_SEEDS, *ROW_SEEDS],  # first: a budget too small for all of them keeps these
    sweep_widths=[{"H": 5120}, {"H": 3584}],  # the sweep's widths in no set: Qwen2.5-14B's and Qwen2-7B's hidden sizes
    anchors=[
        a for (t, h), hs, hc, ns, nc in _ANCHORS
        for a in (Anchor(device="H200", shape={"T": t, "H": h}, sglang_us=hs, torch_compile_us=hc),
                  Anchor(device="H100", shape={"T": t, "H": h}, sglang_us=ns, torch_compile_us=nc))
    ],
)
