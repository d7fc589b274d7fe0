"""`astra report`: markdown and a self-contained HTML page, with charts, from a results store alone.

A store outlives the run that filled it (a tuning run, the agent, a recording shipped from an
H200), so the report reads nothing but the store: every kernel in it, grouped by what makes
times comparable (kernel, dtype, variant, device), and per shape the baseline, the fastest
correct candidate, the speedup, the place against the copy-bandwidth roofline, how the search
converged, and how many evaluations ended in each status. Every figure is one a row recorded;
nothing is re-measured or estimated. The suite is consulted only to spell shapes the way the
other reports do (16x4096); a kernel it does not know is labelled by its shape's names.

The store is read from a private copy (a gzip recording decompressed, a closed store's bytes, a
live store through SQLite's backup, which sees a concurrent writer's committed rows), so a report
never writes to, switches the journal of, or leaves files beside the store a tuner may be filling.
"""

from __future__ import annotations

import gzip
import html
import json
import math
import os
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .generated_files import md_text
from . import charts as plots
from astra_kernels.defaults import TIMING_NOISE
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.results import ResultsStore, ResultsStoreError
from pydantic import BaseModel, Field

from astra_kernels import suite
from astra_kernels.suite import recordings

BASELINE = "baseline"
FAILURE_EXAMPLES = 8
STORE_IN_FOLDER = "results.sqlite"  # what `astra tune --out DIR` and `astra optimize` keep beside their report

CEILING_NOTE = (
    "Fraction of copy bandwidth = (bytes moved / copy ceiling) / time, as each row recorded it. "
    "The copy ceiling is the `copy_bandwidth_gbs` stored with each timed row: measured by "
    "`tools/toolchain/ceiling.py` in the worker process that timed that row, on the same GPU, as the better of "
    "the driver's device-to-device memcpy and a 16-byte vector copy kernel over 1 GiB (bytes read "
    "plus bytes written). Bytes moved is the suite's count for the shape (each input read once, each "
    "output written once), not measured DRAM traffic. A fraction near 1 means the kernel moves its "
    "bytes as fast as a plain copy does; small shapes sit far below it because a launch costs "
    "microseconds however few bytes it moves.")


class ReportError(AstraError):
    """The report's input is missing, not a results store, or holds nothing to report."""


class ShapeSummary(BaseModel):
    label: str
    shape: dict[str, int]
    bytes_moved: int | None = None
    evaluations: int = 0  # candidate rows at this shape (every status), the baseline's not counted
    statuses: dict[str, int] = Field(default_factory=dict)  # every row at this shape, baseline included
    baseline_us: float | None = None  # the fastest correct baseline measurement: never flatters the speedup
    baseline_spread: float | None = None
    baseline_fraction: float | None = None
    best_us: float | None = None
    best_spread: float | None = None
    best_fraction: float | None = None
    best_which: str = ""
    best_config: dict = Field(default_factory=dict)
    best_index: int | None = None  # 1-based position of the best among this shape's candidate rows
    copy_bandwidth_gbs: float | None = None  # the ceiling recorded with the best row (else the baseline's)
    speedup: float | None = None
    within_spread: bool | None = None  # |speedup - 1| no larger than the timing spread of either side
    convergence: list[tuple[int, float]] = Field(default_factory=list)  # (candidate index, best us so far)

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "ok")


class FailureExample(BaseModel):
    shape: str
    which: str
    status: str
    message: str


class RunSummary(BaseModel):
    run_id: str
    rows: int
    first: str
    last: str


class GroupSummary(BaseModel):
    kernel: str
    dtype: str
    variant: str
    device: str
    archs: list[str]
    first: str
    last: str
    runs: list[RunSummary]
    statuses: dict[str, dict[str, int]]  # which -> status -> count
    ceilings_gbs: list[float]  # distinct copy ceilings the timed rows recorded
    timed_without_ceiling: int = 0
    shapes: list[ShapeSummary]
    geomean_speedup: float | None = None
    failed: int = 0
    failures: list[FailureExample] = Field(default_factory=list)  # one per distinct (status, message start)

    @property
    def title(self) -> str:
        return f"{self.kernel}, {self.dtype}, variant {self.variant}, {self.device}"


