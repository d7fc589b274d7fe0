"""Tune every kernel's sweep (issue 42's token axis) on the GPUs of one host, one `astra tune` per GPU.

    python3 -P scripts/sweep_tables.py OUT [--kernels K1,K2] [--l2 cold] [--gpus 0,1,2,3]
                                       [--budget 6] [--seconds 560] [-- EXTRA TUNE ARGUMENTS]

Each GPU takes the next kernel from a queue (the order given: put the costliest first) and runs
`astra tune KERNEL --set sweep,SETS --budget B --start shipped --l2 L2 --gpu G --out OUT/L2/KERNEL`,
SETS the spec's timed sets (astra, serving; the odd shapes are checked, never tuned): the table that
replaces the shipped one keeps every shape the shipped one was tuned at, and adds the token axis at
the serving widths;
its output in OUT/logs/KERNEL-L2.log with the time of each line. The local path, not `--ray`: each
process draws ahead on its own cores (tools/measuring/draws.py; a cluster's workers do since
WorkerPool.prefetch, not yet measured on GPUs), and a kernel's table comes from one GPU, so its
picks are compared on one device. At
`--seconds` every process still running is stopped as Ctrl-C stops it (every evaluation kept in
its results store), and running the same command again resumes each from its store. OUT/sweep-L2.json
says per kernel what ended it and how long it took. `--bench` runs `astra bench --set sweep` the
same way, each kernel's table tuned here (else the shipped one) beside torch.compile, into
OUT/bench-L2/KERNEL (OUT/sweep-bench-L2.json the summary); run again, each goes on from its bench.json
(`astra bench --resume`: only the shapes it lacks are measured).

Then, on the machine that keeps the repository, `--install KIND` copies each finished kernel's
dispatch.json to kernels_sglang/tuned/KIND/ (KIND/warm/ for the warm regime) and a cold tune's
results store, gzip'd, to kernels_sglang/recorded/KIND-DATE/ (replays read a kernel's newest
recording, so no warm one is shipped) with the rows of the kernel's previous recording of that kind
it did not measure again, of today's template and baseline (a tune of some shapes onto the shipped
table), after checking that the table was tuned on a GPU of that kind in that regime. No GPU is
needed for --install.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "topk_softmax", "rotary_embedding",
           "per_token_group_quant_fp8", "merge_attn_states")


def tuned_sets(kernel: str) -> str:
    """The sweep and the spec's timed sets (all but `odd`): what a table replacing the shipped one
    is tuned at. The odd shapes are checked, never tuned: a table entry at 1x4097 would be the
    nearest tuned shape for 1x4096 (dispatch's log distance), with a configuration chosen for a
    width no vector divides."""
    from astra_kernels import suite

    return ",".join(["sweep", *(name for name in suite.load(kernel).spec.shapes if name != "odd")])


def tune_command(out: Path, kernel: str, l2: str, gpu: int, budget: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-P", "-m", "astra_kernels.cli", "tune", kernel, "--set", tuned_sets(kernel), "--budget", str(budget),
            "--start", "shipped", "--l2", l2, "--gpu", str(gpu), "--out", str(out / l2 / kernel), *extra]


def bench_command(out: Path, kernel: str, l2: str, gpu: int, budget: int, extra: list[str]) -> list[str]:
    """The sweep's benchmark of the kernel's table tuned here (else the shipped one) beside
    torch.compile, in the same regime, on the same GPU kind."""
    tuned = out / l2 / kernel
    return [sys.executable, "-P", "-m", "astra_kernels.cli", "bench", "--kernels", kernel, "--set", "sweep",
            *(["--tuned", str(tuned)] if (tuned / "dispatch.json").is_file() else []), "--torch", "compile",
            "--l2", l2, "--gpu", str(gpu), "--out", str(out / f"bench-{l2}" / kernel), "--resume", *extra]


def tune_all(out: Path, kernels: list[str], l2: str, gpus: list[int], budget: int, seconds: float,
             extra: list[str], command=tune_command) -> dict:
    queue = list(kernels)
    taken = threading.Lock()
    deadline = time.monotonic() + seconds
    summary: dict[str, dict] = {}
    (out / "logs").mkdir(parents=True, exist_ok=True)

    def next_kernel() -> str | None:
        with taken:
            return queue.pop(0) if queue else None

    def gpu_worker(gpu: int) -> None:
        while (kernel := next_kernel()) is not None:
            if time.monotonic() >= deadline:
                summary[kernel] = {"gpu": gpu, "ended": "not started (out of time)"}
                continue
            command_line = [*command(out, kernel, l2, gpu, budget, extra)]  # a list display, as the security test reads
            started = time.monotonic()
            with open(out / "logs" / f"{kernel}-{l2}{'-bench' if command is bench_command else ''}.log", "a") as log:
                log.write(f"{datetime.now(UTC):%H:%M:%S} $ {' '.join(command_line)}\n")
                # In this process's group, so a Ctrl-C at the terminal reaches each tune too; at the
                # deadline, SIGTERM, which `astra tune` answers as Ctrl-C (its store kept, its worker ended).
                process = subprocess.Popen(command_line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
                timer = threading.Timer(max(0.0, deadline - time.monotonic()), process.terminate)
                timer.start()
                try:
                    for line in process.stdout:
                        log.write(f"{datetime.now(UTC):%H:%M:%S} {line}")
                        log.flush()
                    code = process.wait()
                finally:  # this script stopped or failed: no tune outlives it
                    timer.cancel()
                    if process.poll() is None:
                        process.terminate()
                        try:
                            process.wait(30)
                        except subprocess.TimeoutExpired:
                            process.kill()
            ended = {0: "finished", 143: "stopped at --seconds (resume: the same command)"}.get(code, f"exit {code}")
            summary[kernel] = {"gpu": gpu, "ended": ended, "seconds": round(time.monotonic() - started, 1)}

    threads = [threading.Thread(target=gpu_worker, args=(gpu,)) for gpu in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {"l2": l2, "budget": budget, "gpus": gpus, "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "kernels": {k: summary[k] for k in kernels if k in summary}}
    name = f"{'sweep-bench' if command is bench_command else 'sweep'}-{l2}.json"  # not bench-*.json: no report
    # Kept beside what earlier runs (other kernels, other GPUs of the host, an earlier call) wrote
    # there, a kernel they finished staying finished; written whole or not at all (os.replace), as
    # two scripts on one host may both be writing it (each writes once, after its queue is done).
    earlier = json.loads((out / name).read_text()).get("kernels", {}) if (out / name).is_file() else {}
    kept = {**earlier, **{k: v for k, v in result["kernels"].items()
                         if v["ended"] == "finished" or earlier.get(k, {}).get("ended") != "finished"}}
    staged = out / f".{name}.{os.getpid()}"
    staged.write_text(json.dumps({**result, "kernels": kept}, indent=1) + "\n")
    os.replace(staged, out / name)
    return result


def install(out: Path, kind: str) -> int:
    """Each finished kernel's table and store into the repository's shipped tables and recordings;
    nothing is installed if any finished table was tuned on another GPU kind or regime."""
    finished = []
    for l2 in ("cold", "warm"):
        for folder in sorted((out / l2).glob("*")) if (out / l2).is_dir() else []:
            table, report, store = folder / "dispatch.json", folder / "report.json", folder / "results.sqlite"
            if not (table.is_file() and report.is_file() and store.is_file()):
                print(f"{folder}: no finished tune (dispatch.json, report.json, results.sqlite); left out")
                continue
            facts = json.loads(report.read_text())
            if kind.lower() not in facts.get("device", "").lower() or facts.get("l2") != l2:
                print(f"{folder}: tuned on {facts.get('device')!r} with {facts.get('l2')} L2, not a {kind} "
                      f"with {l2} L2; nothing installed", file=sys.stderr)
                return 2
            finished.append((folder, l2, facts.get("date", "")[:10]))
    for folder, l2, day in finished:
        tables = ROOT / "kernels_sglang" / "tuned" / kind.lower() / ("warm" if l2 == "warm" else "")
        tables.mkdir(parents=True, exist_ok=True)
        kept = tables / f"{folder.name}.json"
        if l2 == "warm":  # replays read a kernel's newest recording, which must stay a cold one
            shutil.copyfile(folder / "dispatch.json", kept)
            print(f"{folder.name} (warm): {kept}; its store stays in {folder / 'results.sqlite'} "
                  "(no warm recordings are shipped)")
            continue
        recorded = ROOT / "kernels_sglang" / "recorded" / f"{kind.lower()}-{day}"
        recorded.mkdir(parents=True, exist_ok=True)
        previous = newest_recording(folder.name, kind)
        target_path = recorded / f"{folder.name}.sqlite.gz"
        staged = recorded / f".{folder.name}.sqlite.gz.staged"
        with tempfile.TemporaryDirectory() as work:
            store = Path(work) / "results.sqlite"
            shutil.copyfile(folder / "results.sqlite", store)
            carried = keep_previous(store, previous, folder.name) if previous else 0
            with open(store, "rb") as source, open(staged, "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as target:
                shutil.copyfileobj(source, target)
        os.replace(staged, target_path)  # whole or not at all: the previous recording may be this very file
        shutil.copyfile(folder / "dispatch.json", kept)  # the table after its recording, so neither ships alone
        also = (f" (with {carried} row{'s' * (carried != 1)} of {previous.parent.name}'s it did not measure again)"
                if carried else "")
        print(f"{folder.name} (cold): {kept}, {target_path}{also}")
    return 0 if finished else 1


def newest_recording(kernel: str, kind: str) -> Path | None:
    """The repository's newest recording of `kernel` on a GPU of `kind`, by the date its folder names
    (recordings.session_age, as `--replay recorded` orders them)."""
    from astra_kernels.suite.recordings import session_age

    found = sorted((ROOT / "kernels_sglang" / "recorded").glob(f"{kind.lower()}-*/{kernel}.sqlite.gz"),
                   key=lambda path: session_age(path.parent))
    return found[-1] if found else None


def keep_previous(store: Path, previous: Path, kernel: str) -> int:
    """Copy into `store` (a results store) every row of the recording `previous` whose key it lacks
    and that measured `kernel`'s template or baseline as they are today (the rows a replay can
    reach; older templates' rows stay in the older recordings); how many. A tune of some shapes
    (`--set sweep` onto the shipped table) leaves the table's other entries as the previous tune
    picked them, so the recording that replaces the previous one keeps their measurements, and a
    replay of the shipped table (`--replay recorded --start shipped`) still answers at every shape.
    Each row keeps its own measurement, device, run and date; where both measured a key, the new
    measurement stands."""
    import hashlib

    from astra_kernels import suite

    folder = suite.load(kernel)
    today = [hashlib.sha256(source.code.encode()).hexdigest() for source in (folder.template, folder.baseline)]
    with tempfile.TemporaryDirectory() as work:
        old = Path(work) / "previous.sqlite"
        with gzip.open(previous, "rb") as source, open(old, "wb") as out:
            shutil.copyfileobj(source, out)
        db = sqlite3.connect(store)
        try:
            db.execute("ATTACH DATABASE ? AS previous", (str(old),))
            mine = [r[1] for r in db.execute("PRAGMA main.table_info(results)")]
            theirs = [r[1] for r in db.execute("PRAGMA previous.table_info(results)")]
            if mine != theirs:
                raise SystemExit(f"{previous}: its results table is not of the new store's schema; the recording was "
                                 "not installed")
            before = db.execute("SELECT COUNT(*) FROM main.results").fetchone()[0]
            db.execute("INSERT OR IGNORE INTO main.results SELECT * FROM previous.results "
                       "WHERE kernel = ? AND source_sha256 IN (?, ?)", (kernel, *today))
            db.execute("INSERT OR IGNORE INTO main.meta SELECT * FROM previous.meta")
            db.commit()
            carried = db.execute("SELECT COUNT(*) FROM main.results").fetchone()[0] - before
            db.execute("DETACH DATABASE previous")
        finally:
            db.close()
    return carried


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--l2", choices=("cold", "warm"), default="cold")
    parser.add_argument("--gpus", default="0", help="comma-separated GPU indices, one tune at a time on each")
    parser.add_argument("--budget", type=int, default=6, help="evaluations per shape")
    parser.add_argument("--seconds", type=float, default=560.0, help="stop every tune still running after this")
    parser.add_argument("--bench", action="store_true",
                        help="instead of tuning: time each kernel's sweep with OUT's table (else the shipped one) beside "
                             "torch.compile, OUT/bench-L2/KERNEL (render them together: astra bench --from)")
    parser.add_argument("--install", metavar="KIND", help="no tuning: install OUT's finished tables as KIND's (h100, h200)")
    args = parser.parse_args(argv)
    if args.install:
        return install(args.out, args.install)
    try:
        gpus = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        parser.error(f"--gpus {args.gpus!r}: comma-separated GPU indices")
    result = tune_all(args.out, [k for k in args.kernels.split(",") if k], args.l2, gpus, args.budget,
                      args.seconds, extra, bench_command if args.bench else tune_command)
    for kernel, facts in result["kernels"].items():
        print(f"{kernel}: {facts['ended']}" + (f" in {facts['seconds']} s on GPU {facts['gpu']}" if "seconds" in facts else ""))
    return 0 if all(f["ended"] == "finished" for f in result["kernels"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
