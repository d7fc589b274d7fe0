"""Host time per eager call of the exported kernels, as a serving engine pays it (issue 40).

For each kernel: the Python callable `astra export` writes (<kernel>_launch.py), the same kernels as
a registered PyTorch op (runtime/torch_op.py), and beside them one native torch op (x.relu_()) and
F.rms_norm, each called N times back to back on the 16-token shape with one synchronize at the end:
where a call's host work exceeds its GPU time (every kernel here at 16 tokens) the wall time per
call is the host time per call. Three rounds, interleaved; the median is reported.

    python3 -P bench/host_cost.py --out DIR      # on a GPU; writes host_cost.json and prints a table
    python3 -P bench/host_cost.py --out DIR --kernels topk_softmax,per_token_group_quant_fp8   # only those

The tables exported are those shipped for this GPU's kind (tuned_tables); the op is built with nvcc
on first use (cached). No timing here is asserted anywhere: a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

KERNELS = {"silu_and_mul": {"T": 16, "D": 4096}, "rmsnorm": {"T": 16, "H": 4096},
           "fused_add_rmsnorm": {"T": 16, "H": 4096}, "merge_attn_states": {"N": 16, "HD": 32, "D": 128},
           "rotary_embedding": {"N": 16, "HQ": 32, "HK": 8, "D": 128, "R": 128, "P": 4096},
           "topk_softmax": {"T": 16, "E": 64, "K": 8}, "per_token_group_quant_fp8": {"T": 16, "H": 7168}}


def per_call_us(call, calls: int) -> float:
    import torch

    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    import torch
    import torch.nn.functional as F

    from astra_kernels.jobs.exporting import cuda_file
    from astra_kernels.suite import tuned_tables
    from astra_kernels.runtime import torch_op
    from astra_kernels.runtime.exported_kernel import load_callable
    from astra_kernels.jobs.torch_tensors import op_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated, of: " + ", ".join(KERNELS))
    args = parser.parse_args()
    chosen = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in KERNELS]
    if unknown or not chosen:
        raise SystemExit(f"host_cost.py: --kernels {args.kernels!r}: "
                         + (f"{', '.join(unknown)} not among " if unknown else "names none of ") + ", ".join(KERNELS))
    device = torch.cuda.get_device_name()
    kind = (tuned_tables.device_key(device) or "H200").lower()
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    calls = {"native op (x.relu_())": lambda: x.relu_(), "F.rms_norm eager": lambda: F.rms_norm(x, (4096,), w, 1e-6)}
    built_s, tables = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in chosen:
            shape = KERNELS[kernel]
            out = Path(tmp) / kernel
            # a kernel tuned for the H200 only (rotary_embedding, topk_softmax, per_token_group_quant_fp8) runs
            # its H200 table: the pick reads the GPU
            table_kind = kind if kernel in tuned_tables.shipped_kernels(kind, "cold") else "h200"
            tables[kernel] = table_kind
            cuda_file.export(cuda_file.resolve_source(None, table_kind, kernel), out)
            started = time.perf_counter()
            op = torch_op.load(out)
            built_s[kernel] = time.perf_counter() - started
            python_callable = load_callable(out)
            tensors, scalars = op_arguments(kernel, "bf16", shape)
            calls[f"{kernel}: Python callable"] = (lambda c=python_callable, t=tensors, s=scalars: c(*t, **s))
            calls[f"{kernel}: torch op"] = (lambda o=op, t=tensors, s=scalars: o(*t, **s))
        samples = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                samples[name].append(per_call_us(call, args.calls))
    native = statistics.median(samples["native op (x.relu_())"])
    rows = [{"call": name, "host_us": statistics.median(s), "samples_us": s,
             "over_native": statistics.median(s) / native} for name, s in samples.items()]
    report = {"device": device, "torch": torch.__version__, "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "calls": args.calls, "rounds": args.rounds, "shapes": {k: KERNELS[k] for k in chosen},
              "first_load_s": built_s, "tables": tables, "rows": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "host_cost.json").write_text(json.dumps(report, indent=2))
    print(f"{device}, torch {torch.__version__}, {args.calls} calls x {args.rounds} rounds (median)\n")
    print("| call | host us per call | x native op |\n|---|---|---|")
    for row in rows:
        print(f"| {row['call']} | {row['host_us']:.1f} | {row['over_native']:.2f}x |")
    print("tables: " + ", ".join(f"{k} {v}" for k, v in tables.items()))
    print("\nfirst load (build or cache) s: " + ", ".join(f"{k} {v:.1f}" for k, v in built_s.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
