"""`astra report` without a GPU: figures from stores built row by row, the shipped rmsnorm recording
checked against its own rows, the HTML page and charts, and every kind of bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest
from astra_kernels import suite
from astra_kernels.suite import recordings
from astra_kernels.jobs import reporting
from astra_kernels.jobs import charts as plots
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.toolchain.timing import Timing

from astra_kernels import cli

SVG = "{http://www.w3.org/2000/svg}"
DEVICE = "NVIDIA H100 80GB HBM3"
SILU = suite.load("silu_and_mul")
SMALL, LARGE = {"T": 16, "D": 4096}, {"T": 64, "D": 8192}
CEILING_GBS = 3000.0


def result(median_us: float | None, status: str = "ok", nbytes: int = 393216, ceiling: float | None = CEILING_GBS,
           spread: float = 0.002, message: str = "") -> EvaluationResult:
    """A result as the evaluation protocol fills it: the floor and fraction from bytes and ceiling."""
    timing = None
    if median_us is not None:
        timing = Timing(median_us=median_us, min_us=median_us, max_us=median_us * (1 + spread), spread=spread,
                        samples_us=[median_us], launches_per_replay=64, input_sets=64, method="graph")
    floor = nbytes / (ceiling * 1e9) * 1e6 if ceiling and timing else None
    return EvaluationResult(status=status, message=message, device=DEVICE, arch="sm_90", timing=timing,
                            bytes_moved=nbytes, copy_bandwidth_gbs=ceiling if timing else None, floor_us=floor,
                            fraction_of_copy_bandwidth=floor / median_us if floor else None)


class Rows:
    """Puts rows through the real ResultsStore API, each with its own key (a distinct config)."""

    made = 0

    def __init__(self, store: ResultsStore, kernel: str = "silu_and_mul"):
        self.store, self.kernel = store, kernel

    def put(self, shape: dict, res: EvaluationResult, which: str = "template", run_id: str = "r1") -> None:
        Rows.made += 1
        self.n = Rows.made
        config = {**SILU.template.default, "UNROLL": self.n} if which != "baseline" else None
        request = suite.request(SILU, "template" if config else "baseline", shape, "bf16", config=config)
        request.seeds = (self.n, self.n + 1)  # a baseline measured twice is two rows, as with two seeds
        self.store.put(evaluation_key(request, DEVICE), request, res, kernel=self.kernel, which=which,
                       config=config or {}, shape=shape, dtype="bf16", variant="default", run_id=run_id)


def small_store(path: Path) -> Path:
    """At SMALL: two baseline measurements (10, 9 us) and candidates 12, compile error, 8, 9 us;
    at LARGE: a baseline and one incorrect candidate, so no speedup there."""
    with ResultsStore(path) as store:
        rows = Rows(store)
        rows.put(SMALL, result(10.0), "baseline")
        rows.put(SMALL, result(12.0))
        rows.put(SMALL, result(None, "compile_error", message="error: identifier 'x' is undefined"))
        rows.put(SMALL, result(8.0, ceiling=3100.0))
        rows.put(SMALL, result(9.0), run_id="r2")
        rows.put(SMALL, result(9.0, spread=0.004), "baseline", run_id="r2")
        rows.put(LARGE, result(20.0, nbytes=3 * 2**20), "baseline")
        rows.put(LARGE, result(None, "incorrect", nbytes=3 * 2**20, message="out: max abs error 3.2"))
    return path


def test_figures_follow_the_rows(tmp_path):
    summary = reporting.report(small_store(tmp_path / "r.sqlite")).summary
    assert summary.rows == 8 and len(summary.groups) == 1
    group = summary.groups[0]
    assert (group.kernel, group.dtype, group.variant, group.device) == ("silu_and_mul", "bf16", "default", DEVICE)
    small, large = group.shapes  # ordered by bytes moved
    assert (small.label, large.label) == ("16x4096", "64x8192")
    assert small.baseline_us == 9.0, "the fastest correct baseline measurement"
    assert small.best_us == 8.0 and small.best_index == 3 and small.best_which == "template"
    assert small.speedup == pytest.approx(9.0 / 8.0) and small.within_spread is False
    assert small.convergence == [(1, 12.0), (2, 12.0), (3, 8.0), (4, 8.0)]
    assert small.evaluations == 4 and small.failed == 1
    assert small.statuses == {"compile_error": 1, "ok": 5}
    assert small.best_fraction == pytest.approx(393216 / 3100e9 * 1e6 / 8.0), "the best row's own ceiling"
    assert small.copy_bandwidth_gbs == 3100.0
    assert large.speedup is None and large.best_us is None and large.baseline_us == 20.0
    assert large.bytes_moved == 3 * 2**20 and large.evaluations == 1 and large.convergence == []
    assert group.geomean_speedup == pytest.approx(9.0 / 8.0)
    assert group.statuses == {"baseline": {"ok": 3}, "template": {"compile_error": 1, "incorrect": 1, "ok": 3}}
    assert group.ceilings_gbs == [3000.0, 3100.0] and group.timed_without_ceiling == 0
    assert [(r.run_id, r.rows) for r in group.runs] == [("r1", 6), ("r2", 2)]
    assert {f.status for f in group.failures} == {"compile_error", "incorrect"}
    assert any("identifier 'x' is undefined" in f.message for f in group.failures)


def test_a_speedup_within_the_timing_spread_says_so(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        rows = Rows(store)
        rows.put(SMALL, result(10.0, spread=0.03), "baseline")
        rows.put(SMALL, result(9.8))
    shape = reporting.report(tmp_path / "r.sqlite").summary.groups[0].shapes[0]
    assert shape.speedup == pytest.approx(10.0 / 9.8) and shape.within_spread is True
    assert "(within spread)" in reporting.report(tmp_path / "r.sqlite").markdown


class Page(HTMLParser):
    """What a browser would load: tags, SVG roots, and anything fetched from elsewhere."""

    def __init__(self):
        super().__init__()
        self.tags, self.external, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") or (value and "url(" in value):
                self.external.append((tag, name, value))

    def handle_data(self, data):
        self.text.append(data)


def test_files_html_and_charts(tmp_path):
    out = tmp_path / "report"
    rendered = reporting.report(small_store(tmp_path / "r.sqlite"), out=out)
    names = sorted(p.name for p in rendered.written)
    assert names == ["convergence.svg", "report.html", "report.json", "report.md", "roofline.svg", "speedup.svg"]
    assert sorted(p.name for p in out.iterdir()) == names, "no partial file is left behind"
    page = Page()
    page.feed((out / "report.html").read_text())
    page.close()
    assert page.tags.count("svg") == 3 and "script" not in page.tags and "img" not in page.tags
    assert page.external == [], "the page must load nothing from elsewhere"
    assert (out / "report.html").read_text() == rendered.html
    for svg in out.glob("*.svg"):
        root = ElementTree.parse(svg).getroot()
        assert root.tag == SVG + "svg" and svg.read_text() in rendered.html
    markdown = (out / "report.md").read_text()
    assert markdown == rendered.markdown
    for name in ("speedup.svg", "roofline.svg", "convergence.svg"):
        assert f"]({name})" in markdown
    assert "| 16x4096 | 393 kB | 9.00 | 8.00 | 1.125 | template (#3) | 4 | 1 |" in markdown
    assert "3000.0, 3100.0 GB/s" in markdown, "the ceilings the rows recorded are named"
    assert json.loads((out / "report.json").read_text())["groups"][0]["shapes"][0]["best_us"] == 8.0
    speedup = ElementTree.parse(out / "speedup.svg").getroot()
    bars = [r for r in speedup.iter(SVG + "rect") if r.get("fill") == plots.COLOURS[0]]
    assert len(bars) == 1, "one bar: the only shape with both times"
    panels = ElementTree.parse(out / "convergence.svg").getroot()
    assert len(list(panels.iter(SVG + "path"))) == 1, "one line: the only shape with a correct candidate"
    assert "no correct candidate timed" in (out / "convergence.svg").read_text()
    assert "<svg" in rendered._repr_html_() and "<body>" not in rendered._repr_html_()


def test_store_text_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>|x"
    with ResultsStore(tmp_path / "r.sqlite") as store:
        rows = Rows(store, kernel=evil)
        rows.put(SMALL, result(10.0), "baseline")
        rows.put(SMALL, result(None, "incorrect", message=evil))
        rows.put(SMALL, result(8.0))
    rendered = reporting.report(tmp_path / "r.sqlite")
    page = Page()
    page.feed(rendered.html)
    assert "script" not in page.tags and evil in "".join(page.text)
    assert "<script>" not in rendered.markdown and "&lt;script&gt;" in rendered.markdown
    table = [line for line in rendered.markdown.splitlines() if line.startswith("| D=4096 T=16 | 393 kB |")]
    assert len(table) == 1 and table[0].count(" | ") == len(reporting.SHAPE_HEADER) - 1, \
        "an unknown kernel's shape is spelt by its names, and no cell breaks the table"
    for svg in reporting.render(rendered.summary).files.values():
        if svg.startswith("<svg"):
            ElementTree.fromstring(svg)


def test_shipped_rmsnorm_recording_matches_its_rows(tmp_path):
    # An H100's recording of one dtype (the newer ones add the table's checks in the other dtypes,
    # a group of their own, test_a_recording_checked_in_other_dtypes_reports_them_untimed)
    recording = recordings.find("rmsnorm", "h100-2026-11-27")
    plain = tmp_path / "rmsnorm.sqlite"
    plain.write_bytes(gzip.decompress(recording.path.read_bytes()))
    spec = suite.load("rmsnorm").spec
    with sqlite3.connect(plain) as db:
        total = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        device = db.execute("SELECT DISTINCT device FROM results").fetchall()
        baseline = {spec.label(json.loads(s)): us for s, us in db.execute(
            "SELECT shape, MIN(median_us) FROM results WHERE which='baseline' AND status='ok' GROUP BY shape")}
        best = {spec.label(json.loads(s)): us for s, us in db.execute(
            "SELECT shape, MIN(median_us) FROM results WHERE which!='baseline' AND status='ok' GROUP BY shape")}
        evaluated = {spec.label(json.loads(s)): n for s, n in db.execute(
            "SELECT shape, COUNT(*) FROM results WHERE which!='baseline' GROUP BY shape")}
        ceilings = sorted({round(c, 3) for (c,) in db.execute(
            "SELECT json_extract(result, '$.copy_bandwidth_gbs') FROM results WHERE median_us IS NOT NULL")})
        first, last = db.execute("SELECT MIN(created_at), MAX(created_at) FROM results").fetchone()
    out = tmp_path / "docs"
    assert cli.main(["report", f"recorded:{recording.session}", "--kernel", "rmsnorm", "--out", str(out)]) == 0
    summary = reporting.StoreReport.model_validate_json((out / "report.json").read_text())
    assert summary.rows == total and len(summary.groups) == 1 and [(summary.groups[0].device,)] == device
    group = summary.groups[0]
    assert {s.label: s.baseline_us for s in group.shapes} == pytest.approx(baseline)
    assert {s.label: s.best_us for s in group.shapes} == pytest.approx(best)
    assert {s.label: s.evaluations for s in group.shapes} == evaluated
    assert group.ceilings_gbs == ceilings and (group.first, group.last) == (first, last)
    speedups = [baseline[k] / best[k] for k in baseline]
    assert group.geomean_speedup == pytest.approx(math.exp(sum(map(math.log, speedups)) / len(speedups)))
    for shape in group.shapes:
        assert shape.convergence[-1][1] == pytest.approx(best[shape.label])
        assert all(b[1] <= a[1] for a, b in zip(shape.convergence, shape.convergence[1:])), "best so far never rises"
    markdown = (out / "report.md").read_text()
    big = max(group.shapes, key=lambda s: s.bytes_moved)
    assert f"| {big.label} | " in markdown and f"| {baseline[big.label]:.2f} | {best[big.label]:.2f} | " in markdown
    assert f"{group.geomean_speedup:.3f}x over {len(baseline)} shapes" in markdown
    assert f"{recording.session}/rmsnorm.sqlite.gz" in markdown and "NVIDIA H100 80GB HBM3" in markdown
    roofline = ElementTree.parse(out / "roofline.svg").getroot()
    circles = len(list(roofline.iter(SVG + "circle")))
    assert circles == 2 * len(baseline) + 2, "a point per shape and side, and the legend's two"
    panels = ElementTree.parse(out / "convergence.svg").getroot()
    assert len(list(panels.iter(SVG + "path"))) == len(baseline)


def test_roofline_labels_do_not_collide():
    points = [(2e6 * 1.15 ** i, 0.5 + 0.01 * i) for i in range(8)]
    notes = [(x, y, f"shape{i}x4096") for i, (x, y) in enumerate(points)]
    svg = plots.scatter_chart({"best": points}, title="t", ylabel="y", xlabel="x", log_x=True, reference=1.0,
                              reference_label="ceiling", notes=notes)
    boxes = []
    for text in ElementTree.fromstring(svg).iter(SVG + "text"):
        if text.get("font-size") == "9":
            x, y = float(text.get("x")), float(text.get("y"))
            boxes.append((x, y - 9, x + plots.NOTE_CHAR_W * len(text.text), y))
    assert len(boxes) == len(points)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_convergence_panels_clip_outliers_inside_the_panel():
    svg = plots.step_panels([("s", [(1, 100.0), (2, 5.0), (3, 4.0)], 5.0)], title="t", ylabel="us", xlabel="n",
                            line_label="best", reference_label="baseline")
    root = ElementTree.fromstring(svg)
    frame = next(r for r in root.iter(SVG + "rect") if r.get("stroke") == "#ccc")
    top, bottom = float(frame.get("y")), float(frame.get("y")) + float(frame.get("height"))
    path = next(root.iter(SVG + "path")).get("d")
    ys = [float(v) for v in re.findall(r"M[\d.]+,([\d.]+)", path) + re.findall(r"V([\d.]+)", path)]
    assert len(ys) == 3 and all(top - 0.1 <= y <= bottom + 0.1 for y in ys)
    assert ys[0] == pytest.approx(top), "the 100 us outlier is drawn at the panel's top edge"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_live_store_is_read_without_being_touched(tmp_path):
    path = tmp_path / "live.sqlite"
    with ResultsStore(path) as store:  # held open, as by a tuner still writing
        rows = Rows(store)
        rows.put(SMALL, result(10.0), "baseline")
        rows.put(SMALL, result(7.5))
        # -shm is SQLite's shared-memory index, where every reader takes its read lock: not data.
        before = {p.name: _digest(p) for p in tmp_path.iterdir() if not p.name.endswith("-shm")}
        assert "live.sqlite-wal" in before
        summary = reporting.report(path).summary
        assert summary.groups[0].shapes[0].best_us == 7.5, "committed rows of an open store are seen"
        after = {p.name: _digest(p) for p in tmp_path.iterdir() if not p.name.endswith("-shm")}
        assert after == before, "the store and its WAL are untouched"
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / "results.sqlite").write_bytes(path.read_bytes())
    assert reporting.report(folder).summary.rows == 2, "an `astra tune` output folder names its store"


@pytest.mark.parametrize("make, args, says", [
    (lambda d: None, ["missing.sqlite"], "no such file"),
    (lambda d: (d / "notes.txt").write_text("not a database at all, just text " * 40), ["notes.txt"],
     "SQLite cannot read it"),
    (lambda d: (d / "x.sqlite.gz").write_bytes(b"plain bytes"), ["x.sqlite.gz"], "not a readable gzip file"),
    (lambda d: sqlite3.connect(d / "other.sqlite").execute("CREATE TABLE t (x)").connection.commit(),
     ["other.sqlite"], "not a results store (it has tables ['t'])"),
    (lambda d: (d / "zero.sqlite").write_bytes(b""), ["zero.sqlite"], "an empty file"),
    (lambda d: ResultsStore(d / "empty.sqlite").close(), ["empty.sqlite"], "no results in it"),
    (lambda d: small_store(d / "r.sqlite"), ["r.sqlite", "--kernel", "rmsnorm"], "holds no results of rmsnorm"),
    (lambda d: (d / "folder").mkdir(), ["folder"], "without results.sqlite"),
    (lambda d: None, ["recorded"], "add --kernel"),
    (lambda d: None, ["recorded:h100-1999-01-01", "--kernel", "rmsnorm"], "no shipped recording"),
])
def test_bad_inputs_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys, make, args, says):
    monkeypatch.chdir(tmp_path)
    make(tmp_path)
    before = {p.name: _digest(p) for p in tmp_path.iterdir() if p.is_file()}
    assert cli.main(["report", *args, "--out", "out"]) == 2
    assert says in " ".join(capsys.readouterr().out.split())
    assert not (tmp_path / "out").exists()
    assert {p.name: _digest(p) for p in tmp_path.iterdir() if p.is_file()} == before, "inputs are left as they were"


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    assert cli.main(["report", str(small_store(tmp_path / "r.sqlite")), "--out", str(tmp_path / "taken")]) == 2
    assert "is a file, not a folder" in " ".join(capsys.readouterr().out.split())


def test_json_summary(tmp_path, capsys):
    assert cli.main(["report", str(small_store(tmp_path / "r.sqlite")), "--out", str(tmp_path / "o"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    shape = summary["groups"][0]["shapes"][0]
    assert shape["label"] == "16x4096" and shape["speedup"] == pytest.approx(1.125) and "convergence" not in shape
    assert summary["groups"][0]["statuses"]["template"]["compile_error"] == 1


def test_several_groups_get_their_own_charts(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        for kernel in ("silu_and_mul", "gelu_and_mul"):
            rows = Rows(store, kernel=kernel)
            rows.put(SMALL, result(10.0), "baseline")
            rows.put(SMALL, result(9.0))
    rendered = reporting.report(tmp_path / "r.sqlite", out=tmp_path / "o")
    svgs = sorted(p.name for p in rendered.written if p.suffix == ".svg")
    assert len(svgs) == 6 and all(n.startswith(("gelu-and-mul-", "silu-and-mul-")) for n in svgs)
    assert reporting.report(tmp_path / "r.sqlite", kernel="gelu_and_mul").summary.rows == 2


def test_a_recording_checked_in_other_dtypes_reports_them_untimed(tmp_path):
    """The newest recordings hold the tune's last step, the table's configurations checked (never
    timed) in every dtype: the report shows the timed dtype's group, and the others with no time."""
    recording = recordings.find("rmsnorm", "h200-2026-11-28")
    assert cli.main(["report", f"recorded:{recording.session}", "--kernel", "rmsnorm", "--out", str(tmp_path)]) == 0
    summary = reporting.StoreReport.model_validate_json((tmp_path / "report.json").read_text())
    timed = [g for g in summary.groups if any(s.best_us for s in g.shapes)]
    assert [g.dtype for g in timed] == ["bf16"] and timed[0].geomean_speedup > 1.0
    assert {g.dtype for g in summary.groups} == {"bf16", "fp16"}
    assert all(s.best_us is None and s.baseline_us is None for g in summary.groups if g not in timed for s in g.shapes)
