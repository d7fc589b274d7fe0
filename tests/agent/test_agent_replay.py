"""The whole agent graph without a GPU, on real measurements: `astra optimize --replay` over the
newest recording of rmsnorm shipped with the package (an H100's) (the one of its current template). The
rule-based planner tunes the template, the profiler accepts the result, and the report carries the
recorded times."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

from astra_kernels import cli
from astra_kernels import suite
from astra_kernels.suite import recordings

SPEC = suite.load("rmsnorm").spec
RECORDING = recordings.resolve("recorded", "rmsnorm")


def _recorded_baselines(tmp_path) -> dict[str, float]:
    copy = tmp_path / "recording.sqlite"
    copy.write_bytes(gzip.decompress(RECORDING.read_bytes()))
    with sqlite3.connect(copy) as db:
        rows = db.execute("SELECT shape, median_us FROM results WHERE which = 'baseline' AND status = 'ok'")
        return {SPEC.label(json.loads(shape)): us for shape, us in rows}


def test_optimize_replays_the_recording_end_to_end(tmp_path):
    out = tmp_path / "out"
    # The search's budget is wall-clock seconds even in a replay, so it must leave room for a loaded
    # machine: with 4 s, a busy 2-core CI machine reached 154 evaluations and no configuration faster
    # than the baseline, where an idle one finds one within a few hundred.
    code = cli.main(["optimize", "rmsnorm", "--replay", str(RECORDING), "--shapes", "128x4096,16384x8192",
                     "--tune-seconds", "20", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["best"]["origin"] == "tune" and report["geomean_speedup"] > 1.0
    baselines = _recorded_baselines(tmp_path)
    for row in report["shapes"]:
        assert row["baseline_us"] == baselines[row["shape"]]  # the recording's own figure, not an estimate
        assert row["best_us"] <= row["baseline_us"]


def test_optimize_json_is_the_report_alone_on_stdout(tmp_path, capsys):
    code = cli.main(["optimize", "rmsnorm", "--replay", str(RECORDING), "--shapes", "128x4096",
                     "--tune-seconds", "3", "--out", str(tmp_path / "out"), "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # the whole of stdout is the JSON: the agent's lines went to stderr
    assert code == 0 and report["shapes"][0]["shape"] == "128x4096"
    assert "thread " in captured.err and "planner" in captured.err


def test_optimize_replay_of_a_missing_store_says_so(tmp_path, capsys):
    assert cli.main(["optimize", "rmsnorm", "--replay", str(tmp_path / "none.sqlite"), "--out", str(tmp_path)]) == 2
    assert "no results store at" in capsys.readouterr().out


def test_a_tune_sample_that_runs_nowhere_at_some_shapes_leaves_them_to_others(tmp_path):
    """`--tune-sample 30` over rmsnorm's recording: at three of the eight shapes no configuration of
    the sample runs (the replay answers none of them), so the search has no time there. Those shapes
    are not the template's to win (excluded), not a failure of it, and the run ends with its report
    (it stopped with a TypeError formatting a missing geometric mean before 2026-11-28)."""
    out = tmp_path / "out"
    code = cli.main(["optimize", "rmsnorm", "--replay", "recorded", "--rounds", "2", "--tune-sample", "30",
                     "--out", str(out), "--store", str(tmp_path / "results.sqlite")])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    tuned = next(e for e in report["events"] if e.startswith("tuner: candidate"))
    assert "measured at 5 of 8 shapes" in tuned, tuned
    judged = next(e for e in report["events"] if e.startswith("profiler: candidate 2"))
    assert "128x11008 excluded" in judged and "incorrect" not in judged, judged
    assert all(row["best_us"] for row in report["shapes"])  # every shape still has its best kernel
