"""`astra import-sglang DIR`: kernel folders whose baseline is SGLang's own CUDA source
(jobs/importing.py), from an installed sglang or from wheels given with --from."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    command = sub.add_parser(
        "import-sglang",
        help="write kernel folders whose baseline is SGLang's own CUDA source, to tune and bench beside the ports",
        description="Reads SGLang's JIT kernel sources (sglang/kernels/jit/csrc) from the installed sglang, or from "
                    "wheels given with --from (the sglang wheel and the apache-tvm-ffi wheel it pins), and writes "
                    "one folder per kernel under DIR, with the sources vendored unchanged in DIR/_sglang. Use DIR "
                    "with --kernels-dir or ASTRA_KERNELS_PATH.")
    command.add_argument("dest", metavar="DIR", help="where the kernel folders go (a --kernels-dir directory)")
    command.add_argument("--from", dest="sources", action="append", default=[], metavar="WHEEL_OR_DIR",
                         help="a sglang or apache-tvm-ffi wheel, or a folder holding sglang/ and tvm_ffi/ "
                              "(repeatable; default: the installed packages)")
    command.add_argument("--kernel", dest="kernels", action="append", default=[], metavar="NAME",
                         help="a suite kernel to import SGLang's source of (repeatable; default: every one with "
                              "a recipe)")
    command.add_argument("--force", action="store_true",
                         help="write over kernel folders an earlier import left in DIR (by default they are "
                              "refused: they may hold your edits)")
    command.add_argument("--json", action="store_true")
    command.set_defaults(run=run)


def run(args) -> int:
    from astra_kernels.jobs import importing
    from astra_kernels.tools.errors import UsageError

    dest = Path(args.dest).expanduser()
    # Before the sources are read (seconds, from a wheel): a DIR that is a file, or lies under one, is one line.
    if (file := next((p for p in (dest, *dest.parents) if p.exists() and not p.is_dir()), None)) is not None:
        raise UsageError(f"{dest}: {file} is a file, not a folder to write the kernel folders in")
    with tempfile.TemporaryDirectory(prefix="astra-import-") as work:
        sources = importing.locate(args.sources, Path(work))
        done = importing.import_sglang(dest, args.kernels, sources, force=args.force)
    skipped = {k: why for k, why in importing.NOT_IMPORTED.items() if not args.kernels}
    if args.json:
        print(json.dumps({
            "sglang": sources.sglang_version, "apache_tvm_ffi": sources.tvm_ffi_version, "read_from": sources.origin,
            "imported": [{"kernel": d.recipe.name, "port": d.recipe.port, "folder": str(d.folder),
                          "file": f"{importing.JIT}/csrc/{d.recipe.file}", "shapes": d.kept,
                          "shapes_not_taken": d.dropped} for d in done],
            "not_imported": skipped,
        }, indent=2))
        return 0
    console.print(f"SGLang {sources.sglang_version} (apache-tvm-ffi {sources.tvm_ffi_version}), read from "
                  f"{escape(sources.origin)}; sources vendored unchanged in {escape(str(dest / importing.VENDORED))}",
                  highlight=False)
    for d in done:
        console.print(f"  {d.recipe.name}: {importing.JIT}/csrc/{d.recipe.file} -> {escape(str(d.folder))} "
                      f"({d.kept} shapes of the port's; {len(d.dropped)} it does not take)", highlight=False)
        for line in d.dropped:
            console.print(f"      not taken: {escape(line)}", highlight=False)
    for kernel, why in skipped.items():
        console.print(f"  not imported: {kernel}: {escape(why)}", highlight=False)
    console.print(f"Next: astra check --kernels-dir {escape(str(dest))} {done[0].recipe.name} --shapes "
                  f"... ; astra bench --kernels-dir {escape(str(dest))} shows them beside the ports", highlight=False)
    return 0