class StoreReport(BaseModel):
    source: str  # as the user named it: a path, an output folder, `recorded`
    path: str  # the store file read
    generated: str
    rows: int
    groups: list[GroupSummary]


@dataclass
class Rendered:
    """What `report` made: the markdown, the HTML page, the summary, the files written (if any).
    In a notebook it displays as the HTML page's body."""

    markdown: str
    html: str
    summary: StoreReport
    files: dict[str, str] = field(default_factory=dict)  # name -> content, all written together
    written: list[Path] = field(default_factory=list)

    def _repr_html_(self) -> str:
        return self.html.split("<body>", 1)[1].rsplit("</body>", 1)[0]


def report(source: str | Path, *, kernel: str | None = None, out: str | Path | None = None) -> Rendered:
    """Report on the results store at `source` (a .sqlite or .sqlite.gz file, an output folder
    holding results.sqlite, or `recorded` / `recorded:SESSION` with `kernel`); write report.md,
    report.html, report.json and the SVG charts to `out` when given. Raises ReportError, with
    nothing written, when the input is unusable."""
    path, rows = read_store(source, kernel)
    rows = _the_runs_rows(source, path, rows)
    summary = summarize(rows, str(source), path)
    rendered = render(summary)
    if out is not None:
        rendered.written = write(rendered.files, Path(out))
    return rendered


def _the_runs_rows(source: str | Path, path: Path, rows: list[dict]) -> list[dict]:
    """For an `astra tune` output folder, the rows of its run: its kernel, dtype and variant at its
    shapes on its device. Its store holds more (a replay's is a copy of the whole recording, a
    re-run's keeps earlier runs' shapes), and a report of the folder is read as the report of its
    run. Any other source: every row."""
    folder = Path(source)
    tuned = folder / "report.json"
    if not (folder.is_dir() and tuned.is_file()):
        return rows
    try:
        run = json.loads(tuned.read_text())
        shapes = [s["shape"] for s in run["shapes"]]
        key = (run["kernel"], run["dtype"], run["variant"], run["device"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{tuned} is not the report of an `astra tune` run ({exc}); give the store "
                          f"{path} itself to report all of it") from None
    mine = [r for r in rows if (r["kernel"], r["dtype"], r["variant"], r["device"]) == key and r["shape"] in shapes]
    if not mine:
        raise ReportError(f"{path} holds no results of the run {tuned} reports ({key[0]} at "
                          f"{len(shapes)} shapes on {key[3]}); give the store itself to report all of it")
    return mine


def resolve(source: str | Path, kernel: str | None) -> Path:
    """The store file that `source` names; says what is wrong in the user's terms if none."""
    text = str(source)
    if text == recordings.PREFIX or text.startswith(recordings.PREFIX + ":"):
        if not kernel:
            have = ", ".join(sorted({r.kernel for r in recordings.shipped()})) or "none"
            raise ReportError(f"`{text}` names a shipped recording, which is one per kernel: add --kernel "
                              f"(shipped: {have})")
        return recordings.resolve(text, kernel)
    path = Path(source)
    if path.is_dir():
        inside = path / STORE_IN_FOLDER
        if not inside.is_file():
            raise ReportError(f"{path} is a folder without {STORE_IN_FOLDER}: give a results store "
                              "(.sqlite or .sqlite.gz) or the --out folder of `astra tune`")
        return inside
    if not path.exists():
        raise ReportError(f"no such file: {path}")
    return path


def read_store(source: str | Path, kernel: str | None = None) -> tuple[Path, list[dict]]:
    """The store's rows (of `kernel`, if given), oldest first, read from a private copy."""
    path = resolve(source, kernel)
    with tempfile.TemporaryDirectory(prefix="astra-report-") as tmp:
        copy = Path(tmp) / "store.sqlite"
        _copy_store(path, copy)
        tables = _tables(path, copy)
        if not tables:
            raise ReportError(f"{path} is not a results store: "
                              + ("an empty file" if path.stat().st_size == 0 else "an SQLite database with no tables"))
        if not {"meta", "results"} <= tables:
            raise ReportError(f"{path} is an SQLite database but not a results store (it has tables "
                              f"{sorted(tables)})")
        try:
            with ResultsStore(copy, read_only=True) as store:
                rows = store.rows(**({"kernel": kernel} if kernel else {}))
                present = sorted({r["kernel"] for r in store.rows()}) if kernel and not rows else []
        except ResultsStoreError as exc:
            raise ReportError(str(exc).replace(str(copy), str(path))) from exc
    if not rows and present:
        raise ReportError(f"{path} holds no results of {kernel}; it holds {', '.join(map(repr, present))}")
    if not rows:
        raise ReportError(f"{path} is a results store with no results in it: nothing to report")
    return path, rows


def _copy_store(path: Path, copy: Path) -> None:
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as source, open(copy, "wb") as target:
                while chunk := source.read(1 << 20):
                    target.write(chunk)
        except (OSError, EOFError) as exc:
            raise ReportError(f"{path} is not a readable gzip file ({exc}); a recorded store is .sqlite.gz") from exc
        return
    if not path.with_name(path.name + "-wal").exists():  # no writer: copy the bytes, open nothing there
        shutil.copyfile(path, copy)
        return
    try:  # a writer may be at work: SQLite's backup reads a consistent snapshot, its WAL included
        live = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(copy)
            live.backup(target)
            target.close()
        finally:
            live.close()
    except sqlite3.DatabaseError as exc:  # "file is not a database", unreadable, locked past the timeout
        raise ReportError(f"{path} is not a results store: SQLite cannot read it ({exc})") from exc


def _tables(path: Path, copy: Path) -> set[str]:
    try:
        with sqlite3.connect(copy) as db:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"{path} is not a results store: SQLite cannot read it ({exc})") from exc


