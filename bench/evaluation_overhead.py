"""Wall seconds of one evaluation at few-token shapes, where the protocol's host work around a
kernel of a few microseconds is the whole cost: the rotating sets' copies, fills and comparisons
one launch each over a table of ranges (evaluation.RANGES_FROM, the default) beside one driver call
and synchronisation per buffer of each set (the way before), in this process on the local GPU.

    python3 -P bench/evaluation_overhead.py [--kernel topk_softmax] [--shapes 1x8x2,16x8x2,4096x8x2]
                                            [--repeat 5] [--l2 cold] [--json OUT.json]

Each mode evaluates the kernel's baseline at each shape `--repeat` times after one warm-up (its
compile and draws), checks and timing as `astra tune` asks; it prints the median wall seconds and
phases, and the medians of the timed microseconds, which the two modes must agree on within their
spread. docs/performance.md entry 25 holds a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def main() -> int:
    from astra_kernels import suite
    from astra_kernels.tools.measuring import evaluation
    from astra_kernels.tools.toolchain.device import Device

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="topk_softmax")
    parser.add_argument("--shapes", default="1x8x2,16x8x2,4096x8x2")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--l2", choices=("cold", "warm"), default="cold")
    parser.add_argument("--json")
    args = parser.parse_args()
    folder = suite.load(args.kernel)
    device = Device(0)
    rows = []
    for shape in folder.spec.parse_shapes(args.shapes):
        request = suite.request(folder, "baseline", shape, folder.spec.default_dtype(), stream_timing=False,
                                l2=args.l2, sms=device.properties.multiprocessors)
        for mode, ranges_from in (("ranges", evaluation.RANGES_FROM), ("per buffer", 1 << 62)):
            evaluation.RANGES_FROM = ranges_from
            evaluation.evaluate(device, request)  # its compile and draws, not counted
            results = [evaluation.evaluate(device, request) for _ in range(args.repeat)]
            bad = [r for r in results if r.status != "ok"]
            if bad:
                print(f"{folder.spec.label(shape)} {mode}: {bad[0].status}: {bad[0].message[:300]}", file=sys.stderr)
                return 1
            phases = {k: statistics.median(r.phase_seconds.get(k, 0.0) for r in results)
                      for k in results[0].phase_seconds}
            rows.append({"shape": folder.spec.label(shape), "mode": mode, "sets": results[0].timing.input_sets,
                         "wall_s": statistics.median(r.wall_seconds for r in results), "phases_s": phases,
                         "median_us": statistics.median(r.timing.median_us for r in results),
                         "spread": max(r.timing.spread for r in results)})
    print(f"{args.kernel} baseline, {args.l2} L2, {device.properties.name}, median of {args.repeat}")
    print("| shape | sets | mode | wall s | check s | time s | median us | spread |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['sets']} | {r['mode']} | {r['wall_s']:.3f} | {r['phases_s'].get('check', 0):.3f} "
              f"| {r['phases_s'].get('time', 0):.3f} | {r['median_us']:.2f} | {r['spread']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernel": args.kernel, "l2": args.l2, "device": device.properties.name, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
