"""Where the tuned norms launch exactly as SGLang's JIT norms do and still trail them: is it the row
length the JIT kernel has at compile time?

SGLang's JIT rmsnorm is a C++ template on the hidden size (`kDim`): its loops have no bounds and its
grid has no tail. The project's templates take `hidden` and `tokens` at run time and guard every
vector with `k * ROW_THREADS < rem` and every row with `row < tokens`. Entry 16 of
docs/performance.md found the tables running SGLang's own launch shape at rmsnorm 128x4096, 256x4096
and 1x8192 and still 1.5-2.7% behind, with no configuration of the template faster by more than 1%.
This times, in one evaluation worker, at each shape, round after round in the same order:

- `sglang_jit`: SGLang's JIT kernel (`astra import-sglang`'s folder on the kernel path);
- for the shipped table's pick and each of the spec's seeds (SGLang's launch shapes):
  - `as_shipped`: the template as it ships;
  - `const_h`: the same text with the row length a compile-time constant (`//@ derive ROW_LEN = H`);
  - `const_h_unguarded`: that, and the guards a row of exactly ROW_THREADS x ITEMS vectors in a
    grid of exactly T CTAs makes dead removed (`valid = true`, every `k * ROW_THREADS < rem` true);
    only for configurations where that holds.

    ASTRA_KERNELS_PATH=.sglang-imported python3 -P bench/norm_code_gap.py OUT.json [--rounds 3] [--l2 cold|warm]
        [--shapes rmsnorm:128x4096,fused_add_rmsnorm:1x4096]
    python bench/norm_code_gap.py --from OUT.json     # the tables of a saved run (no GPU)

Every timing is `astra bench`'s protocol (arena layout, CUDA-graph replay, the given L2 regime) after
the float64 checks; a variant that fails them is reported with its status, not timed. The variants
are text edits of the shipped template made here; the shipped template is not changed.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys

from astra_kernels.jobs.benchmark import _evaluate, _imported, _time_of, shipped_table
from astra_kernels.jobs.tuning import seed_configs
from astra_kernels.kernels_sglang import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.templating.template import Exclusion, parse_template
from astra_kernels.tools.toolchain.compiler import compile_many

SHAPES = ("rmsnorm:1x4096,rmsnorm:1x8192,rmsnorm:128x4096,rmsnorm:256x4096,rmsnorm:128x8192,"
          "fused_add_rmsnorm:1x4096,fused_add_rmsnorm:1x8192,fused_add_rmsnorm:128x4096")
SIGNATURE = "float eps, int tokens, int hidden) {"


def _edit(text: str, old: str, new: str, count: int | None = None) -> str:
    found = text.count(old)
    if not found or (count is not None and found != count):
        raise SystemExit(f"error: the template no longer holds {old!r} ({found} times): this experiment needs updating")
    return text.replace(old, new)


def variants(folder: suite.KernelFolder) -> dict[str, object]:
    """The shipped template and its two edited forms, parsed as the loader parses a folder's own."""
    text = folder.template.source
    const = _edit(text, "//@ grid:", "//@ derive ROW_LEN = H                  -- the row length, a compile-time constant\n//@ grid:", 1)
    const = _edit(const, SIGNATURE, "float eps, int tokens, int hidden_at_run_time) {\n    constexpr int hidden = ROW_LEN;", 1)
    unguarded = _edit(const, "const bool valid = row < tokens;", "const bool valid = true;  // ROWS = 1: the grid is T CTAs", 1)
    unguarded = _edit(unguarded, "if (k * ROW_THREADS < rem) {", "if (true) {  // ROW_THREADS x ITEMS vectors are the row", 3)
    parsed = {}
    for name, source in (("const_h", const), ("const_h_unguarded", unguarded)):
        parsed[name] = parse_template(source, f"{folder.name}/template.cu ({name})",
                                      suite.template_symbols(folder.spec), folder.path)
    return {"as_shipped": folder.template, **parsed}


def exact_fit(folder: suite.KernelFolder, shape: dict[str, int], config: dict[str, int]) -> bool:
    """The unguarded form is right only where a CTA is one whole row of exactly ROW_THREADS x ITEMS vectors."""
    return (config.get("ROWS") == 1 and config.get("CLUSTER") == 1 and config.get("ITEMS", 0) > 0
            and shape["H"] // config["VEC"] == config["ROW_THREADS"] * config["ITEMS"] and shape["H"] % config["VEC"] == 0)


def measure(worker, kernel: str, shape: dict[str, int], rounds: int, l2: str) -> dict:
    folder = suite.load(kernel)
    sms, arch = worker.device["multiprocessors"], worker.device["arch"]
    forms = variants(folder)
    configs: list[tuple[str, dict[str, int]]] = []
    table = shipped_table(kernel, worker.device["name"], l2)
    if table is not None:
        config, _, source = table.pick(shape, sms, arch)
        if source == "template" and config:
            configs.append(("shipped pick", dict(config)))
    env = suite.environment(folder.spec, shape, "bf16", "default", sms, arch)
    for i, config in enumerate(seed_configs(folder, env)):
        if all(config != c for _, c in configs):
            configs.append((f"seed {i}", config))
    runs: list[tuple[str, str, object, object, dict | None]] = []  # label, which, folder, template, config
    imported, why = _imported(kernel)
    if imported is not None:
        runs.append(("sglang_jit", "baseline", imported, None, None))
    else:
        print(f"  no SGLang JIT column: {why or 'sglang_' + kernel + ' is not on the kernel path'}", flush=True)
    for origin, config in configs:
        for form, template in forms.items():
            if form == "const_h_unguarded" and not exact_fit(folder, shape, config):
                continue
            runs.append((f"{form} ({origin})", "template", folder, template, config))
    requests = []
    for _, which, f, template, config in runs:
        request = suite.request(f, which, shape, "bf16", "default", config, sms=sms, arch=arch, source=template)
        if not isinstance(request, Exclusion):
            requests.append((request.source, request.options))
    compile_many(requests)  # every core, before the GPU's turn
    times: dict[str, list[float]] = {label: [] for label, *_ in runs}
    status: dict[str, str] = {}
    for _ in range(rounds):
        for label, which, f, template, config in runs:
            us, _, state = _time_of(_evaluate(worker, f, which, shape, "bf16", config, sms, "arena", l2=l2,
                                              template=template))
            if us is None:
                status[label] = state
            else:
                times[label].append(us)
    rows = []
    jit = statistics.median(times["sglang_jit"]) if times.get("sglang_jit") else None
    for label, which, f, template, config in runs:
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
