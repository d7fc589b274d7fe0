"""Multi-GPU benchmark: `astra tune --ray` over several kernels with 1, 2, ... workers (one per GPU),
the wall time of each against the one-worker run, the tables compared shape by shape, and a run in
which one worker is killed mid-way.

    python bench/multi_gpu.py [--kernels silu_and_mul,rmsnorm,fused_add_rmsnorm,merge_attn_states]
        [--set astra] [--budget 16] [--workers 1,2,4] [--sample N] [--strategy random] [--start shipped]
        [--kill-after 40] [--out out/multi_gpu]
        [--json docs/bench/.../multi_gpu.json] [--replay recorded --pace 1]
    python bench/multi_gpu.py --analyse DIR     (DIR: an earlier run's --out, e.g. run C's stores unpacked)

Each run is the command a user types, `astra tune K1 K2 ... --set S --strategy random --budget N
--seed 0 --ray --workers W` (--strategy and --start as given), in its own output folder, results store and compile cache (nothing is
reused between runs: each compiles and measures from nothing), timed from start to exit. A seeded
random search's first round proposes the same configurations in every run; its later rounds narrow
around the best so far, so where two configurations are within the timing spread of each other the
runs can go on to measure different ones (2026-11-26, run E: 8 of silu_and_mul 16x12288's 12 trials
the same), and their tables can differ there.

Tables are compared per shape: the median of the W-worker run's dispatch table's pick (what a user
ships; the searches' own bests were compared up to run G of docs/scaling.md) against the one-worker
run's, and whether it is the same configuration; "within spread" means the two medians
differ by no more than the sum of their measured spreads (each the (max - min) / median of its
timing samples) plus 2%, an allowance for what moves between two runs (clocks, which GPU) and one
run's spread cannot see.

With --kill-after S, one more run with the largest W kills one evaluation worker (the Ray actor
process `ray::EvaluationHost` under the run's own cluster, whose child holds the GPU) S seconds in, and the run must still end
in its report with every shape measured. With --replay the workers answer from recordings (no GPU),
each answer after --pace times its recorded wall time: a rehearsal of the same runs on CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.arguments import positive_int
from astra_kernels.cli.output import console, print_table
from astra_kernels.tools.measuring.results import ResultsStore

ACTOR_TITLE = "ray::EvaluationHost"  # what Ray names an evaluation worker's process
BETWEEN_RUNS = 0.02  # what moves between two runs (clocks, which GPU) beyond each one's own spread


def actor_pids(root: int) -> list[int]:
    """The evaluation workers among `root`'s descendants (the tune command's own cluster: its
    raylet starts them), by the title Ray gives their processes; another run's are never touched."""
    parents, titles = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                titles[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == root:
                return True
        return False

    return sorted(pid for pid, title in titles.items() if title.startswith(ACTOR_TITLE) and descends(pid))


def tune(args, workers: int, out: Path, kill_after: float | None = None) -> dict:
    """One `astra tune --ray` run in its own process group; its wall time, exit code and reports."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-P", "-m", "astra_kernels.cli", "tune", *args.kernels.split(","),
               "--set", args.set, "--strategy", args.strategy, "--budget", str(args.budget), "--seed", "0",
               "--ray", "--workers", str(workers), "--out", str(out), "--json"]
    if args.sample:
        command += ["--sample", str(args.sample)]
    if args.start:
        command += ["--start", args.start]
    if args.replay:
        command += ["--replay", args.replay, "--pace", str(args.pace)]
    killed: dict = {}
    with open(out / "stdout.json", "w") as stdout, open(out / "stderr.log", "w") as stderr:
        start = time.perf_counter()
        # its own compile cache: every run compiles its kernels' spaces from nothing, as the first does
        environment = {**os.environ, "ASTRA_CACHE_DIR": str(out.resolve() / "cache")}
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=environment, start_new_session=True)

        def kill_one() -> None:
            deadline = start + kill_after
            while time.perf_counter() < deadline and process.poll() is None:
                time.sleep(0.2)
            pids = actor_pids(process.pid)
            if pids and process.poll() is None:
                os.kill(pids[0], signal.SIGKILL)
                killed.update(pid=pids[0], at_s=round(time.perf_counter() - start, 1), of=len(pids))

        killer = threading.Thread(target=kill_one, daemon=True) if kill_after is not None else None
        if killer:
            killer.start()
        try:
            code = process.wait()
        finally:
            if process.poll() is None:  # interrupted here: nothing this script started outlives it
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)  # the tune's own clean-up: its workers, the cluster
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        seconds = time.perf_counter() - start
        if killer:
            killer.join()
    run = {"workers": workers, "wall_s": round(seconds, 2), "exit": code, "command": " ".join(command[3:]),
           "out": str(out)}
    if kill_after is not None:
        run["killed"] = killed or "no worker was running to kill"
    run["reports"] = reports_of(out)
    run["best"] = best_by_shape(run["reports"], out)
    return run


def best_by_shape(reports: list[dict], out: Path) -> dict:
    """(kernel, shape label) -> what the run's dispatch table picks there (the table a user ships:
    the search's best, or a configuration the cross-measurement found faster there, or the
    baseline), its median and spread, and the GPU that measured it, from each kernel's report and
    results store; with the search's own best beside it."""
    best = {}
    for report in reports:
        kernel = report["kernel"]
        folder = out / kernel if len(reports) > 1 else out  # `astra tune`'s --out: OUT/KERNEL for several
        with ResultsStore(folder / "results.sqlite", read_only=True) as store:
            rows = store.rows(kernel=kernel, status="ok")
            lost = store.count(status="lost")
        entries = (report.get("dispatch") or {}).get("entries") or []
        for shape in report["shapes"]:
            label = f"{kernel} {shape['label']}"
            entry = next((e for e in entries if e["shape"] == shape["shape"]), None)
            row = entry and next((r for r in rows if r["shape"] == shape["shape"] and r["which"] == entry["source"]
                                  and r["config"] == (entry["config"] or {})), None)
            if row is None:  # no pick, or one the store has no ok row of: not comparable
                best[label] = None
                continue
            best[label] = {"config": entry["config"], "source": entry["source"], "median_us": row["median_us"],
                           "spread": row["spread"], "gpu": row["result"].get("gpu"), "lost_rows": lost,
                           "search_config": shape["search"]["best_config"]}
    return best


