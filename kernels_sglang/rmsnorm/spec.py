"""rmsnorm: the RMS normalisation before attention and the MLP (docs/kernels.md section 2)."""

from astra_kernels.suite.schema import Anchor, ArgSpec, KernelSpec, Seed

# docs/kernels.md section 2: serving T x H, plus Astra's norm shapes (the fused_add_rmsnorm list of section 3).
_SERVING = [{"T": t, "H": h} for t in (1, 16, 128, 256, 1024, 2048, 16384) for h in (4096, 8192)]
_ASTRA = [{"T": t, "H": h} for t, h in (
    (128, 4096), (256, 4096), (1024, 4096), (2048, 8192), (128, 11008), (256, 13824), (512, 14336), (1024, 8192),
)]
# Edge cases: H not a multiple of 8 (vec = gcd(8, H) is 4, 2 or 1), more vectors than 1024 threads
# (several rounds, a ragged last one), a row narrower than a warp, odd row counts (tails of ROWS).
_ODD = [{"T": t, "H": h} for t, h in (
    (1, 4100),   # vec 4, 1025 vectors: 1024 threads, a second round with one vector
    (3, 1000),   # vec 8, 125 vectors: fewer than 4 warps
    (5, 5144),   # vec 8, 643 vectors
    (2, 4097),   # vec 1, 4097 vectors: five rounds of 1024
    (7, 12),     # vec 4, 3 vectors: most of the warp idle
    (3, 20000),  # vec 8, 2500 vectors: three rounds, a wide row
    (9, 2050),   # vec 2
)]
# SGLang's norms as points of the norm templates (rmsnorm's and fused_add_rmsnorm's have the same
# parameters): a CTA per row whose threads each hold ITEMS 16-byte vectors of it in registers, w
# loaded with x. SGLang's JIT fused_add_rmsnorm holds one vector a thread and its rmsnorm two (H / 16
# threads, rmsnorm_cta_double); four a thread was the fastest at rmsnorm 1024x8192 when every
# row-per-CTA configuration was timed on an H200 (bench/focused_grid.py, 2026-11-26), where this
# family won at all ten few-token shapes probed and the 4-second searches had measured few of it
# (docs/performance.md entry 16).
# Each is seeded twice: with the row length compiled in and no bounds checks (STATIC_ROW 2), as
# SGLang's JIT kernels are built (a C++ template on the hidden size), and as the run-time form
# (STATIC_ROW 0): at the few-token shapes the compiled-in form was the faster, at some 1024-2048-token
# shapes the run-time one (docs/performance.md entry 22), so the search measures both.
_VECTORS = "H * ELEM_BYTES / 16"  # a row's 16-byte vectors (true division: no seed where they do not split evenly)
ROW_SEEDS = [
    Seed(note=note + form, config={"ROW_THREADS": f"{_VECTORS} / {items}", "ROWS": "1", "VEC": "16 // ELEM_BYTES",
                                   "ITEMS": str(items), "PRELOAD_W": "1", "REG_CAP": "128", "CLUSTER": "1", "HINT": "0",
                                   "STATIC_ROW": static_row})
    for items, note in (
        (1, "SGLang's JIT fused_add_rmsnorm: a CTA per row, one 16-byte vector a thread"),
        (2, "SGLang's JIT rmsnorm (rmsnorm_cta_double): a CTA per row of H / 16 threads, two vectors each"),
        (4, "a CTA per row, four 16-byte vectors a thread"),
    )
    for static_row, form in (("2", "; the row length compiled in, no bounds checks"), ("0", "; the row length at run time"))
]
_ANCHORS = [
    # (shape, H200 SGLang us, H200 torch.compile us, H100 SGLang us, H100 torch.compile us)
    ((1024, 4096), 7.73, 5.97, 8.67, 6.92),
    ((16384, 8192), 191.88, 126.74, 209.59, 180.19),
]

SPEC = KernelSpec(
    name="rmsnorm",
    summary="out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, accumulated in fp32; contiguous rows",
    symbols=["T", "H"],
    args=[
        ArgSpec(name="x", role="in", dtype="T", shape=["T", "H"], doc="activations, contiguous rows"),
        ArgSpec(name="w", role="in", dtype="T", shape=["H"], doc="the norm's weight"),
        ArgSpec(name="out", role="out", dtype="T", shape=["T", "H"]),
        ArgSpec(name="eps", role="scalar", dtype="fp32", value="1e-6"),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="T"),
        ArgSpec(name="hidden", role="scalar", dtype="int32", value="H"),
    ],
    dtypes=["bf16", "fp16"],
    variants={"default": {}},
    shapes={"astra": _ASTRA, "serving": _SERVING, "odd": _ODD},
    bytes_moved="(2 * T * H + H) * ELEM_BYTES",
    flops="4 * T * H",
    seeds=ROW_SEEDS,
    sweep_widths=[{"H": 5120}, {"H": 3584}],  # the sweep's widths in no set: Qwen2.5-14B's and Qwen2-7B's hidden sizes
    anchors=[
        a for (t, h), hs, hc, ns, nc in _ANCHORS
        for a in (Anchor(device="H200", shape={"T": t, "H": h}, sglang_us=hs, torch_compile_us=hc),
                  Anchor(device="H100", shape={"T": t, "H": h}, sglang_us=ns, torch_compile_us=nc))
    ],
)
