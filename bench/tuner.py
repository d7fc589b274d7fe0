"""How fast the tuner is, and how fast each search strategy gets to the best configuration.

    python bench/tuner.py [--stores STORE ...] [--compile N] [--evaluate N] [--json out.json]
    python bench/tuner.py --stores bench/data/h200-2026-11-22/*.sqlite.gz --compile 0 --evaluate 0

1. Compiling: template configurations compiled per second by NVRTC, on one core and on all
   (a cold compile cache, so every configuration really compiles).
2. Evaluating (needs a GPU): fresh evaluations per second through the evaluation worker, the full
   correctness protocol and graph-replay timing included.
3. Strategies: replayed over every (kernel, shape) that a results store holds measurements of,
   the space being every configuration measured there and "the best" the fastest of them (run
   `astra tune KERNEL --strategy exhaustive` first to store a whole space; bench/data/ holds such
   recordings from an H200). For each strategy,
   alone and in planned rounds (tools/search/rounds.py), the evaluations and the recorded evaluation
   seconds it takes to come within 2% of that best: medians over seeds. The replay answers from
   the stored measurements, so it runs anywhere and costs no GPU time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels import suite
from astra_kernels.tools.toolchain.compile_cache import CompileCache
from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.toolchain.driver import gpu_available, local_arch
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.search.hardware import limits_for
from astra_kernels.tools.search.rounds import plan_round
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, search_rounds
from astra_kernels.tools.search.space import build_space
from astra_kernels.tools.search.strategies import STRATEGIES
from astra_kernels.tools.templating.template import Exclusion

WITHIN = 0.02
SEEDS = 5


def compile_rate(kernel: str, count: int, arch: str) -> dict:
    """Configurations per second compiled from cold, on one core and on every core."""
    folder = suite.load(kernel)
    base = suite.base_options("bf16", folder.spec.variants["default"], arch)
    configs = folder.template.sample_configs(count, seed=11)
    shape = folder.spec.all_shapes()[0]
    env = suite.environment(folder.spec, shape, "bf16", "default", limits_for(arch).multiprocessors, arch)
    instances = [i for c in configs if not isinstance(i := folder.template.instantiate(c, env), Exclusion)]
    variants = [(folder.template.source, i.compile_options(base)) for i in instances]
    row = {"kernel": kernel, "arch": arch, "configurations": len(variants), "cores": os.cpu_count()}
    for label, workers, items in (("one_core", 1, variants[: max(4, len(variants) // 8)]),
                                  ("all_cores", os.cpu_count(), variants)):
        with tempfile.TemporaryDirectory() as cold:
            started = time.perf_counter()
            compile_many(items, workers=workers, cache=CompileCache(Path(cold)))
            seconds = time.perf_counter() - started
        row[f"{label}_per_second"] = len(items) / seconds
    return row


def evaluation_rate(kernel: str, shape: dict, count: int) -> dict:
    """Fresh evaluations per second through the worker (no results store in front)."""
    from astra_kernels.tools.measuring.worker import EvaluationWorker

    folder = suite.load(kernel)
    with EvaluationWorker(timeout_s=600) as worker:
        arch, sms = worker.device["arch"], worker.device["multiprocessors"]
        env = suite.environment(folder.spec, shape, "bf16", "default", sms, arch)
        base = suite.base_options("bf16", folder.spec.variants["default"], arch)
        space = build_space(folder.template, env, base, limits_for(arch, sms),
                            configs=folder.template.sample_configs(count * 2, seed=5))
        requests = []
        for candidate in space.candidates[:count]:
            requests.append(suite.request(folder, "template", shape, "bf16", config=candidate.config, sms=sms,
                                          arch=arch, stream_timing=False))
        started = time.perf_counter()
        results = [worker.evaluate(r) for r in requests]
        seconds = time.perf_counter() - started
    return {"kernel": kernel, "shape": folder.spec.label(shape), "device": worker.device["name"],
            "evaluations": len(results), "ok": sum(r.status == "ok" for r in results),
            "per_second": len(results) / seconds,
            "median_kernel_us": statistics.median(r.timing.median_us for r in results if r.timing)}


def stored_spaces(paths: list[Path]) -> list[dict]:
    """Every (kernel, shape, dtype, variant, device) with template measurements, one per config.
    A `.sqlite.gz` (the recordings under bench/data/) is read from a decompressed copy."""
    groups: dict[tuple, dict] = {}
    scratch = tempfile.TemporaryDirectory()
    for path in paths:
        if path.suffix == ".gz":
            plain = Path(scratch.name) / path.stem
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            path = plain
        with ResultsStore(path) as store:
            for row in store.rows(which="template"):
                key = (row["kernel"], json.dumps(row["shape"], sort_keys=True), row["dtype"], row["variant"],
                       row["device"], row["arch"])
                group = groups.setdefault(key, {"kernel": row["kernel"], "shape": row["shape"],
                                                "dtype": row["dtype"], "variant": row["variant"],
                                                "device": row["device"], "arch": row["arch"], "results": {}})
                group["results"].setdefault(_key(row["config"]), (row["config"], row["result"]))
    scratch.cleanup()
    return list(groups.values())


def _key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def replay(group: dict, strategies: list[str], seeds: int, round_budget: int) -> list[dict]:
    """Each strategy over the stored space, alone (no budget) and in three planned rounds sharing
    `round_budget` evaluations, answered from the store."""
    folder = suite.load(group["kernel"])
    results = {k: EvaluationResult.model_validate(r) for k, (_, r) in group["results"].items()}
    configs = [c for c, _ in group["results"].values()]
    times = [r.timing.median_us for r in results.values() if r.status == "ok" and r.timing]
    if not times:
        return []
    best = min(times)
    limits = limits_for(group["arch"])
    env = suite.environment(folder.spec, group["shape"], group["dtype"], group["variant"], limits.multiprocessors,
                            group["arch"])
    base = suite.base_options(group["dtype"], folder.spec.variants[group["variant"]], group["arch"])
    space = build_space(folder.template, env, base, limits, configs=configs)
    candidates = [c.config for c in space.candidates if _key(c.config) in results]

    def evaluate(config, **_):
        return results[_key(config)], True

    rows = []
    for name in strategies:
        for rounds in (1, 3):
            hits, seconds_to = [], []
            for seed in range(seeds if name != "exhaustive" else 1):
                outcome = search_rounds(
                    name, candidates, lambda c: c, evaluate,
                    Budget() if rounds == 1 else Budget(evaluations=round_budget), rounds=rounds, seed=seed,
                    plan=lambda trials: plan_round(space.candidates, trials, limits.multiprocessors))
                spent = 0.0
                for i, trial in enumerate(outcome.trials, start=1):
                    spent += results[_key(trial.config)].wall_seconds
                    if trial.median_us is not None and trial.median_us <= best * (1 + WITHIN):
                        hits.append(i)
                        seconds_to.append(spent)
                        break
            rows.append({
                "kernel": group["kernel"], "shape": folder.spec.label(group["shape"]), "device": group["device"],
                "space": len(candidates), "best_us": best, "strategy": name,
                "mode": "alone" if rounds == 1 else f"3 planned rounds, {round_budget} evaluations",
                "runs": seeds if name != "exhaustive" else 1, "reached": len(hits),
                "reached_within_round_budget": sum(h <= round_budget for h in hits),
                "median_evaluations": statistics.median(hits) if hits else None,
                "median_seconds": statistics.median(seconds_to) if seconds_to else None,
            })
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", nargs="*", default=[], help="results stores to replay strategies over")
    parser.add_argument("--compile", type=int, default=64, help="configurations to compile (0: skip)")
    parser.add_argument("--evaluate", type=int, default=24, help="fresh evaluations to time (0: skip)")
    parser.add_argument("--kernel", default="silu_and_mul")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--round-budget", type=int, default=45,
                        help="evaluations the three planned rounds share in the replay (default 45)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "compile": None, "evaluate": None,
              "strategies": []}

    if args.compile:
        arch = local_arch() or DEFAULT_ARCH
        report["compile"] = row = compile_rate(args.kernel, args.compile, arch)
        console.print(f"compile ({row['kernel']} template, {arch}, cold cache): "
                      f"{row['one_core_per_second']:.1f} configurations/s on one core, "
                      f"{row['all_cores_per_second']:.1f}/s on {row['cores']} cores")
    if args.evaluate:
        if gpu_available():
            shape = suite.load(args.kernel).spec.all_shapes()[0]
            report["evaluate"] = row = evaluation_rate(args.kernel, shape, args.evaluate)
            console.print(f"evaluate ({row['kernel']} {row['shape']} on {row['device']}): "
                          f"{row['per_second']:.1f} evaluations/s over {row['evaluations']} "
                          f"({row['ok']} correct, median kernel {row['median_kernel_us']:.2f} us)")
        else:
            console.print("evaluate: skipped, no GPU here (evaluations need one)")

    if args.stores:
        table = Table(title=f"evaluations (and recorded seconds) to come within {WITHIN:.0%} of the best "
                            f"measured, median of {args.seeds} seeds")
        for column in ("kernel", "shape", "space", "best us", "strategy", "mode", "reached (within the round budget)",
                       "evaluations", "seconds"):
            table.add_column(column)
        for group in stored_spaces([Path(p) for p in args.stores]):
            for row in replay(group, list(STRATEGIES), args.seeds, args.round_budget):
                report["strategies"].append(row)
                table.add_row(row["kernel"], row["shape"], str(row["space"]), f"{row['best_us']:.2f}",
                              row["strategy"], row["mode"],
                              f"{row['reached']}/{row['runs']} ({row['reached_within_round_budget']} in "
                              f"{args.round_budget})",
                              f"{row['median_evaluations']:g}" if row["median_evaluations"] else "—",
                              f"{row['median_seconds']:.1f}" if row["median_seconds"] else "—")
        print_table(table)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