def reports_of(out: Path) -> list[dict]:
    """A run's reports, as `astra tune --json` wrote them to OUT/stdout.json (none for a run cut short)."""
    try:
        reports = json.loads((out / "stdout.json").read_text() or "[]")
    except (OSError, json.JSONDecodeError):
        reports = []
    return reports if isinstance(reports, list) else [reports]


def compare(one: dict, other: dict) -> dict:
    """Shape by shape: the other run's table's pick against the one-worker run's."""
    rows, within, same = [], 0, 0
    for label, mine in one.items():
        theirs = other.get(label)
        if mine is None or theirs is None:
            rows.append({"shape": label, "missing": True})
            continue
        ratio = theirs["median_us"] / mine["median_us"]
        allowed = (mine["spread"] or 0) + (theirs["spread"] or 0) + BETWEEN_RUNS
        ok = abs(ratio - 1) <= allowed
        within += ok
        same += mine["config"] == theirs["config"]
        rows.append({"shape": label, "one_us": mine["median_us"], "other_us": theirs["median_us"], "ratio": ratio,
                     "allowed": allowed, "within_spread": ok, "same_config": mine["config"] == theirs["config"]})
    return {"shapes": len(one), "within_spread": within, "same_config": same, "rows": rows}


def against_shipped(out: Path) -> dict[str, dict[str, int]]:
    """kernel -> how the run's table compares with the table shipped for the run's GPU, both as this
    run measured them: at each shape where the run measured the shipped table's pick (`--start
    shipped` measures it first), whether the run's pick is faster, within spread (their two spreads,
    at least 2%: one run, so no allowance between runs) or slower; "unmeasured" where it did not."""
    from astra_kernels.jobs.benchmark import shipped_table_for
    from astra_kernels.jobs.tuning import start_configs
    from astra_kernels import suite
    from astra_kernels.tools.toolchain.targets import DEFAULT_SMS

    reports = reports_of(out)
    best = best_by_shape(reports, out)
    counts: dict[str, dict[str, int]] = {}
    for report in reports:
        kernel = report["kernel"]
        # the table `--start shipped` starts from; picked for 132 SMs (an H100's or H200's, the kinds
        # tables are shipped for), as the report keeps no SM count
        table = shipped_table_for(kernel, report["device"], report["dtype"], report["variant"], report.get("l2") or "cold")
        if table is None:
            continue
        folder = suite.load(kernel)
        with ResultsStore((out / kernel if len(reports) > 1 else out) / "results.sqlite", read_only=True) as store:
            timed = {(json.dumps(r["shape"], sort_keys=True), json.dumps(r["config"], sort_keys=True)): r
                     for r in store.rows(kernel=kernel, status="ok") if r["which"] == "template"}
        tally = counts.setdefault(kernel, {"faster": 0, "within": 0, "slower": 0, "unmeasured": 0})
        for shape in report["shapes"]:
            mine = best.get(f"{kernel} {shape['label']}")
            pick = start_configs(table, folder, shape["shape"], sms=DEFAULT_SMS, arch=report["arch"])
            theirs = pick and timed.get((json.dumps(shape["shape"], sort_keys=True), json.dumps(pick[0], sort_keys=True)))
            if mine is None or not theirs:
                tally["unmeasured"] += 1
                continue
            ratio = theirs["median_us"] / mine["median_us"]
            allowed = max(BETWEEN_RUNS, (theirs["spread"] or 0) + (mine["spread"] or 0))
            tally["faster" if ratio > 1 + allowed else "slower" if ratio < 1 - allowed else "within"] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="silu_and_mul,rmsnorm,fused_add_rmsnorm,merge_attn_states")
    parser.add_argument("--set", default="astra")
    parser.add_argument("--budget", type=int, default=16, help="evaluations per shape")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--sample", type=positive_int,
                        help="each shape's search over a seeded sample of this many configurations of the whole "
                             "space (astra tune --sample): a few hundred compiles a kernel instead of thousands")
    parser.add_argument("--strategy", default="random",
                        help="astra tune --strategy (default random: a seeded random search's first round is the "
                             "same in every run, so the runs' tables can be compared; auto is what the shipped "
                             "tables were tuned with)")
    parser.add_argument("--start", help="astra tune --start (shipped: each kernel's shipped table measured first)")
    parser.add_argument("--kill-after", type=float)
    parser.add_argument("--only-kill", action="store_true", help="only the run with a worker killed")
    parser.add_argument("--replay")
    parser.add_argument("--pace", type=float, default=1.0)
    parser.add_argument("--out", default="out/multi_gpu")
    parser.add_argument("--json")
    parser.add_argument("--analyse", metavar="DIR",
                        help="no run: read the results stores (and compile caches) of DIR/w1, DIR/w2, DIR/w4, ... "
                             "(an earlier --out) and print how busy each run's workers were, its compiles against "
                             "its evaluations, how often a worker drew a problem's inputs and reference again, and "
                             "against w1's: each evaluation's wall time, which phase of an evaluation (compile, "
                             "check, time, floor) grew, and the dispatch tables")
    args = parser.parse_args()
    if args.analyse:
        return analyse(Path(args.analyse))
    import ray

    counts = [int(w) for w in args.workers.split(",")]
    figures = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
               "cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
               "command": "python " + " ".join(sys.argv), "runs": []}
    if not args.only_kill:
        for count in counts:
            figures["runs"].append(tune(args, count, Path(args.out) / f"w{count}"))
            run = figures["runs"][-1]
            console.print(f"{count} worker(s): {run['wall_s']:.1f} s, exit {run['exit']}", highlight=False)
            save(args, figures)  # each run's figures as soon as it ends: a later run may be cut short
    if args.kill_after is not None:
        figures["kill"] = tune(args, max(counts), Path(args.out) / f"w{max(counts)}-kill", args.kill_after)
        kill = figures["kill"]
        console.print(f"{max(counts)} worker(s), one killed ({kill['killed']}): {kill['wall_s']:.1f} s, exit "
                      f"{kill['exit']}, {sum(v is not None for v in kill['best'].values())} of {len(kill['best'])} "
                      "shapes measured", highlight=False)
    if figures["runs"]:
        one = figures["runs"][0]
        table = Table(title=f"astra tune --ray, {args.kernels} at {args.set}, {args.budget} seeded random "
                            "configurations per shape" + (f" of a sample of {args.sample}" if args.sample else ""))
        for column in ("workers", "wall s", "evaluations", "per s", "speedup", "efficiency", "exit",
                       "shapes within spread of the first run's", "same pick"):
            table.add_column(column)
        for run in figures["runs"]:
            run["speedup"] = one["wall_s"] / run["wall_s"]
            run["efficiency"] = run["speedup"] * one["workers"] / run["workers"]
            run["against_first"] = compare(one["best"], run["best"])
            run["evaluations"] = len(_stored(Path(run["out"])))
            c = run["against_first"]
            table.add_row(str(run["workers"]), f"{run['wall_s']:.1f}", str(run["evaluations"]),
                          f"{run['evaluations'] / run['wall_s']:.2f}", f"{run['speedup']:.2f}",
                          f"{run['efficiency']:.2f}", str(run["exit"]), f"{c['within_spread']}/{c['shapes']}",
                          f"{c['same_config']}/{c['shapes']}")
        print_table(table)
        if "kill" in figures:
            figures["kill"]["against_first"] = compare(one["best"], figures["kill"]["best"])
    save(args, figures, final=True)
    runs = figures["runs"] + ([figures["kill"]] if "kill" in figures else [])
    return 0 if all(r["exit"] == 0 for r in runs) else 1


