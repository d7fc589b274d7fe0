"""Where the tuned norms launch exactly as SGLang's JIT norms do and still trail them: is it the row
length the JIT kernel has at compile time?

SGLang's JIT rmsnorm is a C++ template on the hidden size (`kDim`): its loops have no bounds and its
grid has no tail. The norm templates took `hidden` and `tokens` at run time and guarded every vector
with `k * ROW_THREADS < rem` and every row with `row < tokens`. Entry 16 of docs/performance.md found
the tables running SGLang's own launch shape at rmsnorm 128x4096, 256x4096 and 1x8192 and still
1.5-2.7% behind, with no configuration of the template faster by more than 1%. Entry 22 measured the
row length compiled in, and the guards removed, with this script; the templates have since taken
them as the parameter STATIC_ROW. This times, in one evaluation worker, at each shape, round after
round in the same order:

- `sglang_jit`: SGLang's JIT kernel (`astra import-sglang`'s folder on the kernel path);
- for the shipped table's pick and each of the spec's seeds (SGLang's launch shapes), the template at
  each STATIC_ROW it admits there:
  - `as_shipped` (STATIC_ROW 0): the row length read at run time, as the templates shipped before;
  - `const_h` (1): the row length a compile-time constant (`//@ derive ROW_LEN = H`);
  - `const_h_unguarded` (2): that, and the guards a row of exactly ROW_THREADS x ITEMS vectors in a
    grid of exactly T CTAs makes dead removed; the template admits it only where that holds.

    ASTRA_KERNELS_PATH=.sglang-imported python3 -P bench/norm_code_gap.py OUT.json [--rounds 3] [--l2 cold|warm]
        [--shapes rmsnorm:128x4096,fused_add_rmsnorm:1x4096]
    python bench/norm_code_gap.py --from OUT.json     # the tables of a saved run (no GPU)

Every timing is `astra bench`'s protocol (arena layout, CUDA-graph replay, the given L2 regime) after
the float64 checks; a variant that fails them is reported with its status, not timed. The runs saved
under docs/bench/h100-2026-11-26d/code-gap/ were made before the parameter existed, with the same
three forms as text edits of the template; their labels are these.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys

from astra_kernels.jobs.benchmark import _evaluate, _imported, _time_of, shipped_table
from astra_kernels.jobs.tuning import seed_configs
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.templating.template import Exclusion
from astra_kernels.tools.toolchain.compiler import compile_many

SHAPES = ("rmsnorm:1x4096,rmsnorm:1x8192,rmsnorm:128x4096,rmsnorm:256x4096,rmsnorm:128x8192,"
          "fused_add_rmsnorm:1x4096,fused_add_rmsnorm:1x8192,fused_add_rmsnorm:128x4096")
FORMS = {"as_shipped": 0, "const_h": 1, "const_h_unguarded": 2}  # label: the template's STATIC_ROW


def forms_of(folder: suite.KernelFolder, env: dict, config: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """`config` at each STATIC_ROW the template admits in `env`, labelled by form (FORMS)."""
    forms = []
    for label, static_row in FORMS.items():
        variant = {**config, "STATIC_ROW": static_row}
        if not isinstance(folder.template.instantiate(variant, env), Exclusion):
            forms.append((label, variant))
    return forms


def measure(worker, kernel: str, shape: dict[str, int], rounds: int, l2: str) -> dict:
    folder = suite.load(kernel)
    sms, arch = worker.device["multiprocessors"], worker.device["arch"]
    configs: list[tuple[str, dict[str, int]]] = []  # (origin, config): each launch shape once, whatever its STATIC_ROW
    table = shipped_table(kernel, worker.device["name"], l2)
    if table is not None:
        config, _, source = table.pick(shape, sms, arch)
        if source == "template" and config:
            configs.append(("shipped pick", dict(config)))
    env = suite.environment(folder.spec, shape, "bf16", "default", sms, arch)
    for i, config in enumerate(seed_configs(folder, env)):
        if all({**config, "STATIC_ROW": 0} != {**c, "STATIC_ROW": 0} for _, c in configs):
            configs.append((f"seed {i}", config))
    runs: list[tuple[str, str, object, dict | None]] = []  # label, which, folder, config
    imported, why = _imported(kernel)
    if imported is not None:
        runs.append(("sglang_jit", "baseline", imported, None))
    else:
        print(f"  no SGLang JIT column: {why or 'sglang_' + kernel + ' is not on the kernel path'}", flush=True)
    for origin, config in configs:
        for form, variant in forms_of(folder, env, config):
            runs.append((f"{form} ({origin})", "template", folder, variant))
    requests = []
    for _, which, f, config in runs:
        request = suite.request(f, which, shape, "bf16", "default", config, sms=sms, arch=arch)
        if not isinstance(request, Exclusion):
            requests.append((request.source, request.options))
    compile_many(requests)  # every core, before the GPU's turn
    times: dict[str, list[float]] = {label: [] for label, *_ in runs}
    status: dict[str, str] = {}
    for _ in range(rounds):
        for label, which, f, config in runs:
            us, _, state = _time_of(_evaluate(worker, f, which, shape, "bf16", config, sms, "arena", l2=l2))
            if us is None:
                status[label] = state
            else:
                times[label].append(us)
    rows = []
    jit = statistics.median(times["sglang_jit"]) if times.get("sglang_jit") else None
    for label, which, f, config in runs:
        median = statistics.median(times[label]) if times[label] else None
        rows.append({"label": label, "config": config, "us": times[label], "median_us": median,
                     "jit_over_this": (jit / median) if jit and median else None, "status": status.get(label, "ok")})
    return {"kernel": kernel, "shape": shape, "l2": l2, "rows": rows}


def render(results: list[dict]) -> list[str]:
    """One block per shape: each form's median over the rounds and SGLang's JIT kernel's time over it."""
    lines = []
    for result in results:
        shape = result["shape"]
        rounds = max((len(r["us"]) for r in result["rows"]), default=0)
        lines.append(f"{result['kernel']} {shape['T']}x{shape['H']} ({result['l2']} L2, {rounds} rounds)")
        for row in result["rows"]:
            ratio = f"{row['jit_over_this']:.3f}x of JIT's speed" if row["jit_over_this"] else ""
            median = f"{row['median_us']:.3f} us" if row["median_us"] else row["status"]
            config = " ".join(f"{k}={v}" for k, v in (row["config"] or {}).items())
            lines.append(f"  {row['label']:<36} {median:>10}  {ratio:<22} {config}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="the JSON, written after every shape")
    parser.add_argument("--from", dest="saved", metavar="JSON", help="print the tables of a saved run instead")
    parser.add_argument("--shapes", default=SHAPES, help="KERNEL:TxH,... (default: the few-token norms)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--l2", choices=["cold", "warm"], default="cold")
    args = parser.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    if args.saved:
        try:
            with open(args.saved) as saved:
                lines = render(json.load(saved)["results"])
        except OSError as exc:
            sys.exit(f"error: cannot read {args.saved}: {exc.strerror}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            sys.exit(f"error: {args.saved} is not a saved run of this script ({type(exc).__name__}: {exc})")
        print("\n".join(lines))
        return
    if not args.out:
        sys.exit("error: give OUT.json to measure into, or --from JSON to print a saved run")
    if args.rounds < 1:
        sys.exit(f"error: --rounds {args.rounds}: at least one round")
    wanted = []
    for item in args.shapes.split(","):
        kernel, _, dims = item.partition(":")
        t, _, h = dims.partition("x")
        if kernel not in ("rmsnorm", "fused_add_rmsnorm") or not (t.isdigit() and h.isdigit()) or int(t) < 1:
            sys.exit(f"error: {item!r} is not rmsnorm:TxH or fused_add_rmsnorm:TxH (T and H whole numbers, T >= 1)")
        wanted.append((kernel, {"T": int(t), "H": int(h)}))
    try:
        for kernel, shape in wanted:  # a shape the kernel does not run at is said before the GPU starts
            suite.check_run(suite.load(kernel), [shape], "bf16")
        with open(args.out, "w") as out:  # likewise an OUT that cannot be written
            json.dump({"results": []}, out)
        results = []
        with EvaluationWorker(device_index=0, timeout_s=600) as worker:
            for kernel, shape in wanted:
                results.append(measure(worker, kernel, shape, args.rounds, args.l2))
                print("\n".join(render(results[-1:])), flush=True)
                with open(args.out, "w") as out:
                    json.dump({"device": worker.device, "arguments": vars(args), "results": results}, out, indent=1)
    except OSError as exc:
        sys.exit(f"error: cannot write {args.out}: {exc.strerror}")
    except AstraError as exc:  # no GPU, a shape the kernel does not take: one line naming it
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
