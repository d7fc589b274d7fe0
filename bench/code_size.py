"""Machine-code bytes beside the measured time, for every configuration a results store holds at
one shape: how much of a few-token kernel's time under a cold L2 is fetching its own instructions.

    python3 -P bench/code_size.py KERNEL SHAPE [--replay recorded|recorded:SESSION|STORE] [--dtype bf16]
                                  [--variant default] [--json OUT.json]

Each configuration (template, baseline) the store measured at SHAPE of the kernel's current source is compiled here (NVRTC, no
GPU needed, for the store's arch) and its .text bytes printed beside its median. Under `--l2 cold`
the flush between replays evicts the kernel's code from L2 too, as a model's layers do between two
calls of one op in a server; at one token a kernel runs each instruction once, so its length is
part of its latency (docs/performance.md entry 27: topk_softmax at 1x64x8 took 2.8 us at 8 KB of
code and 7.3 us at 62 KB). Rows are sorted by time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sqlite3
import sys


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    from astra_kernels.tools.errors import AstraError

    try:
        return sizes()
    except (AstraError, OSError, ValueError, sqlite3.Error) as exc:  # a bad name, shape or file: one line
        print(f"code_size: {exc}".splitlines()[0], file=sys.stderr)
        return 2


def sizes() -> int:
    from astra_kernels import suite
    from astra_kernels.tools.templating.template import Exclusion
    from astra_kernels.suite import recordings
    from astra_kernels.tools.measuring.replay import unpacked_copy
    from astra_kernels.tools.toolchain.compiler import compile_source
    from astra_kernels.tools.toolchain.cubin import machine_code_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("shape")
    parser.add_argument("--replay", default="recorded", help="the results store: recorded, recorded:SESSION or a path")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--json", help="also write the rows")
    args = parser.parse_args()
    folder = suite.load(args.kernel)
    shape = folder.spec.parse_shape(args.shape)
    folder.spec.check_dtype(args.dtype)
    folder.spec.check_variant(args.variant)
    store = unpacked_copy(recordings.resolve(args.replay, args.kernel))
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        db.execute("SELECT 1 FROM results LIMIT 1")
    except sqlite3.Error as exc:
        raise ValueError(f"{store}: not a results store ({exc})") from None
    current = {hashlib.sha256(folder.source_of(w).code.encode()).hexdigest() for w in ("template", "baseline")}
    rows = db.execute("SELECT which, config, arch, median_us, source_sha256 FROM results WHERE kernel = ? AND shape = ? AND dtype = ? "
                      "AND variant = ? AND status = 'ok' AND which IN ('template', 'baseline')",
                      (args.kernel, json.dumps(shape, sort_keys=True, separators=(",", ":")), args.dtype, args.variant))
    seen = {}
    for which, config, arch, us, source_hash in rows:
        key = (which, config)
        if key in seen or source_hash not in current:  # measured of another text of the kernel: not this code
            continue
        source = folder.source_of(which)
        cfg = json.loads(config) if config else {}
        env = suite.environment(folder.spec, shape, args.dtype, args.variant, arch=arch)
        instance = source.instantiate(cfg or source.default, env)
        if isinstance(instance, Exclusion):
            continue
        module = compile_source(source.code, suite.compile_options(instance, args.dtype,
                                                                   folder.spec.variants[args.variant], arch))
        seen[key] = (us, machine_code_bytes(module.cubin), which, cfg)
    if not seen:
        print(f"the store holds no measurement of {args.kernel} at {args.shape} in {args.dtype} ({args.variant})",
              file=sys.stderr)
        return 1
    listed = sorted(seen.values(), key=lambda r: r[0])
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"kernel": args.kernel, "shape": shape, "dtype": args.dtype, "variant": args.variant,
                       "rows": [{"us": us, "code_bytes": size, "which": which, "config": cfg}
                                for us, size, which, cfg in listed]}, out, indent=1)
    print("| us | code bytes | which | configuration |\n|---|---|---|---|")
    for us, size, which, cfg in listed:
        print(f"| {us:.3f} | {size} | {which} | {' '.join(f'{k}={v}' for k, v in cfg.items())} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
