"""bench/pick_gain.py, bench/code_size.py and bench/retime_effect.py on the shipped recordings, without a GPU:
what they read back is the H200's measurements of 2026-11-28/29 (docs/performance.md entries 27 and 28)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from astra_kernels.suite.tuned_tables import table_path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300)


def rows(stdout: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines()[2:] if line.startswith("|")]


def test_a_table_against_itself_gains_nothing_and_an_older_pick_shows_its_loss(tmp_path):
    table = json.loads(table_path("topk_softmax", "h200").read_text())
    same = tmp_path / "same.json"
    same.write_text(json.dumps(table))
    run_same = run("pick_gain.py", "topk_softmax", str(same), "--json", str(tmp_path / "gain.json"))
    assert run_same.returncode == 0, run_same.stderr
    widths = rows(run_same.stdout)
    assert {w[0] for w in widths} == {"8x2", "8x8", "64x2", "64x8", "128x2", "128x8", "256x2", "256x8"}
    assert all(w[2] == "1.000x" for w in widths)
    written = json.loads((tmp_path / "gain.json").read_text())
    assert [w["width"] for w in written["widths"]] == [w[0] for w in widths]
    assert all(s["old_us"] == s["new_us"] for w in written["widths"] for s in w["shapes"])

    # 1x8x8 as the selecting form picked it before the sorted one (measured in the same store)
    for entry in table["entries"]:
        if entry["shape"] == {"T": 1, "E": 8, "K": 8}:
            entry["config"] = {"TPR": 1, "LOAD_BYTES": 2, "WARPS": 1, "ROWS": 1, "KEYS": 1, "FAST_MATH": 1}
    older = tmp_path / "older.json"
    older.write_text(json.dumps(table))
    run_older = run("pick_gain.py", "topk_softmax", str(older))
    assert run_older.returncode == 0, run_older.stderr
    eight = next(w for w in rows(run_older.stdout) if w[0] == "8x8")
    assert float(eight[2].rstrip("x")) > 1.0  # one shape of 30 slower: the geomean moves above 1
    old_us, new_us = (float(v) for v in eight[4].split(": ")[1].split(" -> "))
    assert old_us > new_us


def test_code_size_lists_every_measured_configuration_with_its_machine_code(tmp_path):
    result = run("code_size.py", "topk_softmax", "1x8x8", "--json", str(tmp_path / "sizes.json"))
    assert result.returncode == 0, result.stderr
    listed = rows(result.stdout)
    written = json.loads((tmp_path / "sizes.json").read_text())["rows"]
    assert [(f"{r['us']:.3f}", str(r["code_bytes"])) for r in written] == [(r[0], r[1]) for r in listed]
    times = [float(r[0]) for r in listed]
    assert times == sorted(times) and len(listed) >= 5
    fastest, slowest_template = listed[0], [r for r in listed if r[2] == "template"][-1]
    assert "SORT=1" in fastest[3] and int(fastest[1]) < int(slowest_template[1])


def test_code_size_names_a_shape_the_store_lacks_in_one_line():
    result = run("code_size.py", "topk_softmax", "9x8x8")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "holds no measurement of topk_softmax at 9x8x8" in result.stderr


def test_pick_gain_names_a_file_that_is_no_table_in_one_line(tmp_path):
    (tmp_path / "x.json").write_text('{"x": 1}')
    result = run("pick_gain.py", "topk_softmax", str(tmp_path / "x.json"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "x.json: not a dispatch table" in result.stderr


def test_retime_effect_reads_what_the_re_timing_decided_and_what_a_margin_keeps(tmp_path):
    """bench/retime_effect.py over the shipped merge_attn_states sweep recording (2026-11-28): every
    shape whose re-timing finished, the search's winner against the re-timing's, and with --margin
    the rule the tuner now applies (runner.contends), which keeps less of the re-timing time as the
    margin shrinks and none at all at a margin no finalist lies within."""
    recording = Path(__file__).resolve().parents[2] / "kernels_sglang/recorded/h200-2026-11-28/merge_attn_states.sqlite.gz"
    margins = {}
    for margin in ("0.5", "0.02", "0"):
        result = run("retime_effect.py", str(recording), "--margin", margin, "--json", str(tmp_path / f"{margin}.json"))
        assert result.returncode == 0, result.stderr
        report = json.loads((tmp_path / f"{margin}.json").read_text())[0]
        margins[margin] = report["margin"]
        assert "merge_attn_states" in result.stdout and f"{len(report['shapes'])} shapes re-timed whole" in result.stdout
    shapes = report["shapes"]
    assert len(shapes) >= 30 and all(len(s["finalists"]) >= 2 for s in shapes)
    for s in shapes:  # finalists in search order; a change is a gain of the re-timing's own winner
        times = [f["search_us"] for f in s["finalists"]]
        assert times == sorted(times) and all(len(f["retimed_us"]) >= 2 for f in s["finalists"])
        assert s["gain"] >= 1.0 and (s["changed"] or s["gain"] == 1.0)
    whole = margins["0.5"]["whole_wall_s"]
    assert margins["0.5"]["kept_wall_s"] == whole > 0 and margins["0.5"]["differ"] == []  # everyone contends
    assert margins["0"]["kept_wall_s"] <= margins["0.02"]["kept_wall_s"] < whole


def test_retime_effect_refuses_a_file_that_is_not_a_store_in_one_line(tmp_path):
    bogus = tmp_path / "notes.sqlite"
    bogus.write_text("not a database")
    result = run("retime_effect.py", str(bogus))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "not a results store" in result.stderr
    bad_margin = run("retime_effect.py", str(bogus), "--margin", "2")
    assert bad_margin.returncode == 2 and "--margin 2.0: a fraction" in bad_margin.stderr