def _labeller(kernel: str):
    """The suite's spelling of a shape (16x4096) when it knows the kernel and the shape's names."""
    spec = suite.load(kernel).spec if kernel in suite.names() else None

    def label(shape: dict) -> str:
        if spec is not None and set(shape) == set(spec.symbols):
            return spec.label(shape)
        return " ".join(f"{k}={v}" for k, v in shape.items()) or "(no shape)"
    return label


def _shown(path: Path) -> str:
    """Relative to the working directory when under it, so a report committed to a repository
    does not carry one machine's absolute paths."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarize(rows: list[dict], source: str, path: Path | str = "") -> StoreReport:
    """Group the rows and work out every figure the report shows; rows must be oldest first."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["kernel"], row["dtype"], row["variant"], row["device"]), []).append(row)
    return StoreReport(source=source, path=_shown(Path(path or source)), rows=len(rows),
                       generated=datetime.now(UTC).isoformat(timespec="seconds"),
                       groups=[_group(key, members) for key, members in sorted(groups.items())])


def _group(key: tuple, rows: list[dict]) -> GroupSummary:
    kernel, dtype, variant, device = key
    label = _labeller(kernel)
    by_shape: dict[str, list[dict]] = {}
    for row in rows:
        by_shape.setdefault(label(row["shape"]), []).append(row)
    shapes = [_shape(name, members) for name, members in by_shape.items()]
    shapes.sort(key=lambda s: (s.bytes_moved is None, s.bytes_moved or 0, s.label))
    statuses: dict[str, Counter] = {}
    for row in rows:
        statuses.setdefault(row["which"] or "(none)", Counter())[row["status"]] += 1
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run_id"] or "(none)", []).append(row)
    timed = [r for r in rows if r["median_us"] is not None]
    failures: dict[tuple, FailureExample] = {}
    for row in rows:
        if row["status"] != "ok":
            message = " ".join(str(row["result"].get("message", "")).split())[:240]
            failures.setdefault((row["status"], message[:80]), FailureExample(
                shape=label(row["shape"]), which=row["which"], status=row["status"], message=message))
    return GroupSummary(
        kernel=kernel or "(unnamed)", dtype=dtype or "?", variant=variant or "?", device=device or "?",
        archs=sorted({r["arch"] for r in rows if r["arch"]}),
        first=rows[0]["created_at"], last=max(r["created_at"] for r in rows),
        runs=[RunSummary(run_id=run, rows=len(members), first=members[0]["created_at"],
                         last=max(m["created_at"] for m in members)) for run, members in runs.items()],
        statuses={which: dict(sorted(c.items())) for which, c in sorted(statuses.items(), key=_which_order)},
        ceilings_gbs=sorted({round(c, 3) for r in timed if (c := r["result"].get("copy_bandwidth_gbs"))}),
        timed_without_ceiling=sum(1 for r in timed if not r["result"].get("copy_bandwidth_gbs")),
        shapes=shapes, geomean_speedup=_geomean([s.speedup for s in shapes if s.speedup]),
        failed=sum(1 for r in rows if r["status"] != "ok"), failures=list(failures.values())[:FAILURE_EXAMPLES],
    )


