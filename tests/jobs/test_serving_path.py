"""bench/serving_path.py without a GPU: the layer reports kept in docs render again (`--from`), the
rule that calls a point faster or slower only where the rounds' ranges do not overlap, and one line
for a file that is not a report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def module():
    return load_script("bench/serving_path.py")


def test_a_point_differs_only_where_the_ranges_do_not_overlap():
    compare = module().compare
    row = {"a_lo": 10.0, "a_hi": 11.0, "b_lo": 11.5, "b_hi": 12.0, "c_lo": 10.5, "c_hi": 13.0}
    assert compare(row, "a", "b") == "faster" and compare(row, "b", "a") == "slower"
    assert compare(row, "a", "c") == "within the spread" == compare(row, "c", "b")


def test_a_report_with_ranges_counts_each_goal(tmp_path, capsys, monkeypatch):
    serving = module()
    keys = [key for _, ours, theirs in serving.COMPARISONS for key in (ours, theirs)] + ["ops_astra", "ops_native"]
    row = {"tokens": 16, "astra_max_abs_diff": 0.01, "native_max_abs_diff": 0.02, "reference_max_abs": 3.0}
    for key in keys:
        row.update({f"{key}_us": 100.0, f"{key}_lo": 99.0, f"{key}_hi": 101.0})
    row.update({"eager_astra_us": 80.0, "eager_astra_lo": 79.0, "eager_astra_hi": 82.0,  # faster than native
                "compile_astra_us": 120.0, "compile_astra_lo": 110.0, "compile_astra_hi": 130.0})  # slower
    report = {"device": "NVIDIA H200", "torch": "2.11", "date": "2026-11-28", "rounds": 7,
              "tables": {"rotary_embedding": "h200"}, "rows": [row]}
    (tmp_path / "layer.json").write_text(json.dumps(report))
    monkeypatch.setattr(sys, "argv", ["serving_path.py", "--from", str(tmp_path / "layer.json"), "--out",
                                      str(tmp_path / "again")])
    assert serving.main() == 0
    text = (tmp_path / "again" / "layer.md").read_text()
    assert "the shipped tables (rotary_embedding: h200)" in text and "the median of 7 rounds" in text
    assert "| eager: astra's ops / SGLang's native forms | 1 | 0 | 0 | - |" in text
    assert "| torch.compile called eagerly: astra's ops / torch.compile's own layer | 0 | 0 | 1 | 16 (1.200x) |" in text
    assert (tmp_path / "again" / "layer.svg").is_file()


def test_the_reports_in_docs_render_again_and_a_foreign_file_is_one_line(tmp_path, capsys, monkeypatch):
    serving = module()
    for report in sorted((ROOT / "docs" / "bench").glob("*-layer/layer.json")):
        monkeypatch.setattr(sys, "argv", ["serving_path.py", "--from", str(report), "--out", str(tmp_path / report.parent.name)])
        assert serving.main() == 0, report
        again = (tmp_path / report.parent.name / "layer.md").read_text().splitlines()
        assert again[4:] == (report.parent / "layer.md").read_text().splitlines()[4:]  # the table and the checks
    capsys.readouterr()
    (tmp_path / "other.json").write_text("[1, 2]")
    monkeypatch.setattr(sys, "argv", ["serving_path.py", "--from", str(tmp_path / "other.json"), "--out", str(tmp_path / "x")])
    assert serving.main() == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --from") and len(out.strip().splitlines()) == 1


def test_the_rounds_of_every_variant_are_interleaved():
    """A round takes one sample of each variant, the order reversed every other round, so a drift of
    the host's speed over the run reaches every variant's range alike."""
    log = []
    samplers = {key: (lambda k=key: log.append(k) or float(len(log))) for key in ("a", "b", "c")}
    samples = module().interleaved(samplers, rounds=4)
    assert log == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert samples == {"a": [1.0, 6.0, 7.0, 12.0], "b": [2.0, 5.0, 8.0, 11.0], "c": [3.0, 4.0, 9.0, 10.0]}
