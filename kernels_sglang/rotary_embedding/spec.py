"""Rotary position embedding (RoPE) of q and k in place, cos/sin from a per-position cache."""

from astra_kernels.suite.schema import ArgSpec, KernelSpec

_SYMBOLS = ["N", "HQ", "HK", "D", "R", "P"]


def _shape(n, hq, hk, d, r, p):
    return dict(zip(_SYMBOLS, (n, hq, hk, d, r, p)))


# docs/kernels.md section 5: Hq=32, Hk=8, D=R=128 and D=R=64, nnz in {1, 16, 256, 4096, 16384}. The
# cache holds 4096 positions for D=128 and 8192 for D=64 (2 MB either way); positions are drawn
# inside it.
_SERVING = [_shape(n, 32, 8, d, d, p) for d, p in ((128, 4096), (64, 8192)) for n in (1, 16, 256, 4096, 16384)]

_ODD = [
    _shape(1, 5, 1, 128, 128, 4096),    # a single token, head counts not powers of two
    _shape(37, 5, 1, 128, 64, 4096),    # partial rotary (R < D): dims >= R pass through
    _shape(256, 32, 8, 128, 64, 4096),  # partial rotary at serving head counts (GLM-style R = D/2)
    _shape(33, 7, 3, 72, 72, 1000),     # D = 72: R/2 = 36, so 16-byte bf16 vectors do not fit
    _shape(19, 6, 2, 80, 40, 2048),     # D = 80, R = 40: R/2 = 20, 4-element vectors
    _shape(5, 3, 1, 80, 20, 512),       # R/2 = 10: 2-element vectors
    _shape(3, 2, 1, 96, 30, 64),        # R/2 = 15 is odd: NeoX falls back to scalars
    _shape(100, 8, 4, 256, 256, 4096),  # D = 256 (Gemma-like): a head is a full warp at 16 bytes
    _shape(20000, 2, 1, 128, 128, 4096),  # enough tokens that SGLang picks its token-parallel kernel
]

SPEC = KernelSpec(
    name="rotary_embedding",
    summary=(
        "in place on q[N, HQ*D] and k[N, HK*D]: for each token t and head, with c, s the first and "
        "second halves of cos_sin_cache[positions[t], :R] (fp32), NeoX (default) rotates "
        "(x_i, x_{i+R/2}) -> (x_i c_i - x_{i+R/2} s_i, x_{i+R/2} c_i + x_i s_i) for i < R/2; "
        "interleaved (GPT-J) rotates (x_{2j}, x_{2j+1}) by (c_j, s_j); dims >= R unchanged; fp32 math"
    ),
    symbols=_SYMBOLS,
    args=[
        ArgSpec(name="positions", role="in", dtype="int64", shape=["N"], doc="position of each token, in [0, P)"),
        ArgSpec(name="q", role="inout", dtype="T", shape=["N", "HQ * D"], row_stride="q_stride",
                doc="query heads, rotated in place; its rows q_stride apart (a view into a QKV output)"),
        ArgSpec(name="k", role="inout", dtype="T", shape=["N", "HK * D"], row_stride="k_stride",
                doc="key heads, rotated in place; its rows k_stride apart"),
        ArgSpec(name="cos_sin_cache", role="in", dtype="fp32", shape=["P", "R"],
                doc="row p: cos(p * f_i) for i < R/2, then sin(p * f_i); f_i = 10000^(-2i/R)"),
        ArgSpec(name="nnz", role="scalar", dtype="int32", value="N"),
        ArgSpec(name="num_q_heads", role="scalar", dtype="int32", value="HQ"),
        ArgSpec(name="num_k_heads", role="scalar", dtype="int32", value="HK"),
        ArgSpec(name="head_dim", role="scalar", dtype="int32", value="D"),
        ArgSpec(name="rotary_dim", role="scalar", dtype="int32", value="R"),
        # SGLang's kernel takes q and k as they come out of the QKV projection's split, rows apart by
        # the fused width (q_stride_bytes, k_stride_bytes there): no copy before the rotation. The
        # suite's own runs pass contiguous q and k (these values); the exported op passes the views'.
        ArgSpec(name="q_stride", role="scalar", dtype="int32", value="HQ * D", doc="elements from one token's q row to the next"),
        ArgSpec(name="k_stride", role="scalar", dtype="int32", value="HK * D", doc="elements from one token's k row to the next"),
    ],
    dtypes=["bf16", "fp16"],
    variants={"default": {"INTERLEAVE": 0}, "interleaved": {"INTERLEAVE": 1}},
    shapes={"serving": _SERVING, "odd": _ODD},
    # What the operation needs: the positions, the rotated R dims of every head read and written
    # (dims >= R need not be touched: the buffer is updated in place), and one cache row per
    # distinct position (at most min(N, P) of them). SGLang also reads and rewrites dims >= R, so
    # on partial-rotary shapes it cannot reach this floor; a kernel that skips them can.
    bytes_moved="N * 8 + 2 * N * (HQ + HK) * R * ELEM_BYTES + min(N, P) * R * 4",
    bytes_written="N * (HQ + HK) * R * ELEM_BYTES",  # the rotated part of each head; the cache is read at N positions
    flops="3 * N * (HQ + HK) * R",
    # The default bf16/fp16 tolerances fit: the result is one fp32 rotation rounded once to the
    # storage type (tests/kernels_sglang/test_rotary_embedding.py simulates it against them).
    sweep_widths=[{"HQ": 40, "HK": 8, "D": 128, "R": 128, "P": 4096}],  # the sweep's widths in no set: Qwen2.5-14B's 40 query heads
    anchors=[],  # docs/kernels.md's H200/H100 tables have no rotary-embedding rows
)
