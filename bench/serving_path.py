"""A Llama-style decoder layer with the suite's ops, eager, in a CUDA graph and under torch.compile:
issue 40's end-to-end measure of what a serving engine gets from the exported kernels.

The layer (Llama 3 8B's sizes: hidden 4096, intermediate 14336, 32 query and 8 KV heads of 128):

    x, residual = fused_add_rmsnorm(x, residual, w_in)        # input norm
    q, k, v = split(x @ W_qkv);  rope(positions, q, k)         # in place, q and k views into x @ W_qkv
    a = SDPA(q, k, v, causal)                                  # torch; K, V repeated per query head
    x, residual = fused_add_rmsnorm(a @ W_o, residual, w_post) # post-attention norm
    x = silu_and_mul(x @ W_gate_up) @ W_down                   # the MLP

with the T tokens as one causal sequence (prefill-shaped at many tokens, decode-sized GEMMs at few).
The suite's three ops come either from the exported kernels registered as PyTorch ops
(runtime/torch_op.py: `astra`; the shipped tables of this GPU's kind, or the H200's where only it
has one), or in SGLang's own PyTorch forms (`forward_native`: each kernel's peer.py, `native`).
Measured per token count, each the median of ROUNDS rounds with their range kept, the rounds of all
the variants interleaved (a round takes one sample of each), so a host or GPU whose speed drifts over
the run moves them alike:

- eager: the layer called back to back (wall time per call: host and device, whichever is longer);
- graph: the layer captured once in a CUDA graph and replayed (device time; what decode pays);
- compile: the layer under torch.compile (its default mode, automatic dynamic shapes, as a user
  writes it) called eagerly, and `graph+compile`: the compiled layer captured in a CUDA graph;
- ops: the suite's calls alone in a CUDA graph, for their share of the layer.

Each variant's output is compared with the native eager layer's (bf16, the same weights); a run
whose astra layer disagrees says so in its JSON. The report counts issue 40's comparisons as faster
or slower only where the two points' ranges do not overlap. Nothing here is asserted: a benchmark,
not a test.

    python3 -P bench/serving_path.py --out DIR [--tokens 1,16,256,4096] [--profile 4]   # on a GPU
    python3 bench/serving_path.py --from DIR/layer.json --out DIR    # the table and chart again, no GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 4096, 14336, 32, 8, 128
EPS = 1e-5
TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 8192)
ROUNDS = 7  # samples per point: the medians, and the range that says whether two points differ


class Weights:
    def __init__(self, torch, seed: int = 0):
        g = torch.Generator(device="cuda").manual_seed(seed)

        def w(*shape, scale):
            return (torch.randn(shape, generator=g, device="cuda") * scale).to(torch.bfloat16)

        self.norm_in, self.norm_post = w(HIDDEN, scale=0.1) + 1, w(HIDDEN, scale=0.1) + 1
        self.qkv = w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN, scale=HIDDEN ** -0.5)
        self.o = w(HIDDEN, HEADS * HEAD_DIM, scale=(HEADS * HEAD_DIM) ** -0.5)
        self.gate_up = w(2 * INTERMEDIATE, HIDDEN, scale=HIDDEN ** -0.5)
        self.down = w(HIDDEN, INTERMEDIATE, scale=INTERMEDIATE ** -0.5)
        inv = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))
        angles = torch.outer(torch.arange(16384, device="cuda").float(), inv)
        self.cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)


def suite_ops(torch, kind: str, exports: dict[str, Path] | None):
    """(norm, act, rope): the suite's three ops of the layer, as `kind` runs them."""
    if kind == "astra":
        from astra_kernels.runtime import torch_op

        fused, silu = torch_op.load(exports["fused_add_rmsnorm"]), torch_op.load(exports["silu_and_mul"])
        rotary = torch_op.load(exports["rotary_embedding"])

        def norm(x, residual, w):
            fused(x, residual, w, EPS)  # in place: x the normalised rows, residual the sum
            return x, residual

        def act(gate_up):
            out = torch.empty(gate_up.shape[0], gate_up.shape[1] // 2, dtype=gate_up.dtype, device=gate_up.device)
            silu(gate_up, out)
            return out

        def rope(positions, q, k, cos_sin):  # in place on q and k
            rotary(positions, q, k, cos_sin, HEADS, KV_HEADS, HEAD_DIM)
        return norm, act, rope
    from astra_kernels import suite

    norm_peer, act_peer = suite.load_peer("fused_add_rmsnorm").forward, suite.load_peer("silu_and_mul").forward
    rope_peer = suite.load_peer("rotary_embedding").forward

    def norm(x, residual, w):
        got = norm_peer({"x": x, "residual": residual, "w": w}, {"eps": EPS}, "default")
        return got["x"], got["residual"]

    def act(gate_up):
        return act_peer({"x": gate_up}, {}, "default")["out"]

    def rope(positions, q, k, cos_sin):
        rope_peer({"q": q, "k": k, "positions": positions, "cos_sin_cache": cos_sin},
                  {"head_dim": HEAD_DIM, "rotary_dim": HEAD_DIM}, "default")
    return norm, act, rope


def make_layer(torch, weights: Weights, norm, act, rope):
    import torch.nn.functional as F

    def layer(x, residual, positions):
        t = x.shape[0]
        x, residual = norm(x, residual, weights.norm_in)
        q, k, v = F.linear(x, weights.qkv).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        rope(positions, q, k, weights.cos_sin)  # q and k where they lie, as SGLang's RotaryEmbedding takes them
        group = HEADS // KV_HEADS  # K and V repeated per query head, 4-D: SDPA's flash kernel takes them
        a = F.scaled_dot_product_attention(
            q.view(1, t, HEADS, HEAD_DIM).transpose(1, 2),
            k.view(1, t, KV_HEADS, HEAD_DIM).repeat_interleave(group, dim=2).transpose(1, 2),
            v.reshape(1, t, KV_HEADS, HEAD_DIM).repeat_interleave(group, dim=2).transpose(1, 2), is_causal=True)
        x, residual = norm(F.linear(a.transpose(1, 2).reshape(t, HEADS * HEAD_DIM), weights.o), residual,
                           weights.norm_post)
        return F.linear(act(F.linear(x, weights.gate_up)), weights.down), residual
    return layer


def inputs(torch, tokens: int, seed: int = 1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, HIDDEN, generator=g, device="cuda").to(torch.bfloat16)
    residual = torch.randn(tokens, HIDDEN, generator=g, device="cuda").to(torch.bfloat16)
    return x, residual, torch.arange(tokens, device="cuda")


def eager_sampler(torch, call, calls: int):
    """One sample per call of the result: the wall time per call of `calls` back-to-back calls."""
    for _ in range(3):
        call()

    def sample() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls * 1e6
    return sample


def graph_sampler(torch, call, replays: int):
    """One sample per call of the result: `call` captured in a CUDA graph, replayed `replays` times
    back to back, the device time per replay, and the graph released. Captured anew for every sample
    so that rounds interleave (the GPU's clocks drift between windows too: 7% at 4096 tokens between
    two H200 runs) while one graph at a time is alive: ten graphs kept alive across interleaved eager
    calls met an illegal address at 4096 tokens on an H200 (2026-11-27)."""
    def sample() -> float:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        for _ in range(3):
            graph.replay()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        stop.record()
        stop.synchronize()
        del graph
        return start.elapsed_time(stop) * 1000.0 / replays
    return sample


def interleaved(samplers: dict, rounds: int = ROUNDS) -> dict[str, list[float]]:
    """`rounds` samples of each sampler, a round taking one of every sampler (in reverse order every
    other round): a host whose speed drifts over seconds (shared machines do, by 2x at times) moves
    the samples of every variant alike, so two variants' ranges compare like with like."""
    samples: dict[str, list[float]] = {key: [] for key in samplers}
    keys = list(samplers)
    for r in range(rounds):
        for key in keys if r % 2 == 0 else reversed(keys):
            samples[key].append(samplers[key]())
    return samples


def record(row: dict, key: str, samples: list[float]) -> None:
    """The median as `<key>_us`, and the samples' range as `<key>_lo`, `<key>_hi`."""
    row[f"{key}_us"], row[f"{key}_lo"], row[f"{key}_hi"] = statistics.median(samples), min(samples), max(samples)


# (what, ours, theirs): issue 40's goals, each a pair of the row's measurements
COMPARISONS = [
    ("eager: astra's ops / SGLang's native forms", "eager_astra", "eager_native"),
    ("CUDA graph: astra's ops / SGLang's native forms", "graph_astra", "graph_native"),
    ("CUDA graph: the eager layer with astra's ops / torch.compile's layer", "graph_astra", "graph_compile_native"),
    ("CUDA graph of torch.compile: astra's ops / torch.compile's own layer", "graph_compile_astra",
     "graph_compile_native"),
    ("torch.compile called eagerly: astra's ops / torch.compile's own layer", "compile_astra", "compile_native"),
]


def compare(row: dict, ours: str, theirs: str) -> str:
    """"faster" or "slower" where the two sample ranges do not overlap, else "within the spread"."""
    if row[f"{ours}_hi"] < row[f"{theirs}_lo"]:
        return "faster"
    if row[f"{ours}_lo"] > row[f"{theirs}_hi"]:
        return "slower"
    return "within the spread"


def profile_compiled(torch, compiled: dict, tokens: int, out: Path) -> None:
    """Where the compiled layers' host time goes at `tokens` (torch.profiler, CPU and CUDA activity):
    the top entries by CPU time of each, to compiled_profile.txt."""
    from torch.profiler import ProfilerActivity, profile

    lines = []
    for name, fn in compiled.items():
        held = inputs(torch, tokens)
        for _ in range(5):
            fn(*held)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn(*held)
            torch.cuda.synchronize()
        lines += [f"== compiled layer with {name}'s ops, {tokens} tokens, 20 calls", "",
                  prof.key_averages().table(sort_by="cpu_time_total", row_limit=30), ""]
    (out / "compiled_profile.txt").write_text("\n".join(lines))


def main() -> int:

    from astra_kernels.jobs.exporting import cuda_file
    from astra_kernels.suite import tuned_tables

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--profile", type=int, metavar="TOKENS",
                        help="also profile the compiled layers' host time at this token count (compiled_profile.txt)")
    parser.add_argument("--from", dest="from_json", metavar="JSON", help="render a recorded layer.json again, no GPU")
    args = parser.parse_args()
    if args.from_json:
        try:
            report = json.loads(Path(args.from_json).read_text())
            print(render(report, Path(args.out)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: --from {args.from_json}: not a layer.json this script wrote ({type(exc).__name__}: {exc})")
            return 2
        return 0
    import torch

    tokens = [int(t) for t in args.tokens.split(",")]
    device = torch.cuda.get_device_name()
    kind = (tuned_tables.device_key(device) or "H200").lower()
    weights = Weights(torch)
    rows, tables = [], {}
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        exports = {}
        for kernel in ("fused_add_rmsnorm", "silu_and_mul", "rotary_embedding"):
            # a kernel tuned for the H200 only (rotary_embedding) runs its H200 table: the pick reads the GPU
            tables[kernel] = kind if kernel in tuned_tables.shipped_kernels(kind, "cold") else "h200"
            exports[kernel] = Path(tmp) / kernel
            cuda_file.export(cuda_file.resolve_source(None, tables[kernel], kernel), exports[kernel])
        ops = {name: suite_ops(torch, name, exports) for name in ("astra", "native")}
        layers = {name: make_layer(torch, weights, *ops[name]) for name in ops}
        torch._dynamo.reset()
        compiled = {name: torch.compile(layers[name]) for name in layers}
        for t in tokens:
            x, residual, positions = inputs(torch, t)
            row = {"tokens": t}
            reference, reference_residual = layers["native"](x.clone(), residual.clone(), positions)
            samplers = {}
            for name in ("astra", "native"):
                got, got_residual = layers[name](x.clone(), residual.clone(), positions)
                compiled_got, _ = compiled[name](x.clone(), residual.clone(), positions)
                torch.cuda.synchronize()
                row[f"{name}_max_abs_diff"] = max(float((got.float() - reference.float()).abs().max()),
                                                  float((compiled_got.float() - reference.float()).abs().max()))
                row[f"{name}_residual_equal"] = bool(torch.equal(got_residual, reference_residual))
                calls = 100 if t <= 256 else 10
                replays = 20 if t <= 256 else 3
                held = (x.clone(), residual.clone(), positions)
                samplers[f"eager_{name}"] = eager_sampler(torch, lambda h=held, n=name: layers[n](*h), calls)
                samplers[f"compile_{name}"] = eager_sampler(torch, lambda h=held, n=name: compiled[n](*h), calls)
                samplers[f"graph_{name}"] = graph_sampler(torch, lambda h=held, n=name: layers[n](*h), replays)
                samplers[f"graph_compile_{name}"] = graph_sampler(torch, lambda h=held, n=name: compiled[n](*h),
                                                                  replays)
                norm, act, rope = ops[name]
                gate_up = torch.randn(t, 2 * INTERMEDIATE, device="cuda").to(torch.bfloat16)
                qkv = torch.randn(t, (HEADS + 2 * KV_HEADS) * HEAD_DIM, device="cuda").to(torch.bfloat16)
                q, k, _ = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)  # as the layer
                samplers[f"ops_{name}"] = graph_sampler(
                    torch, lambda h=held, g=gate_up, n=norm, a=act, r=rope, q=q, k=k: (
                        n(*h[:2], weights.norm_in), r(h[2], q, k, weights.cos_sin), n(*h[:2], weights.norm_post),
                        a(g)), 20)
            for key, samples in interleaved(samplers).items():
                record(row, key, samples)
            scale = float(reference.float().abs().max())
            row["reference_max_abs"] = scale
            rows.append(row)
            out.mkdir(parents=True, exist_ok=True)  # each token count kept as it is measured
            (out / "layer.json").write_text(json.dumps({"device": device, "rows": rows}, indent=2))
            print(f"{t:>5} tokens: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()
                                                   if k.endswith("_us")), flush=True)
        if args.profile:
            profile_compiled(torch, compiled, args.profile, out)
    report = {"device": device, "torch": torch.__version__, "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "layer": {"hidden": HIDDEN, "intermediate": INTERMEDIATE, "heads": HEADS, "kv_heads": KV_HEADS,
                        "head_dim": HEAD_DIM}, "tables": tables, "rounds": ROUNDS, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "layer.json").write_text(json.dumps(report, indent=2))
    print(render(report, out))
    return 0


