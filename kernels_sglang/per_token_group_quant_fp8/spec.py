"""per_token_group_quant_fp8: dynamic fp8 (e4m3) quantisation of activations, one scale per group
of 128 contiguous elements of a token's row (DeepSeek-V3-style block-wise fp8 GEMM inputs)."""

from astra_kernels.tools.measuring.problem import Tolerance

from astra_kernels.suite.schema import ArgSpec, KernelSpec
from .reference import EPS, GROUP

# The op is defined on whole groups: every shape keeps H a multiple of GROUP (128), so the odd set
# varies the number of groups (1, 3, 5, 7, 9 ... per row and in all, not powers of two) and the
# token count instead of the width. The extra odd shapes cover each groups-per-CTA branch of
# SGLang's launch (total groups divisible by 16, 8, 4, 2 or only 1).
_SERVING = [{"T": t, "H": h} for t in (1, 128, 4096, 16384) for h in (7168, 16384)]
_ODD = [{"T": t, "H": h} for t in (1, 3) for h in (128, 384, 1152)] + [
    {"T": 2, "H": 640},    # 10 groups: 2 per CTA in SGLang's launch
    {"T": 7, "H": 1536},   # 84 groups: 4 per CTA
    {"T": 9, "H": 1024},   # 72 groups: 8 per CTA
    {"T": 5, "H": 896},    # 35 groups: 1 per CTA
    {"T": 33, "H": 2432},  # 627 groups: 19 per row
]

SPEC = KernelSpec(
    name="per_token_group_quant_fp8",
    summary=(
        f"per group of {GROUP} contiguous elements of a row of x[T, H]: s = max(eps, max|x|) / 448 "
        f"(eps = {EPS:g}), q = clamp(x / s, -448, 448) rounded to fp8 e4m3 (nearest-even, satfinite); "
        f"scales[T, H / {GROUP}] fp32 row-major. H must be a multiple of {GROUP} (the op is defined on "
        "whole groups). Not covered: column-major scales (SGLang's option for DeepGEMM: scales stored "
        "[H/128, T], a different output shape the schema cannot express per variant), UE8M0 (power-of-two) "
        "scales and int8 output."
    ),
    symbols=["T", "H"],
    args=[
        ArgSpec(name="x", role="in", dtype="T", shape=["T", "H"], doc="activations, row-major"),
        ArgSpec(name="q", role="out", dtype="fp8_e4m3", shape=["T", "H"], doc="quantised x / s"),
        ArgSpec(name="scales", role="out", dtype="fp32", shape=["T", f"H // {GROUP}"],
                doc="s per group, row-major: scales[t, j] belongs to x[t, j*128 : (j+1)*128]"),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="T"),
        ArgSpec(name="hidden", role="scalar", dtype="int32", value="H"),
        ArgSpec(name="eps", role="scalar", dtype="fp32", value=repr(EPS),
                doc="floor of the group's absmax (SGLang's default 1e-10)"),
    ],
    dtypes=["bf16", "fp16"],
    variants={"default": {}},
    shapes={"serving": _SERVING, "odd": _ODD},
    bytes_moved=f"T * H * ELEM_BYTES + T * H + T * (H // {GROUP}) * 4",
    flops="T * H * 4",  # |x| and max, then scale and clamp, per element
    tolerances={
        # q: the default fp8_e4m3 tolerance (rtol 0.13, atol 0.02, norm 0.07) lets round-toward-zero
        # (error up to one e4m3 ulp, 1/8 relative) pass. Round-to-nearest-even of the fp32 x / s is at
        # most half an ulp away from the exact float64 x / s: 2^-4 = 0.0625 relative for normals
        # (|q| >= 2^-6), 2^-10 absolute for subnormals; fp32 math (x * (1/s), fast-math division)
        # adds ~1e-6 relative. The limits below leave that margin and no more; the test simulates
        # that correctly rounded outputs pass and that truncated, off-by-one-ulp and wrong-scale
        # outputs fail.
        "fp8_e4m3": Tolerance(rtol=0.07, atol=1.0e-3, max_norm_error=0.04),
        # scales: positive, as small as eps / 448 ~ 2e-13 (and ~1e-6 for the tiny groups), so the
        # default fp32 atol of 1e-5 would accept any value there. s = absmax / 448 is one fp32
        # rounding (or a few ulps with fast math or absmax * (1/448)): relative 1e-5 is ample.
        "fp32": Tolerance(rtol=1.0e-5, atol=0.0, max_norm_error=1.0e-5),
    },
    # docs/kernels.md's H200 and H100 tables have no per_token_group_quant_fp8 rows: no anchors.
    sweep_widths=[{"H": 4096}],  # the sweep's widths in no set: a Llama-sized hidden size, whole groups of 128
    anchors=[],
)
