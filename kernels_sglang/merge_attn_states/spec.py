"""merge_attn_states: merge two partial attention outputs by their log-sum-exp (docs/kernels.md section 4)."""

from astra_kernels.suite.schema import Anchor, ArgSpec, KernelSpec

_ASTRA = [(512, 32, 256), (512, 40, 128), (768, 32, 256), (768, 40, 128), (512, 64, 128)]
_SERVING = [(1, 32, 128), (16, 32, 128), (8192, 32, 128)]
# Head counts that are not powers of two, head dims that are not multiples of 8 (D=100 takes
# 4-element vectors; D=72 and D=96 take 8 but leave a partial last group of lanes), single tokens;
# 5x48x100 needs 25 x 48 = 1200 threads in SGLang's block, so the baseline loops over heads there.
_ODD = [(3, 5, 96), (1, 7, 72), (2, 3, 100), (1, 1, 128), (5, 48, 100)]


def _shape(n: int, hd: int, d: int) -> dict:
    return {"N": n, "HD": hd, "D": d}


_ANCHORS = [
    # (shape, H200 SGLang us, H200 torch.compile us, H100 SGLang us, H100 torch.compile us)
    ((512, 32, 256), 8.91, 8.63, 11.20, 9.83),
    ((512, 40, 128), 6.55, 6.64, 7.97, 7.50),
    ((768, 32, 256), 12.13, 11.45, 15.31, 14.00),
    ((768, 40, 128), 8.49, 8.17, 10.56, 9.53),
    ((512, 64, 128), 8.98, 8.56, 11.19, 10.24),
    ((8192, 32, 128), 50.57, 50.89, 68.93, 71.57),
]

SPEC = KernelSpec(
    name="merge_attn_states",
    summary=(
        "Per (token n, head h): m = max(sa, sb); wa = e^(sa-m); wb = e^(sb-m); "
        "v = (wa*va + wb*vb) / (wa+wb) over the D values; s = m + ln(wa+wb); fp32 math. "
        "Variant base2 uses 2^x and log2 (FlashInfer's merge_state, LSE in base 2). "
        "Infinite LSEs: an LSE of +inf or -inf means an empty partial state and is treated as -inf "
        "(as SGLang's merge_state_v2 does); one empty side gives the other side exactly "
        "(v = vb, s = sb); both empty gives v = 0 and s = -inf (SGLang would produce NaN there)."
    ),
    symbols=["N", "HD", "D"],
    args=[
        ArgSpec(name="va", role="in", dtype="T", shape=["N", "HD", "D"], doc="first partial output"),
        ArgSpec(name="sa", role="in", dtype="fp32", shape=["N", "HD"], doc="its log-sum-exp"),
        ArgSpec(name="vb", role="in", dtype="T", shape=["N", "HD", "D"], doc="second partial output"),
        ArgSpec(name="sb", role="in", dtype="fp32", shape=["N", "HD"], doc="its log-sum-exp"),
        ArgSpec(name="v", role="out", dtype="T", shape=["N", "HD", "D"], doc="merged output"),
        ArgSpec(name="s", role="out", dtype="fp32", shape=["N", "HD"], doc="merged log-sum-exp"),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="N"),
        ArgSpec(name="heads", role="scalar", dtype="int32", value="HD"),
        ArgSpec(name="head_dim", role="scalar", dtype="int32", value="D"),
    ],
    dtypes=["bf16", "fp16"],
    variants={"default": {"LSE_BASE2": 0}, "base2": {"LSE_BASE2": 1}},
    shapes={
        "astra": [_shape(*s) for s in _ASTRA],
        "serving": [_shape(*s) for s in _SERVING],
        "odd": [_shape(*s) for s in _ODD],
    },
    # va, vb read and v written (D elements each), sa, sb read and s written (fp32 each).
    bytes_moved="3 * N * HD * D * ELEM_BYTES + 12 * N * HD",
    # per element two multiplies and an add; per (token, head) about 10 (max, 2 exp, log, divide).
    flops="3 * N * HD * D + 10 * N * HD",
    # The default tolerances hold: s is fp32 with rtol 1e-4 / atol 1e-5, and fast-math exp/log
    # (ex2.approx, lg2.approx) err by a few 1e-7 absolute on s = m + log(1 + w), w in [0, 1].
    sweep_widths=[{"HD": 8, "D": 128}],  # the sweep's widths in no set: eight heads a GPU (a 64-head model over 8-way tensor parallelism)
    anchors=[
        a for (n, hd, d), hs, hc, ns, nc in _ANCHORS
        for a in (Anchor(device="H200", shape=_shape(n, hd, d), sglang_us=hs, torch_compile_us=hc),
                  Anchor(device="H100", shape=_shape(n, hd, d), sglang_us=ns, torch_compile_us=nc))
    ] + [Anchor(device="H200", shape=_shape(1, 32, 128), sglang_us=1.71, torch_compile_us=None)],
)