def render(report: dict, out: Path) -> str:
    """layer.md and layer.svg from a report (layer.json): no GPU needed (`--from`)."""
    from astra_kernels.jobs import charts

    rows, device = report["rows"], report["device"]
    out.mkdir(parents=True, exist_ok=True)
    tables = report["tables"]
    tables = (", ".join(f"{k}: {v}" for k, v in tables.items()) if isinstance(tables, dict) else f"all {tables}")
    lines = [f"# A Llama-style decoder layer on {device}, {report['date']}", "",
             f"PyTorch {report['torch']}; bf16; the shipped tables ({tables}); times in us per layer, the median "
             f"of {report.get('rounds', 5)} rounds (eager, compile: wall per call; graph: device per replay); ops: "
             "the layer's suite calls alone, in a CUDA graph.", "",
             "| tokens | eager astra | eager native | graph astra | graph native | graph+compile astra | "
             "graph+compile native | compile astra | compile native | ops astra | ops native | ops share (graph, astra) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['eager_astra_us']:.1f} | {r['eager_native_us']:.1f} | "
                     f"{r['graph_astra_us']:.1f} | {r['graph_native_us']:.1f} | {r['graph_compile_astra_us']:.1f} | "
                     f"{r['graph_compile_native_us']:.1f} | {r['compile_astra_us']:.1f} | {r['compile_native_us']:.1f} | "
                     f"{r['ops_astra_us']:.1f} | {r['ops_native_us']:.1f} | {r['ops_astra_us'] / r['graph_astra_us']:.1%} |")
    if all("eager_astra_lo" in r for r in rows):  # reports with every round's range (not those before 2026-11-28)
        lines += ["", "Against each other, by the rounds' ranges (faster or slower only where the ranges do not "
                  "overlap):", "", "| comparison | faster | within the spread | slower | slower at |", "|---|---|---|---|---|"]
        for what, ours, theirs in COMPARISONS:
            verdicts = [(r["tokens"], compare(r, ours, theirs)) for r in rows]
            slower = [f"{t} ({r[f'{ours}_us'] / r[f'{theirs}_us']:.3f}x)" for (t, v), r in zip(verdicts, rows)
                      if v == "slower"]
            lines.append(f"| {what} | {sum(v == 'faster' for _, v in verdicts)} | "
                         f"{sum(v == 'within the spread' for _, v in verdicts)} | {len(slower)} | "
                         f"{', '.join(slower) or '-'} |")
    lines += ["", "Largest difference from the native eager layer's output (the output's largest magnitude): "
              + "; ".join(f"{r['tokens']}: astra {r['astra_max_abs_diff']:.3g}, native compiled "
                          f"{r['native_max_abs_diff']:.3g} ({r['reference_max_abs']:.3g})" for r in rows)]
    (out / "layer.md").write_text("\n".join(lines) + "\n")

    def ratio(peer: str, ours: str):
        return [(math.log2(r["tokens"]), r[peer] / r[ours]) for r in rows]
    series = {"eager: native / astra": ratio("eager_native_us", "eager_astra_us"),
              "graph: native / astra": ratio("graph_native_us", "graph_astra_us"),
              "graph+compile: native / astra": ratio("graph_compile_native_us", "graph_compile_astra_us"),
              "compile: native / astra": ratio("compile_native_us", "compile_astra_us")}
    (out / "layer.svg").write_text(charts.line_chart(series, title=f"Decoder layer, {device}: the peer's time over "
                                                     "the layer's with astra's ops", ylabel="native / astra",
                                                     xlabel="log2 tokens"))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
