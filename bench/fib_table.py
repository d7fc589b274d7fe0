"""The verdicts of FlashInfer-Bench's evaluator on this project's solutions, beside this project's own
figures for the same workloads, from a trace set (`flashinfer-bench run --local TS` having run).

    python bench/fib_table.py --traceset TS [--json OUT.json]

Per definition and workload: the evaluator's status, its latency of the solution and of the
definition's PyTorch reference and their ratio (its speedup), and, where `astra export --fib` wrote
one for that workload, this project's own median (CUDA-graph replay over rotating inputs) and its
baseline kernel's. Reads JSON lines only: no flashinfer-bench, no GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(traceset: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for file in sorted(traceset.glob("traces/*/*.jsonl")):
        ours = file.name.endswith(".astra.jsonl")
        for line in file.read_text().splitlines():
            if not line.strip():
                continue
            t = json.loads(line)
            if "_astra_" not in (t.get("solution") or ""):
                continue
            axes = t["workload"]["axes"]
            key = (t["solution"], tuple(sorted(axes.items())))
            table = out.setdefault(t["definition"], [])
            row = next((r for r in table if r["key"] == key), None)
            if row is None:
                row = {"key": key, "solution": t["solution"], "axes": axes}
                table.append(row)
            e = t["evaluation"]
            perf = e.get("performance") or {}
            if ours:
                row["astra_us"] = perf.get("latency_ms", 0) * 1000
                row["astra_baseline_us"] = perf.get("reference_latency_ms", 0) * 1000 or None
            else:
                row.update(status=e["status"], hardware=e["environment"]["hardware"],
                           fib_us=perf.get("latency_ms", 0) * 1000 if perf else None,
                           fib_reference_us=perf.get("reference_latency_ms", 0) * 1000 if perf else None,
                           fib_speedup=perf.get("speedup_factor") if perf else None,
                           max_abs_error=(e.get("correctness") or {}).get("max_absolute_error"))
    for table in out.values():
        table.sort(key=lambda r: list(r["axes"].values()))
        for r in table:
            r.pop("key")
    return out


def _f(value, digits=2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traceset", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    found = rows(Path(args.traceset))
    for definition, table in found.items():
        judged = [r for r in table if "status" in r]
        passed = sum(r["status"] == "PASSED" for r in judged)
        print(f"\n### {definition}: {passed} of {len(judged)} workloads PASSED "
              f"({', '.join(sorted({r['hardware'] for r in judged}))})\n")
        print("| tokens | status | FlashInfer-Bench: solution us | reference us | speedup | "
              "astra-kernels: tuned us | baseline us |")
        print("|---|---|---|---|---|---|---|")
        for r in table:
            print(f"| {', '.join(str(v) for v in r['axes'].values())} | {r.get('status', 'not judged')} | "
                  f"{_f(r.get('fib_us'))} | {_f(r.get('fib_reference_us'))} | {_f(r.get('fib_speedup'))} | "
                  f"{_f(r.get('astra_us'))} | {_f(r.get('astra_baseline_us'))} |")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