def _which_order(item) -> tuple:
    return (item[0] != BASELINE, item[0])


def _shape(label: str, rows: list[dict]) -> ShapeSummary:
    timed = [r for r in rows if r["status"] == "ok" and r["median_us"] is not None]
    baselines = [r for r in timed if r["which"] == BASELINE]
    candidates = [r for r in rows if r["which"] != BASELINE]
    base = min(baselines, key=lambda r: r["median_us"], default=None)
    best, best_index, convergence, so_far = None, None, [], None
    for index, row in enumerate(candidates, start=1):
        if row["status"] == "ok" and row["median_us"] is not None and (so_far is None or row["median_us"] < so_far):
            so_far, best, best_index = row["median_us"], row, index
        if so_far is not None:
            convergence.append((index, so_far))
    moved = next((r["result"].get("bytes_moved") for r in ([base] if base else []) + rows
                  if r["result"].get("bytes_moved")), None)
    ceiling_row = best or base
    summary = ShapeSummary(
        label=label, shape=rows[0]["shape"], bytes_moved=moved, evaluations=len(candidates),
        statuses=dict(sorted(Counter(r["status"] for r in rows).items())),
        baseline_us=base["median_us"] if base else None, baseline_spread=base["spread"] if base else None,
        baseline_fraction=base["fraction_of_copy_bandwidth"] if base else None,
        best_us=best["median_us"] if best else None, best_spread=best["spread"] if best else None,
        best_fraction=best["fraction_of_copy_bandwidth"] if best else None,
        best_which=best["which"] if best else "", best_config=best["config"] if best else {},
        best_index=best_index, convergence=convergence,
        copy_bandwidth_gbs=ceiling_row["result"].get("copy_bandwidth_gbs") if ceiling_row else None,
    )
    if base and best:
        summary.speedup = base["median_us"] / best["median_us"]
        noise = max(summary.baseline_spread or 0.0, summary.best_spread or 0.0, TIMING_NOISE)
        summary.within_spread = abs(summary.speedup - 1.0) <= noise
    return summary


# --- rendering -------------------------------------------------------------------------------

def _when(stamp: str) -> str:
    try:
        return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return stamp


