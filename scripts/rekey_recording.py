"""Carry a kernel's recordings over a template change that keeps every recorded binary.

    python scripts/rekey_recording.py KERNEL --old FILE RECORDING.sqlite.gz [RECORDING ...] [--dry-run]

A results store keys each measurement by the template's code and its compile options
(tools/measuring/results.py: evaluation_key), so any edit to a kernel's template.cu, a new
parameter included, leaves a recording's template rows unanswerable: a replay refuses them as
"unrecorded", and a kernel whose template changed was re-tuned on a GPU to be recorded again
(d269cda, 85f72fe). Where the change adds code no recorded configuration compiles (a parameter
whose default takes the old path: fused_add_rmsnorm's RELOAD), the recorded measurements are of
binaries the new template still builds. This proves that row by row, and only then moves each
row to its new key:

1. the row's request is rebuilt with the old template (FILE: the template.cu the recording was
   made with, e.g. `git show REV:kernels_sglang/KERNEL/template.cu > old.cu`) from the row's shape,
   dtype, variant and configuration, the recording's SM count and the measuring choices a key
   holds (L2 regime, timed or checked only, a finalist's re-timing round); its key must equal the
   stored one, so the rebuild is exact;
2. the same request with the new template, the configuration read as the new template reads it
   (template.point: a new parameter at its default), must launch the same grid, block and shared
   memory and compile, for the recording's architecture, to the same cubin: the same ELF header
   and the same sections, headers and bytes, but `.debug_line` (the source line table, which the
   new lines shift). Both are compiled here, by this machine's NVRTC, not the one of the
   recording's day: the proof is that the two templates build the same code, which the recorded
   binary was built from;
3. then the row takes the new key, configuration, source digest and label; its measurement,
   device, run and date stay (ResultsStore.move).

Every recording given is proven before any is written: a row of the old template that fails a
step stops the script with nothing written. Rows of other templates (older ones, whose keys no
replay reaches anyway) and the baseline's are left as they are. Each recording is replaced whole
(gzip, no timestamp) through a staged file, or not at all.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import itertools
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.search.runner import RETIME_ROUNDS
from astra_kernels.tools.templating.template import Exclusion, TemplateError, parse_template
from astra_kernels.tools.toolchain.compiler import compile_many

# The measuring choices a key holds besides the kernel and shape, in the order tried: a search's
# evaluation, a check-only run (jobs/checking.py), a finalist's re-timing rounds (search/runner.py).
MEASURING = [dict(l2=l2, time=time, retime=retime)
             for l2, (time, retime) in itertools.product(
                 ("cold", "warm"), [(True, 0), (False, 0), *((True, r) for r in range(1, RETIME_ROUNDS + 1))])]
LINE_TABLE = ".debug_line"  # the only section a shifted source line may change


class RekeyError(AstraError):
    """A recorded row that cannot be shown to be a measurement of a binary the new template builds."""


def elf_sections(data: bytes) -> dict[str, tuple]:
    """An ELF64 file's sections by name (a cubin is one): each its header's type, flags, size, link,
    info, alignment and entry size, and its bytes (none for SHT_NOBITS, whose size says it all)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise RekeyError("a compiled module is not an ELF64 cubin")
    (offset,) = struct.unpack_from("<Q", data, 0x28)
    size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, offset + i * size) for i in range(count)]
    names = data[heads[names_index][4]:heads[names_index][4] + heads[names_index][5]]
    return {names[h[0]:names.index(b"\0", h[0])].decode():
            (h[1], h[2], h[5], h[6], h[7], h[8], h[9], b"" if h[1] == 8 else data[h[4]:h[4] + h[5]]) for h in heads}


def program_headers(data: bytes) -> list[tuple]:
    """An ELF64 file's program headers (its segments: where the loader finds each), each without
    its offset in the file (p_offset), which a longer line table before a segment moves."""
    (offset,) = struct.unpack_from("<Q", data, 0x20)
    size, count = struct.unpack_from("<HH", data, 0x36)
    heads = []
    for i in range(count):
        raw = data[offset + i * size:offset + (i + 1) * size].ljust(size, b"\0")  # NVRTC's last one runs short
        head = struct.unpack_from("<IIQQQQQQ", raw)
        heads.append(head[:2] + head[3:])
    return heads


def same_code(old: bytes, new: bytes) -> bool:
    """Whether two cubins hold the same kernels: the same ELF header (but where the program and the
    section headers start, which a longer line table moves), the same segments (but where each
    starts in the file: silu_and_mul's code segment follows the line table) and every section
    alike, header and bytes, but the line table."""
    if old[:0x20] != new[:0x20] or old[0x30:0x40] != new[0x30:0x40]:
        return False
    if program_headers(old) != program_headers(new):
        return False
    a, b = elf_sections(old), elf_sections(new)
    return a.keys() == b.keys() and all(a[n] == b[n] for n in a if n != LINE_TABLE)