def _stored(folder: Path) -> dict[str, dict]:
    """Every row of a run's results stores (one per kernel) by key: created_at, the problem (kernel
    and shape) and the result."""
    rows = {}
    for path in sorted(folder.glob("**/results.sqlite")):
        with ResultsStore(path, read_only=True) as store:
            for row in store.rows():
                rows[row["key"]] = {"at": datetime.fromisoformat(row["created_at"]).timestamp(),
                                    "problem": (row["kernel"], json.dumps(row["shape"], sort_keys=True)),
                                    "result": row["result"]}
    return rows


def _redrawn(rows: dict[str, dict], kept: int | None) -> int:
    """How many evaluations found their problem's draws gone from a worker keeping the last `kept`
    problems' (None: all), taking each worker's evaluations in the order they were stored."""
    by_gpu: dict[str, list] = {}
    for row in sorted(rows.values(), key=lambda r: r["at"]):
        by_gpu.setdefault(row["result"].get("gpu"), []).append(row["problem"])
    misses = 0
    for problems in by_gpu.values():
        held: list = []
        for problem in problems:
            if problem in held:
                held.remove(problem)
            else:
                misses += 1
            held.append(problem)
            if kept:
                del held[:-kept]
    return misses


def _phase(result: dict, phase: str) -> float:
    """An evaluation's seconds in `phase`; "rest": its wall time outside every timed phase."""
    split = result["phase_seconds"]
    return result["wall_seconds"] - sum(split.values()) if phase == "rest" else split.get(phase, 0.0)