def _bytes(n: float | None) -> str:
    if not n:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _num(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if value is not None else "—"


def _pct(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


def _config(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(none)"


def _slug(group: GroupSummary) -> str:
    name = f"{group.kernel}-{group.dtype}-{group.variant}-{group.device}"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()


def chart_names(summary: StoreReport) -> list[dict[str, str]]:
    """Per group, its charts' file names: plain when the store holds one group, prefixed otherwise."""
    prefix = len(summary.groups) > 1
    return [{kind: f"{_slug(g) + '-' if prefix else ''}{kind}.svg" for kind in ("speedup", "roofline", "convergence")}
            for g in summary.groups]


def charts(group: GroupSummary) -> dict[str, str | None]:
    """The group's three SVG charts (None where there is nothing to draw)."""
    timed = [s for s in group.shapes if s.speedup is not None]
    speedup = plots.bar_chart(
        [s.label for s in timed], [s.speedup for s in timed],
        title=f"{group.kernel}: baseline time / best candidate time, per shape ({group.device})",
        ylabel="speedup over the baseline (x)", reference=1.0) if timed else None
    base = [(s.bytes_moved, s.baseline_fraction) for s in group.shapes if s.bytes_moved and s.baseline_fraction]
    best = [(s.bytes_moved, s.best_fraction) for s in group.shapes if s.bytes_moved and s.best_fraction]
    roofline = None
    if base or best:
        ceiling = (f"copy ceiling = 1.0 ({_ceilings(group)})" if group.ceilings_gbs else "copy ceiling = 1.0")
        roofline = plots.scatter_chart(
            {"baseline": base, "best candidate": best},
            title=f"{group.kernel}: fraction of copy bandwidth by bytes moved per launch ({group.device})",
            ylabel="fraction of the copy ceiling", xlabel="bytes moved per launch (log scale)",
            log_x=True, x_format=_bytes, reference=1.0, reference_label=ceiling,
            links=[(s.bytes_moved, s.baseline_fraction, s.bytes_moved, s.best_fraction) for s in group.shapes
                   if s.bytes_moved and s.baseline_fraction and s.best_fraction],
            notes=[(s.bytes_moved, s.best_fraction or s.baseline_fraction, s.label) for s in group.shapes
                   if s.bytes_moved and (s.best_fraction or s.baseline_fraction)])
    convergence = None
    if any(s.convergence for s in group.shapes):
        convergence = plots.step_panels(
            [(f"{s.label} ({s.evaluations} evaluated)", s.convergence, s.baseline_us) for s in group.shapes],
            title=f"{group.kernel}: best candidate time so far at each shape ({group.device})",
            ylabel="median time, us (own scale per panel)",
            xlabel="x: candidates evaluated at the shape, in store order", line_label="best candidate so far",
            reference_label="baseline", empty_label="no correct candidate timed")
    return {"speedup": speedup, "roofline": roofline, "convergence": convergence}


def _ceilings(group: GroupSummary) -> str:
    low, high = (f"{c / 1000:.2f}" for c in (group.ceilings_gbs[0], group.ceilings_gbs[-1]))
    return f"{low} TB/s" if low == high else f"{low}-{high} TB/s"


def _ceiling_facts(group: GroupSummary) -> str:
    if not group.ceilings_gbs:
        return "No timed row of this group recorded a copy ceiling, so no fraction of copy bandwidth is shown."
    values = ", ".join(f"{c:.1f}" for c in group.ceilings_gbs[:6]) + (" ..." if len(group.ceilings_gbs) > 6 else "")
    text = (f"This group's timed rows recorded {len(group.ceilings_gbs)} ceiling value(s) "
            f"({values} GB/s): each worker process measures the ceiling once, on its first timing, so "
            "rows timed by different processes can carry slightly different ceilings.")
    if group.timed_without_ceiling:
        text += f" {group.timed_without_ceiling} timed row(s) recorded none and show no fraction."
    return text


def _statuses(group: GroupSummary) -> tuple[list[str], list[list[str]]]:
    names = sorted({s for c in group.statuses.values() for s in c}, key=lambda s: (s != "ok", s))
    rows = [[which] + [str(c.get(s, 0)) for s in names] + [str(sum(c.values()))] for which, c in group.statuses.items()]
    total = [sum(c.get(s, 0) for c in group.statuses.values()) for s in names]
    rows.append(["all"] + [str(n) for n in total] + [str(sum(total))])
    return ["which"] + names + ["all"], rows


def _failure_note(group: GroupSummary) -> str:
    return (f"{group.failed} evaluation(s) did not end ok; one example per distinct status and message "
            f"(at most {FAILURE_EXAMPLES}):")


def _failure_table(group: GroupSummary) -> tuple[list[str], list[list[str]]]:
    return ["shape", "which", "status", "message"], [[f.shape, f.which, f.status, f.message or "—"]
                                                      for f in group.failures]


SHAPE_HEADER = ["shape", "bytes moved", "baseline us", "best us", "speedup", "best: which (evaluation #)",
                "evaluated", "not ok", "baseline of copy bw", "best of copy bw", "best GB/s"]


def _shape_cells(s: ShapeSummary) -> list[str]:
    speed = _num(s.speedup, 3) + (" (within spread)" if s.within_spread else "") if s.speedup else "—"
    found = f"{s.best_which} (#{s.best_index})" if s.best_which else "—"
    achieved = f"{s.bytes_moved / s.best_us / 1e3:.0f}" if s.bytes_moved and s.best_us else "—"
    return [s.label, _bytes(s.bytes_moved), _num(s.baseline_us), _num(s.best_us), speed, found,
            str(s.evaluations), str(s.failed), _pct(s.baseline_fraction), _pct(s.best_fraction), achieved]


def _headline(group: GroupSummary) -> str:
    if len(group.runs) == 1:
        runs = f"run {group.runs[0].run_id}"
    else:
        runs = f"{len(group.runs)} runs (" + "; ".join(
            f"{r.run_id}: {r.rows} rows, {_when(r.first)} to {_when(r.last)}" for r in group.runs) + ")"
    timed = [s for s in group.shapes if s.speedup is not None]
    baseline = sum(group.statuses.get(BASELINE, {}).values())
    total = sum(sum(c.values()) for c in group.statuses.values())
    text = (f"{total} evaluations ({baseline} of the baseline, {total - baseline} of candidates) at "
            f"{len(group.shapes)} shapes on {group.device} ({', '.join(group.archs) or 'arch not recorded'}), "
            f"recorded {_when(group.first)} to {_when(group.last)} in {runs}.")
    if group.geomean_speedup:
        speedups = [s.speedup for s in timed]
        text += (f" Geometric-mean speedup of the best candidate over the baseline: {group.geomean_speedup:.3f}x "
                 f"over {len(timed)} shapes (from {min(speedups):.3f}x to {max(speedups):.3f}x).")
    else:
        text += " No shape has both a correct baseline and a correct candidate timed, so no speedup is shown."
    return text


READING = (
    "Every figure comes from the results store; nothing is re-measured or estimated. Times are the "
    "per-launch medians the rows recorded (the project's protocol: CUDA-graph replay over rotating "
    "inputs, cold L2, after the correctness checks). Baseline: the fastest correct measurement of the "
    "suite's SGLang baseline at the shape. Best: the fastest correct candidate of any kind (template "
    "configuration, rewrite) the store holds at the shape, whichever search or run measured it; "
    "its evaluation # counts the candidates at that shape in the order the store recorded them. "
    "Speedup = baseline / best, marked 'within spread' where it differs from 1 by no more than the "
    "timing spread of either measurement (at least 1%). 'Not ok' counts rows at the shape that "
    "failed to compile, were incorrect, crashed or timed out.")

CONVERGENCE_NOTE = (
    "Convergence: the best correct candidate time after each candidate evaluated at the shape, in "
    "the order the store recorded them (for `astra tune`, the search's rounds, then the other shapes' "
    "winners and the verification of the dispatch table). Each panel has its own time scale; times "
    "more than twice the larger of the baseline and the final best are drawn at the panel's top.")


def _title(summary: StoreReport) -> str:
    kernels = sorted({g.kernel for g in summary.groups})
    return f"{', '.join(kernels)}: results store report ({Path(summary.path).name})"


def _source(summary: StoreReport) -> str:
    return summary.path if summary.source == summary.path else f"{summary.source} ({summary.path})"


_md = md_text  # store text inside Markdown: no raw HTML, no broken table cells (generated_files.py)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(map(_md, header)) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(_md, row)) + " |" for row in rows])


def render_markdown(summary: StoreReport, names: list[dict[str, str]] | None = None,
                    drawn: list[dict[str, str | None]] | None = None) -> str:
    names = names or chart_names(summary)
    drawn = drawn or [charts(g) for g in summary.groups]
    lines = [f"# {_md(_title(summary))}", "",
             (f"Source: {_md(_source(summary))}; {summary.rows} rows in {len(summary.groups)} group(s) "
              f"(kernel, dtype, variant, device). Rendered {_when(summary.generated)} by `astra report`."), "",
             READING, ""]
    for group, files, svgs in zip(summary.groups, names, drawn):
        lines += [f"## {_md(group.title)}", "", _md(_headline(group)), ""]
        lines += _md_table(SHAPE_HEADER, [_shape_cells(s) for s in group.shapes]) + [""]
        for kind, caption in (("speedup", "speedup per shape"), ("roofline", "place against the copy roofline"),
                              ("convergence", "convergence per shape")):
            if svgs[kind]:
                lines += [f"![{caption}]({files[kind]})", ""]
        lines += ["### Evaluations by status", ""]
        lines += _md_table(*_statuses(group)) + [""]
        if group.failures:
            lines += ["### Evaluations that did not end ok", "", _failure_note(group), ""]
            lines += _md_table(*_failure_table(group)) + [""]
        lines += ["### The roofline", "", CEILING_NOTE, "", _ceiling_facts(group), "", CONVERGENCE_NOTE, ""]
        lines += ["### Best candidate per shape", ""]
        lines += [f"- {_md(s.label)}: {_md(s.best_which)} {_md(_config(s.best_config))}" for s in group.shapes
                  if s.best_which] or ["- none: no correct candidate was timed"]
        lines.append("")
    return "\n".join(lines)


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0;overflow-x:auto}
figcaption{font-size:13px;color:#555}p{line-height:1.45}code{background:#f3f3f3;padding:0 3px}"""


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_text(text: str) -> str:
    """Escaped prose, with the notes' `code` spans (written here, never store text) kept as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(summary: StoreReport, drawn: list[dict[str, str | None]] | None = None) -> str:
    """One self-contained page: the SVG charts inline, no script, no external asset."""
    drawn = drawn or [charts(g) for g in summary.groups]
    title = _title(summary)
    parts = [f"<h1>{html.escape(title)}</h1>",
             (f"<p>Source: {html.escape(_source(summary))}; {summary.rows} rows in {len(summary.groups)} group(s) "
              f"(kernel, dtype, variant, device). Rendered {_when(summary.generated)} by "
              "<code>astra report</code>.</p>"),
             f"<p>{_html_text(READING)}</p>"]
    for group, svgs in zip(summary.groups, drawn):
        parts += [f"<h2>{html.escape(group.title)}</h2>", f"<p>{html.escape(_headline(group))}</p>",
                  _html_table(SHAPE_HEADER, [_shape_cells(s) for s in group.shapes])]
        for kind, caption in (("speedup", "Speedup of the best candidate over the baseline, per shape."),
                              ("roofline", ("Place against the copy roofline: baseline and best candidate per "
                                            "shape, joined by a line.")),
                              ("convergence", "Convergence: best candidate time so far at each shape.")):
            if svgs[kind]:
                parts.append(f"<figure>{svgs[kind]}<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts += ["<h3>Evaluations by status</h3>", _html_table(*_statuses(group))]
        if group.failures:
            parts += ["<h3>Evaluations that did not end ok</h3>", f"<p>{html.escape(_failure_note(group))}</p>",
                      _html_table(*_failure_table(group))]
        parts += ["<h3>The roofline</h3>", f"<p>{_html_text(CEILING_NOTE)}</p>",
                  f"<p>{html.escape(_ceiling_facts(group))}</p>", f"<p>{_html_text(CONVERGENCE_NOTE)}</p>",
                  "<h3>Best candidate per shape</h3>",
                  _html_table(["shape", "which", "configuration"],
                              [[s.label, s.best_which, _config(s.best_config)] for s in group.shapes if s.best_which])]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def render(summary: StoreReport) -> Rendered:
    """Every file of the report, in memory: nothing is written until all of it rendered."""
    names = chart_names(summary)
    drawn = [charts(g) for g in summary.groups]
    markdown = render_markdown(summary, names, drawn)
    page = render_html(summary, drawn)
    files = {"report.md": markdown, "report.html": page, "report.json": summary.model_dump_json(indent=2)}
    for group_names, svgs in zip(names, drawn):
        files.update({group_names[kind]: svg for kind, svg in svgs.items() if svg})
    return Rendered(markdown=markdown, html=page, summary=summary, files=files)


def write(files: dict[str, str], out: Path) -> list[Path]:
    """Each file replaced whole (a reader never sees half of one); `out` is created if missing."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        target = out / name
        partial = target.with_name(f".{name}.partial")
        partial.write_text(content, encoding="utf-8")
        os.replace(partial, target)
        written.append(target)
    return written
