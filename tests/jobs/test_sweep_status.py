"""bench/sweep_status.py without a GPU: which sweep points have a benchmark row of the configuration
the shipped table picks there today (a re-tune between calls makes earlier rows another pick's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from astra_kernels import suite
from astra_kernels.jobs.benchmark import BenchReport, BenchRow, shipped_table
from astra_kernels.suite import tuned_tables

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "sweep_status.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def _row(label: str, config: dict, tuned: float, peer: float) -> BenchRow:
    shape = suite.load("topk_softmax").spec.parse_shape(label)
    return BenchRow(kernel="topk_softmax", label=label, shape=shape, dtype="bf16", variant="default", bytes_moved=1,
                    baseline_us=9.0, baseline_status="ok", tuned_us=tuned, tuned_status="ok", tuned_config=config,
                    torch_compile_us=peer, torch_compile_status="ok", tuned_spread=0.001, torch_compile_spread=0.001)


def _report(date: str, rows: list[BenchRow]) -> BenchReport:
    return BenchReport(device="NVIDIA H200", arch="sm_90", date=date, dtype="bf16", rows=rows)


def test_a_row_counts_only_where_it_ran_todays_pick_and_the_newest_such_row_is_read(tmp_path):
    table = shipped_table("topk_softmax", "NVIDIA H200")
    pick = lambda label: table.pick(suite.load("topk_softmax").spec.parse_shape(label), suite.DEFAULT_SMS, "sm_90")  # noqa: E731
    other = {**pick("1x8x8").config, "SORT": 1 - pick("1x8x8").config["SORT"]}
    after = _report("2026-11-29T01:00:00+00:00", [_row("1x8x8", pick("1x8x8").config, 1.0, 1.5),
                                                  _row("2x8x8", pick("2x8x8").config, 2.0, 1.0)])
    before = _report("2026-11-29T02:00:00+00:00", [_row("1x8x8", other, 3.0, 1.5),  # measured later, another pick
                                                   _row("3x8x8", other, 1.0, 1.5)])
    files = []
    for name, report in (("after.json", after), ("before.json", before)):
        (tmp_path / name).write_text(report.model_dump_json())
        files.append(str(tmp_path / name))
    result = run(*files, "--json", str(tmp_path / "status.json"))
    assert result.returncode == 0, result.stderr
    widths = {(w["kernel"], w["width"]): w for w in json.loads((tmp_path / "status.json").read_text())}
    eight = widths[("topk_softmax", "8x8")]
    assert (eight["points"], eight["current"], eight["stale"]) == (27, 2, [3]) and len(eight["missing"]) == 24
    assert eight["behind"] == [2]  # 2.0 us against torch.compile's 1.0; 1x8x8 is its after row, 1.5x ahead
    assert eight["worst"] == {"tokens": 2, "over_peer": 0.5, "peer": "torch.compile"}
    assert widths[("topk_softmax", "8x2")]["current"] == 0 and len(widths[("topk_softmax", "8x2")]["missing"]) == 27
    assert {k for k, _ in widths} == set(tuned_tables.shipped_kernels("h200"))  # every shipped kernel, rows or not
    line = next(l for l in result.stdout.splitlines() if "| topk_softmax | 8x8 |" in l)
    assert "| 27 | 2 | 1 (3) | 0 | 24 | 1 (2) |" in line


def test_the_shipped_benchmark_files_read_and_a_foreign_file_is_one_line(tmp_path):
    files = [str(p) for p in sorted(ROOT.glob("docs/bench/h200-2026-11-2[89]*/bench-*.json"))]  # as docs/benchmarks.md runs it
    result = run(*files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("| NVIDIA H200, cold |") >= 7 * 2
    bogus = tmp_path / "host_cost.json"
    bogus.write_text(json.dumps({"device": "NVIDIA H200", "rows": []}))
    refused = run(str(bogus))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "is not the bench.json of `astra bench --out`" in refused.stderr


def test_a_row_whose_tuned_kernel_failed_is_no_measurement_and_a_kind_without_tables_says_so(tmp_path):
    """Today's pick that failed to time is "not timed", not another pick's row (as a re-tuned table's is)."""
    table = shipped_table("topk_softmax", "NVIDIA H200")
    config = table.pick({"T": 1, "E": 8, "K": 8}, suite.DEFAULT_SMS, "sm_90").config
    failed = _row("1x8x8", config, 1.0, 1.5).model_copy(update={"tuned_status": "failed: an illegal address"})
    (tmp_path / "h200.json").write_text(_report("2026-11-29T01:00:00+00:00", [failed]).model_dump_json())
    result = run(str(tmp_path / "h200.json"), "--json", str(tmp_path / "status.json"))
    eight = next(w for w in json.loads((tmp_path / "status.json").read_text()) if w["width"] == "8x8")
    assert result.returncode == 0 and eight["current"] == 0 and eight["stale"] == [] and eight["not_timed"] == [1]
    other = _report("2026-11-29T01:00:00+00:00", [failed]).model_copy(update={"device": "NVIDIA A100-SXM4-80GB"})
    (tmp_path / "a100.json").write_text(other.model_dump_json())
    refused = run(str(tmp_path / "a100.json"))
    assert refused.returncode == 2 and "no table is shipped for NVIDIA A100-SXM4-80GB tuned with cold L2" in refused.stderr


def test_piped_into_head_it_ends_quietly():
    """`| head` closes the pipe before the table ends: no BrokenPipeError traceback (the store and
    report readers of bench/ restore SIGPIPE's default, as norm_code_gap.py does)."""
    import shlex

    files = " ".join(shlex.quote(str(p)) for p in sorted(ROOT.glob("docs/bench/h200-2026-11-2[89]*/bench-*.json")))
    result = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} {files} | head -1"],
                            capture_output=True, text=True, timeout=300)
    assert result.stdout.startswith("| GPU, L2 | kernel |") and result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
