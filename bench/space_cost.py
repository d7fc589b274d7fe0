"""What building a template's search space costs at each shape of a sweep, in one process.

    python -P bench/space_cost.py KERNEL SHAPES [--memory]
    python -P bench/space_cost.py fused_add_rmsnorm 4x4096,8x4096,16x4096 --memory

`astra tune` builds the space (tools/search/space.build_space: the constraints, then every
admitted configuration compiled and checked against the hardware) at every shape it tunes. The
first shape of a width screens the whole space and compiles what it admits (a cold compile cache:
minutes on a small machine); a later token count of the same width reads what the process kept
(docs/performance.md entry 30). This prints each shape's seconds and the configurations at each
stage; `--memory` also the megabytes the kept constraint stage of the first shape's environment
holds (tracemalloc, its own pass; the space's list of configurations included). No GPU needed
(NVRTC compiles for sm_90 on 132 multiprocessors, an H100's or H200's).
"""

from __future__ import annotations

import argparse
import gc
import time


def main() -> int:
    from astra_kernels import suite
    from astra_kernels.tools.search import space
    from astra_kernels.tools.search.hardware import limits_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("shapes", help="comma-separated shapes, the first of a width first")
    parser.add_argument("--memory", action="store_true", help="also the kept constraint stage's megabytes")
    args = parser.parse_args()
    folder = suite.load(args.kernel)
    spec = folder.spec
    dtype = spec.default_dtype()
    limits = limits_for("sm_90", suite.DEFAULT_SMS)
    base = suite.base_options(dtype, spec.variants["default"], "sm_90")
    print("| shape | space | after constraints | compiled | fits hardware | seconds |")
    print("|---|---|---|---|---|---|")
    for shape in spec.parse_shapes(args.shapes):
        env = suite.environment(spec, shape, dtype, "default", suite.DEFAULT_SMS, "sm_90")
        started = time.perf_counter()
        report = space.build_space(folder.template, env, base, limits)
        print(f"| {spec.label(shape)} | {report.total} | {report.after_constraints} | {report.after_compile} | "
              f"{report.after_hardware} | {time.perf_counter() - started:.2f} |", flush=True)
    if args.memory:
        import tracemalloc

        shape = spec.parse_shapes(args.shapes)[0]
        env = suite.environment(spec, shape, dtype, "default", suite.DEFAULT_SMS, "sm_90")
        space._spaces_memo.clear()
        space._constrained_memo.clear()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        passing, excluded = space._constrained(folder.template, env)
        after = tracemalloc.take_snapshot()
        held = sum(s.size_diff for s in after.compare_to(before, "filename")) / 1e6
        print(f"\nkept for {spec.label(shape)}'s environment: {len(passing)} configurations admitted, {len(excluded)} "
              f"excluded, {held:.1f} MB (the space's configurations and the exclusions)")
    return 0


if __name__ == "__main__":  # compile_many's processes are spawned: they import this module
    raise SystemExit(main())
