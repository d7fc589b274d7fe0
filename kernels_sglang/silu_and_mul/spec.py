"""silu_and_mul and its gelu variants: the gated activation of a transformer MLP."""

from astra_kernels.tools.measuring.problem import Tolerance

from astra_kernels.suite.schema import Anchor, ArgSpec, KernelSpec, Seed

_SERVING = [{"T": t, "D": d} for t in (1, 16, 128, 2048, 16384) for d in (14336, 28672)]
_ANCHORS = [
    # (shape, H200 SGLang us, H200 torch.compile us, H100 SGLang us, H100 torch.compile us)
    ((16, 4096), 2.55, 1.32, 2.68, 1.41),
    ((32, 5120), 4.44, 1.58, 4.56, 1.83),
    ((32, 8192), 5.48, 1.91, 5.55, 2.09),
    ((16, 12288), 7.23, 1.84, 7.32, 1.85),
    ((64, 8192), 5.68, 2.32, 5.93, 2.56),
    ((2048, 14336), 44.79, 42.09, 64.05, 59.76),
]
# Inductor's launch of this op as a point of the template (torch.compile's Triton kernel, read with
# Nsight Compute in docs/performance.md entry 11): one flat grid of 128-thread CTAs, each thread one
# 16-byte vector of each half, 1024 bf16 outputs a CTA, the row length a constant of the kernel (it
# compiles each shape); and the same with the streaming hints. At the large token counts
# torch.compile led the tuned table by 3-5% on an H200 (a sweep bench, 2026-11-28) while the
# searches had measured 2-4 flat configurations a shape, all with UNROLL=1 and no hints: seeded,
# every tune measures the peer's own launch shape at every shape. The third seed is the focused
# grid's fastest at 1-4 tokens on an H200 (bench/focused_grid.py, 2026-11-29: 1x14336, 4x14336,
# 4x11008), a few-token row split over 16 CTAs with the row length compiled in, where the shipped
# picks (row length read at run time) were 2-3% behind torch.compile.
_INDUCTOR = {"FLAT": "1", "THREADS": "128", "VEC": "16 // ELEM_BYTES", "UNROLL": "1", "CHUNKS": "1", "ROWS": "1",
             "FAST_MATH": "1", "STATIC_D": "1"}
SEEDS = [
    *(Seed(note="Inductor's pointwise launch: a flat grid of 128-thread CTAs, one 16-byte vector a thread, the row "
                "length compiled in" + form, config={**_INDUCTOR, "STREAM": stream})
      for stream, form in (("0", ""), ("1", "; streaming cache hints"))),
    Seed(note="a few-token row split over 16 CTAs of 128 threads, streaming, the row length compiled in",
         config={"FLAT": "0", "THREADS": "128", "VEC": "16 // ELEM_BYTES", "UNROLL": "1", "CHUNKS": "16", "ROWS": "1",
                 "FAST_MATH": "1", "STREAM": "1", "STATIC_D": "1"}),
]

SPEC = KernelSpec(
    name="silu_and_mul",
    summary="out[t, i] = act(x[t, i]) * x[t, d + i] for i < d; act is silu, gelu (erf) or gelu_tanh; fp32 math",
    symbols=["T", "D"],
    args=[
        ArgSpec(name="x", role="in", dtype="T", shape=["T", "2 * D"], doc="gate half then up half"),
        ArgSpec(name="out", role="out", dtype="T", shape=["T", "D"]),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="T"),
        ArgSpec(name="d", role="scalar", dtype="int32", value="D"),
    ],
    dtypes=["bf16", "fp16", "fp32"],
    variants={"default": {"ACT": 0}, "gelu": {"ACT": 1}, "gelu_tanh": {"ACT": 2}},
    shapes={
        "astra": [{"T": t, "D": d} for t, d in ((16, 4096), (32, 5120), (32, 8192), (16, 12288), (64, 8192))],
        "serving": _SERVING,
        "odd": [{"T": 1, "D": 4097}, {"T": 3, "D": 1002}, {"T": 7, "D": 1000}, {"T": 5, "D": 12}],
    },
    bytes_moved="3 * T * D * ELEM_BYTES",
    flops="T * D * 6",
    # fp32 under --use_fast_math (as SGLang builds it) computes tanh with tanh.approx.f32; where
    # 1 + tanh(u) is small, gelu_tanh's output carries absolute errors up to 3.1e-5 (H200,
    # 2026-11-22: 0.1% of elements past atol 1e-5, relative norm error 1.3e-6), so fp32 allows an
    # absolute 1e-4 and keeps the default relative and norm bounds.
    tolerances={"fp32": Tolerance(rtol=1e-4, atol=1e-4, max_norm_error=1e-5)},
    seeds=SEEDS,
    sweep_widths=[{"D": 11008}, {"D": 18944}],  # the sweep's widths in no set: Llama-2-7B's and Qwen2-7B's intermediate sizes
    anchors=[
        a for (t, d), hs, hc, ns, nc in _ANCHORS
        for a in (Anchor(device="H200", shape={"T": t, "D": d}, sglang_us=hs, torch_compile_us=hc),
                  Anchor(device="H100", shape={"T": t, "D": d}, sglang_us=ns, torch_compile_us=nc))
    ],
)