def plan(folder: suite.KernelFolder, old, store: ResultsStore, device: str, sms: int) -> list[tuple]:
    """Each old-template row's (row, old request, new request, new configuration), every request
    rebuilt exactly (step 1) and launching as before (step 2's first half)."""
    old_digest = hashlib.sha256(old.code.encode()).hexdigest()
    new = folder.template
    moves = []
    for row in store.rows(kernel=folder.name, device=device):
        if row["which"] == "baseline" or row["source_sha256"] != old_digest:
            continue
        shape, config = row["shape"], row["config"]
        built = suite.request(folder, "template", shape, row["dtype"], row["variant"], config, sms=sms,
                              arch=row["arch"], source=old, stream_timing=False)
        if isinstance(built, Exclusion):
            raise RekeyError(f"{row['key']}: the old template excludes {config} at {shape} ({built.reason})")
        old_request = next((r for m in MEASURING
                            if evaluation_key(r := dataclasses.replace(built, **m), device) == row["key"]), None)
        if old_request is None:
            raise RekeyError(f"{row['key']} ({config} at {shape}): no request rebuilt with the old template "
                             "has this key: the old template or the recording's SM count is not the one it was "
                             "made with, or it was measured otherwise")
        new_config = new.point(config)
        if new_config is None:
            raise RekeyError(f"{row['key']}: the new template does not offer {config}")
        rebuilt = suite.request(folder, "template", shape, row["dtype"], row["variant"], new_config, sms=sms,
                                arch=row["arch"], stream_timing=False)
        if isinstance(rebuilt, Exclusion):
            raise RekeyError(f"{row['key']}: the new template excludes {new_config} at {shape} ({rebuilt.reason})")
        new_request = dataclasses.replace(rebuilt, l2=old_request.l2, time=old_request.time,
                                          retime=old_request.retime)
        if new_request.launch != old_request.launch:
            raise RekeyError(f"{row['key']}: {new_config} launches {new_request.launch}, "
                             f"recorded as {old_request.launch}")
        moves.append((row, old_request, new_request, new_config))
    return moves


def check_binaries(moves: list[tuple]) -> int:
    """Step 2's second half: each distinct old and new build compiled, their code compared."""
    builds = {}
    for _, old_request, new_request, _ in moves:
        builds.setdefault((old_request.source, old_request.options.model_dump_json(),
                           new_request.source, new_request.options.model_dump_json()), (old_request, new_request))
    pairs = list(builds.values())
    outcomes = compile_many([(r.source, r.options) for pair in pairs for r in pair])
    for i, (old_request, new_request) in enumerate(pairs):
        old_out, new_out = outcomes[2 * i], outcomes[2 * i + 1]
        if old_out.module is None or new_out.module is None:
            raise RekeyError(f"{new_request.label}: does not compile ({(old_out.error or new_out.error or '')[:300]})")
        if not same_code(old_out.module.cubin, new_out.module.cubin):
            raise RekeyError(f"{new_request.label}: the new template compiles it to other code than the old one")
    return len(pairs)


def prove(kernel: str, old_file: Path, recording: Path, work: Path) -> tuple[Path, list[tuple], int]:
    """Steps 1 and 2 for every old-template row of `recording`, on an unpacked copy in `work`:
    the copy with the rows moved (step 3, not yet written back), the moves, the builds compared."""
    folder = suite.load(kernel)
    try:
        old = parse_template(old_file.read_text(), "template.cu", suite.template_symbols(folder.spec))
    except (OSError, UnicodeDecodeError, TemplateError) as exc:
        raise RekeyError(f"{old_file}: not a template of {kernel} ({exc})") from None
    if old.code == folder.template.code:
        raise RekeyError(f"{old_file} is the kernel's template as it is now: its recordings' keys are already "
                         "today's (give the template.cu they were recorded with)")
    copy = work / f"{len(list(work.iterdir()))}.sqlite"
    try:
        with gzip.open(recording, "rb") as source, open(copy, "wb") as out:
            shutil.copyfileobj(source, out)
    except (OSError, EOFError) as exc:
        raise RekeyError(f"{recording}: not a gzipped results store ({exc})") from None
    store = ResultsStore(copy)
    try:
        moves = []
        for device in sorted({row["device"] for row in store.rows(kernel=kernel)}):
            sms = store.device_facts(device).get("multiprocessors")
            if sms is None:
                raise RekeyError(f"{recording}: no SM count recorded for {device}")
            moves += plan(folder, old, store, device, int(sms))
        compiled = check_binaries(moves) if moves else 0
        if moves:
            store.move([(row["key"], evaluation_key(new_request, row["device"]), new_config, new_request,
                         EvaluationResult.model_validate({**row["result"], "label": new_request.label}))
                        for row, _, new_request, new_config in moves])
    finally:
        store.close()
    wal = copy.with_name(copy.name + "-wal")
    if wal.is_file() and wal.stat().st_size:  # closed last, SQLite checkpoints and removes its log
        raise RekeyError(f"{recording}: the moved rows were left in SQLite's log, not its file")
    return copy, moves, compiled


def write_back(copy: Path, recording: Path) -> None:
    """`recording` replaced by `copy`, gzipped without a timestamp, through a staged file beside it."""
    staged = recording.with_name(f".{recording.name}.{os.getpid()}")
    try:
        with open(copy, "rb") as source, open(staged, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(source, out)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(staged, recording)
    finally:
        staged.unlink(missing_ok=True)


def rekey(kernel: str, old_file: Path, recordings: list[Path], dry_run: bool = False) -> list[str]:
    """Every recording proven (steps 1-2) before any is written back (step 3); a line for each."""
    lines = []
    with tempfile.TemporaryDirectory() as work:
        proven = [(recording, *prove(kernel, old_file, recording, Path(work))) for recording in recordings]
        for recording, copy, moves, compiled in proven:
            if not moves:
                lines.append(f"{recording}: no row of the old template")
            elif dry_run:
                lines.append(f"{recording}: {len(moves)} rows would move ({compiled} builds compiled alike)")
            else:
                write_back(copy, recording)
                lines.append(f"{recording}: {len(moves)} rows moved to the new template's keys "
                             f"({compiled} builds compiled alike)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("--old", type=Path, required=True, help="the template.cu the recordings were made with")
    parser.add_argument("recordings", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="prove every row, write nothing")
    args = parser.parse_args(argv)
    try:
        print("\n".join(rekey(args.kernel, args.old, args.recordings, args.dry_run)), flush=True)
    except AstraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