def _workers(name: str) -> int:
    """A run folder's worker count: w4 -> 4, w4-kill -> 4."""
    return int(name[1:].split("-")[0])


def _compiles(folder: Path) -> list[tuple[float, float]]:
    """(when written, NVRTC seconds) of every module a run compiled: its own compile cache (the run's
    ASTRA_CACHE_DIR, FOLDER/cache) holds each once, with the seconds the compile took (on whichever
    of the cluster's CPUs ran it); a run's stores without their cache, none."""
    compiles = []
    for meta in (folder / "cache").glob("**/*.json"):
        try:
            module = json.loads(meta.read_text()).get("module") or {}
            compiles.append((meta.stat().st_mtime, float(module.get("compile_seconds") or 0.0)))
        except (OSError, ValueError):
            continue
    return compiles


def analyse(folder: Path) -> int:
    """--analyse: the figures docs/scaling.md gives from a run's stores (runs D to I ship theirs):
    for every run folder DIR/w* (w1, w2, w4, w4-kill, ...), how busy its workers were, its draws, its
    compiles against its evaluations, and against w1, each evaluation's wall time and phases and
    the dispatch tables."""
    names = sorted((p.name for p in folder.glob("w*") if p.is_dir() and re.fullmatch(r"w\d+(-.*)?", p.name)
                    and any(p.glob("**/results.sqlite"))), key=lambda n: (_workers(n), n))
    runs = {name: rows for name in names if (rows := _stored(folder / name))}  # a run that stored nothing: left out
    names = list(runs)
    if not runs:
        console.print(f"error: no results stores under {folder}/wN (an earlier run's --out: w1, w2, w4-kill ...)",
                      highlight=False)
        return 2
    for name, rows in runs.items():
        start = min(r["at"] for r in rows.values())
        busy: dict[int, float] = {}
        for row in rows.values():
            slot = int((row["at"] - start) // 10)
            busy[slot] = busy.get(slot, 0.0) + (row["result"].get("wall_seconds") or 0.0)
        span = max(r["at"] for r in rows.values()) - start
        evaluating = sum(busy.values())
        gpus = len({r["result"].get("gpu") for r in rows.values()})
        console.print(f"{name}: {len(rows)} evaluations stored over {span:.1f} s ({len(rows) / max(span, 1e-9):.2f} a "
                      f"second; their wall times sum to {evaluating:.0f} s, {evaluating / max(gpus * span, 1e-9):.0%} "
                      f"of {gpus} GPU(s) over the span); evaluation wall seconds per 10 s: "
                      + ", ".join(f"{busy.get(i, 0.0):.0f}" for i in range(int(span // 10) + 1)), highlight=False)
        console.print(f"{name}: draws made again with the last problem kept: {_redrawn(rows, 1)} of {len(rows)}; "
                      f"with every problem kept: {_redrawn(rows, None)}", highlight=False)
        phases = {phase: sum(_phase(r["result"], phase) for r in rows.values() if r["result"].get("phase_seconds"))
                  for phase in ("compile", "check", "time", "floor", "rest")}
        console.print(f"{name}: the evaluations' wall seconds by phase: " + ", ".join(
            f"{phase} {seconds:.0f} s ({seconds / max(evaluating, 1e-9):.0%})" for phase, seconds in phases.items())
            + f"; kernel shapes evaluated (timed or only checked): {len({r['problem'] for r in rows.values()})}", highlight=False)
        compiles = _compiles(folder / name)
        if compiles:
            cpu = sum(c for _, c in compiles)
            last = max(t for t, _ in compiles) - start
            per = {}
            for at, _ in compiles:
                per[int((at - start) // 10)] = per.get(int((at - start) // 10), 0) + 1
            console.print(f"{name}: {len(compiles)} compiles, {cpu:.0f} CPU seconds of NVRTC ({cpu / max(evaluating, 1e-9):.2f}x "
                          f"the evaluations' wall seconds), the last {last:.1f} s after the first evaluation; compiles "
                          "per 10 s: " + ", ".join(f"{per.get(i, 0)}" for i in range(min(per), max(per) + 1)),
                          highlight=False)
    for name in names:
        for kernel, tally in against_shipped(folder / name).items():
            if tally["unmeasured"] < sum(tally.values()):
                console.print(f"{name}'s {kernel} table against the one shipped, as {name} measured both: where it "
                              f"measured the shipped pick, its own pick faster at {tally['faster']} shapes, within "
                              f"spread at {tally['within']}, slower at {tally['slower']} (not measured at "
                              f"{tally['unmeasured']})", highlight=False)
    if "w1" not in runs:  # a run alone (a whole suite cut short): nothing to compare with
        return 0
    one = runs["w1"]
    for name, other in runs.items():
        if name == "w1":
            continue
        both = [k for k in one if k in other and one[k]["result"].get("timing") and other[k]["result"].get("timing")]
        if not both:
            continue
        wall = [other[k]["result"]["wall_seconds"] / one[k]["result"]["wall_seconds"] for k in both]
        gpu = [other[k]["result"]["timing"]["median_us"] / one[k]["result"]["timing"]["median_us"] for k in both]
        console.print(f"{len(both)} evaluations in both w1 and {name}: wall time at {name} over w1, median "
                      f"{statistics.median(wall):.3f}, mean {statistics.mean(wall):.3f}; GPU time (graph-replay "
                      f"median) ratio, median {statistics.median(gpu):.3f}", highlight=False)
        phased = [k for k in both if one[k]["result"].get("phase_seconds") and other[k]["result"].get("phase_seconds")]
        if phased:  # stores from before phases were kept have none
            total = sum(one[k]["result"]["wall_seconds"] for k in phased)
            parts = []
            for phase in ("compile", "check", "time", "floor", "rest"):
                spent = [(_phase(one[k]["result"], phase), _phase(other[k]["result"], phase)) for k in phased]
                share = sum(a for a, _ in spent) / total
                ratio = sum(b for _, b in spent) / max(sum(a for a, _ in spent), 1e-9)
                parts.append(f"{phase} {share:.0%} of w1's, x{ratio:.3f} at {name}")
            console.print(f"{len(phased)} of them by phase (summed over the evaluations): " + "; ".join(parts),
                          highlight=False)
    first = best_by_shape(reports_of(folder / "w1"), folder / "w1")
    for other in (n for n in names if n != "w1" and (folder / n / "stdout.json").exists()):
        c = compare(first, best_by_shape(reports_of(folder / other), folder / other))
        apart = [r for r in c["rows"] if not r.get("within_spread")]
        console.print(f"{other}'s tables against w1's: {c['within_spread']} of {c['shapes']} shapes within spread, "
                      f"{c['same_config']} the same pick" + "".join(
                          f"; {r['shape']}: " + ("missing" if r.get("missing") else
                                                 f"{r['other_us']:.2f} us against {r['one_us']:.2f} (x{r['ratio']:.3f}, "
                                                 f"allowed {r['allowed']:.3f}, {'same' if r['same_config'] else 'another'} pick)")
                          for r in apart), highlight=False)
    return 0


def save(args, figures: dict, final: bool = False) -> None:
    """--json: the figures so far; the reports stay in each run's folder (they are what is compared)."""
    if not args.json:
        return
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    kept = {**figures, "runs": [{k: v for k, v in r.items() if k != "reports"} for r in figures["runs"]]}
    if "kill" in figures:
        kept["kill"] = {k: v for k, v in figures["kill"].items() if k != "reports"}
    with open(args.json, "w") as f:
        json.dump(kept, f, indent=2)
    if final:
        console.print(f"wrote {args.json}", highlight=False)


def _terminated(signum, frame) -> None:
    """SIGTERM (a `timeout` around the run) raised as Ctrl-C is, so that the run's `finally` stops
    the `astra tune` it started (its own session, which no signal to this process reaches): the
    default SIGTERM ended this script on the spot and left the tune writing its stores."""
    raise KeyboardInterrupt(signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    try:
        sys.exit(main())
    except KeyboardInterrupt as stop:
        print(f"stopped by signal {stop.args[0] if stop.args else signal.SIGINT}; the runs it started were stopped too",
              file=sys.stderr)
        sys.exit(128 + int(stop.args[0] if stop.args else signal.SIGINT))
