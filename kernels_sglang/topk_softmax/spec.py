"""topk_softmax: MoE gating, softmax over the experts then the top-k experts of each token."""

from astra_kernels.suite.schema import ArgSpec, KernelSpec, Seed

# docs/kernels.md section 6: T in {1, 128, 4096, 32768} x E in {8, 64, 128, 256} x k in {2, 8}.
_SERVING = [{"T": t, "E": e, "K": k} for t in (1, 128, 4096, 32768) for e in (8, 64, 128, 256) for k in (2, 8)]

# Expert counts of real models that are not powers of two (SGLang's two-launch fallback path,
# done here in one launch), odd token counts, k not a power of two, and k == E.
_ODD = [
    {"T": 1, "E": 60, "K": 4},      # Qwen1.5-MoE-A2.7B: 60 experts, top-4; a single token
    {"T": 3, "E": 6, "K": 2},       # fewer experts than one 16-byte vector holds
    {"T": 5, "E": 6, "K": 6},       # k == E: every expert is selected
    {"T": 7, "E": 64, "K": 6},      # DeepSeek-V2-Lite: 64 experts, top-6
    {"T": 129, "E": 160, "K": 6},   # DeepSeek-V2: 160 experts, top-6; 129 rows leave a partial CTA
    {"T": 33, "E": 384, "K": 8},    # Kimi-K2: 384 experts, top-8; wider than SGLang's fused path
]

# The sorted forms (template.cu, SORT and STORE), measured at every shape of every tune: a search
# of a few evaluations a shape would rarely reach them, and they are what beats torch.compile's
# sort where k is close to E (8 of 8 experts: the selecting form lost 19 of 27 sweep points on an
# H200, docs/benchmarks.md 2026-11-29). A seed is measured only where its constraints hold (a lane
# sorts at most 32 keys; STORE 1 needs K / GROUP > 1).
_SORTED = {"LOAD_BYTES": "16", "ROWS": "1", "KEYS": "1", "FAST_MATH": "1", "SORT": "1"}
SEEDS = [
    Seed(note="a lane per row, its keys sorted in registers once, its k selections written as vectors of up to 16 bytes",
         config={**_SORTED, "TPR": "1", "WARPS": "4", "STORE": "1"}),
    Seed(note="a lane per row, sorted, vector stores, one warp a CTA (few tokens: no idle warps)",
         config={**_SORTED, "TPR": "1", "WARPS": "1", "STORE": "1"}),
    Seed(note="eight lanes a row, each sorting its share; a selection compares the eight lanes' first keys",
         config={**_SORTED, "TPR": "8", "WARPS": "4", "STORE": "0"}),
]

SPEC = KernelSpec(
    name="topk_softmax",
    summary=(
        "p = softmax(gating[t, :]) in fp32; indices[t, :] = the k experts with the largest logits "
        "(ties to the lower index), weights[t, :] = their p (renormalize: divided by their sum)"
    ),
    symbols=["T", "E", "K"],
    args=[
        ArgSpec(name="gating", role="in", dtype="T", shape=["T", "E"], doc="router logits, one row per token"),
        ArgSpec(name="weights", role="out", dtype="fp32", shape=["T", "K"],
                doc="softmax probabilities of the selected experts, largest first"),
        ArgSpec(name="indices", role="out", dtype="int32", shape=["T", "K"],
                doc="the selected experts, by decreasing logit; equal logits go to the lower index first"),
        ArgSpec(name="tokens", role="scalar", dtype="int32", value="T"),
        ArgSpec(name="experts", role="scalar", dtype="int32", value="E"),
        ArgSpec(name="k", role="scalar", dtype="int32", value="K"),
    ],
    dtypes=["bf16", "fp16", "fp32"],
    variants={"default": {"RENORM": 0}, "renormalize": {"RENORM": 1}},
    shapes={"serving": _SERVING, "odd": _ODD},
    # The logits read once; weights (fp32) and indices (int32) written once.
    bytes_moved="T * E * ELEM_BYTES + T * K * 8",
    # Per logit: subtract the max, exp, add to the sum, one compare per selection round.
    flops="T * E * (3 + K)",
    # Weights use the default fp32 tolerance (rtol 1e-4, atol 1e-5): the probabilities are fp32
    # math on exact logits, and fast-math exp (ex2.approx) is off by a few ulp at most.
    # docs/kernels.md has no measured rows for topk_softmax in its H200 or H100 tables: no anchors.
    sweep_widths=[{"E": 32, "K": 4}],  # the sweep's widths in no set: 32 experts, top 4
    anchors=[],
    seeds=SEEDS,
)
