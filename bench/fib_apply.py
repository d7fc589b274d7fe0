"""FlashInfer-Bench's apply path over this project's solutions: a PyTorch loop calling a routed op.

    python bench/fib_apply.py --traceset TS --definition rmsnorm_h4096 --out OUT [--tokens 1,16,128,2048]

TS is a trace set `astra export --fib` wrote and `flashinfer-bench run --local TS` judged. The op is
the definition's reference decorated with `flashinfer_bench.apply(NAME)`, called as a serving loop
calls it (destination-passing: the inputs, then the preallocated output); with apply enabled over
TS, FlashInfer-Bench's runtime routes each call to the solution its evaluator's traces rank best at
that workload's axes (and to the reference, the fallback, where no trace matches). At each token
count the script checks the routed output against the reference (FlashInfer-Bench's own tolerance
rule: an element fails where both its absolute and relative error exceed 1e-2), counts the calls
the runtime sent to the fallback, and times calls per second on the host (a loop of calls, one
synchronisation at the end) for the routed op and the reference called directly.

Why the apply config is printed: FlashInfer-Bench's ApplyConfig admits a trace only where its
max_relative_error is under max_rtol (default 1e-5), and the evaluator computes that error as
|out - ref| / (|ref| + 1e-8) over every element, so a bf16 output near zero gives a large value
whatever the kernel. The script sets max_atol to the evaluator's atol and max_rtol just above the
largest relative error among the passed traces of this project's solutions (max_atol likewise above
their largest absolute error, where that exceeds 1e-2: a bf16 output of magnitude 8 is 1/32 apart from
its neighbours, so one rounding step apart from the reference is 0.03), and says so.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traceset", required=True)
    parser.add_argument("--definition", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", default="1,16,128,2048", help="token counts (the var axis) to call the op at")
    parser.add_argument("--calls", type=int, default=200, help="calls per timing")
    args = parser.parse_args()

    import torch
    import flashinfer_bench as fib
    from flashinfer_bench.apply import ApplyConfig
    from flashinfer_bench.bench.utils import gen_inputs
    from flashinfer_bench.compile import BuilderRegistry
    from flashinfer_bench.data import Workload

    traces = fib.TraceSet.from_path(args.traceset)
    name = args.definition
    definition = traces.definitions[name]
    ours = {s.name for s in traces.solutions.get(name, []) if s.author == "astra-kernels"}
    judged = [t for t in traces.traces.get(name, []) if t.solution in ours and t.evaluation
              and t.evaluation.status.value == "PASSED" and t.evaluation.correctness is not None
              and t.evaluation.environment.libs.get("astra-kernels") is None]  # the evaluator's, not ours
    if not judged:
        raise SystemExit(f"{args.traceset} holds no PASSED trace of an astra-kernels solution of {name} from "
                         "FlashInfer-Bench's evaluator: run `flashinfer-bench run --local TS` first")
    max_abs = max(t.evaluation.correctness.max_absolute_error for t in judged)
    max_rel = max(t.evaluation.correctness.max_relative_error for t in judged)
    config = ApplyConfig(max_atol=max(1e-2, max_abs * 1.01), max_rtol=max(1e-2, max_rel * 1.01),
                         on_miss_policy="fallback_only")
    reference = BuilderRegistry.get_instance().build_reference(definition)
    var = definition.var_axes[0]
    scalars = {k: v for t in traces.workloads.get(name, [])[:1] for k, v in t.workload.inputs.items()
               if v.type == "scalar"}
    fallbacks = {"calls": 0}

    def op_fallback(*args):
        fallbacks["calls"] += 1
        n = len(definition.inputs)
        result = reference(*args[:n])
        outs = result if isinstance(result, (tuple, list)) else (result,)
        for dst, src in zip(args[n:], outs):
            dst.copy_(src)

    routed = fib.apply(name)(op_fallback)
    rows = []
    with fib.enable_apply(args.traceset, config):
        for tokens in (int(t) for t in args.tokens.split(",")):
            workload = Workload(axes={var: tokens}, inputs={**{k: {"type": "random"} for k in definition.inputs
                                                               if k not in scalars}, **scalars}, uuid=f"apply-{tokens}")
            inputs = gen_inputs(definition, workload, device="cuda:0")
            shapes = definition.get_output_shapes({var: tokens})
            outputs = [torch.empty(s, dtype=d, device="cuda:0") for s, d in zip(shapes, definition.torch_output_dtypes)]
            before = fallbacks["calls"]
            routed(*inputs, *outputs)
            torch.cuda.synchronize()
            went_to_fallback = fallbacks["calls"] > before
            want = reference(*inputs)
            want = want if isinstance(want, (tuple, list)) else (want,)
            bad = 0
            for got, ref in zip(outputs, want):
                abs_err = (got.float() - ref.float()).abs()
                bad += int(((abs_err > 1e-2) & (abs_err / (ref.float().abs() + 1e-8) > 1e-2)).sum().item())

            def per_call_us(fn, *call_args):
                fn(*call_args)
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(args.calls):
                    fn(*call_args)
                torch.cuda.synchronize()
                return (time.perf_counter() - start) / args.calls * 1e6

            routed_us = per_call_us(routed, *inputs, *outputs)
            reference_us = per_call_us(reference, *inputs)
            rows.append({"tokens": tokens, "routed_to": "fallback (the reference)" if went_to_fallback else "a solution",
                         "elements_past_tolerance": bad, "routed_us_per_call": routed_us,
                         "reference_us_per_call": reference_us})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"definition": name, "device": torch.cuda.get_device_name(), "apply_config": config.model_dump(),
              "solutions": sorted(ours), "rows": rows}
    (out / f"apply_{name}.json").write_text(json.dumps(result, indent=2))
    print(f"{name} on {result['device']}: apply config {config.model_dump()}")
    print("| tokens | routed to | elements past tolerance | routed op us/call | reference us/call |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokens']} | {r['routed_to']} | {r['elements_past_tolerance']} | {r['routed_us_per_call']:.1f} | "
              f"{r['reference_us_per_call']:.1f} |")
    return 0 if all(r["elements_past_tolerance"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
