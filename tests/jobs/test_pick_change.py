"""bench/pick_change.py without a GPU: old time over new where today's pick is what the after-bench
ran and the before-bench ran another; the same picks say how far the two benches agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from astra_kernels import suite
from astra_kernels.jobs.benchmark import BenchReport, BenchRow, shipped_table

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "pick_change.py"


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


def _row(label: str, config: dict, tuned: float) -> BenchRow:
    return BenchRow(kernel="topk_softmax", label=label, shape=suite.load("topk_softmax").spec.parse_shape(label),
                    dtype="bf16", variant="default", bytes_moved=1, baseline_us=9.0, baseline_status="ok",
                    tuned_us=tuned, tuned_status="ok", tuned_config=config)


def _write(path: Path, rows: list[BenchRow], l2: str = "cold") -> Path:
    path.write_text(BenchReport(device="NVIDIA H200", arch="sm_90", date="2026-11-29T01:00:00+00:00", dtype="bf16",
                                l2=l2, rows=rows).model_dump_json())
    return path


def test_only_shapes_where_the_after_bench_ran_todays_pick_and_the_before_bench_another_are_compared(tmp_path):
    table = shipped_table("topk_softmax", "NVIDIA H200")
    pick = lambda label: table.pick(suite.load("topk_softmax").spec.parse_shape(label), suite.DEFAULT_SMS, "sm_90").config  # noqa: E731
    other = lambda label: {**pick(label), "SORT": 1 - pick(label)["SORT"]}  # noqa: E731
    before = _write(tmp_path / "before.json", [_row("1x8x8", other("1x8x8"), 3.0), _row("2x8x8", pick("2x8x8"), 2.0),
                                               _row("4x8x8", other("4x8x8"), 2.0)])
    after = _write(tmp_path / "after.json", [_row("1x8x8", pick("1x8x8"), 2.0), _row("2x8x8", pick("2x8x8"), 2.5),
                                             _row("4x8x8", other("4x8x8"), 1.0)])  # not today's pick: left out
    out = run(before, after)
    assert out.returncode == 0, out.stderr
    assert "1 shapes whose pick changed, old time / new time geomean 1.500" in out.stdout
    assert "1x8x8:1.500" in out.stdout and "4x8x8" not in out.stdout
    assert "the same pick in both: 1 shapes, old / new 0.800-0.800" in out.stdout


def test_two_regimes_or_a_foreign_file_are_refused_in_one_line(tmp_path):
    cold = _write(tmp_path / "cold.json", [])
    warm = _write(tmp_path / "warm.json", [], l2="warm")
    for args in ((cold, warm), (ROOT / "README.md", cold), (tmp_path / "missing.json", cold)):
        out = run(*args)
        assert out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out
