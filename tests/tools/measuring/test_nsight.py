"""Nsight Compute's counters (tools/measuring/nsight.py) without a GPU: ncu's CSV as it prints it
(a capture from an H200, docs/bench/ncu-2026-11-25), the facts a model reads, and the child run's
plumbing with a stand-in `ncu`: its arguments, its output read, a run past its deadline killed;
and, marked gpu, the real ncu over a real launch."""

from __future__ import annotations

import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from astra_kernels.tools.measuring import nsight, probes

CAPTURE = Path(__file__).resolve().parents[3] / "docs/bench/ncu-2026-11-25/rmsnorm-512x14336.ncu.csv"
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def test_the_first_launch_of_the_kernel_is_read_from_ncu_s_csv():
    text = CAPTURE.read_text()
    metrics = nsight.parse_csv(text, "rmsnorm_t11")
    assert metrics[nsight.DRAM] == 28.25 and metrics[nsight.DURATION] == 10880.0  # "10,880" ns
    assert metrics["dram__bytes_read.sum"] == 14_717_952.0
    assert nsight.parse_csv(text, "no_such_kernel") == {} and nsight.parse_csv("no csv here", "x") == {}


def test_the_facts_name_the_counters_and_the_top_stalls_with_what_they_mean():
    report = nsight.NsightReport(available=True, kernel="k", metrics={
        nsight.DRAM: 61.4, nsight.OCCUPANCY: 38.0, nsight.L2_HIT: 12.0, nsight.WAVES: 1.94,
        nsight.STALL_METRIC.format("long_scoreboard"): 14.2, nsight.STALL_METRIC.format("barrier"): 3.1,
        nsight.STALL_METRIC.format("wait"): 1.0, nsight.STALL_METRIC.format("lg_throttle"): 0.4})
    facts = report.facts()
    assert facts.startswith("DRAM throughput 61% of peak; achieved occupancy 38% of the SM's warps; L2 hit rate 12%; "
                            "1.94 waves per SM; top warp stalls")
    assert "long_scoreboard 14.2 (waiting for global or local memory (L1TEX) results), barrier 3.1" in facts
    assert "lg_throttle" not in facts  # the top three only
    assert nsight.NsightReport(available=True).facts() == ""


def test_without_ncu_the_report_says_so(monkeypatch):
    monkeypatch.setattr(nsight, "find_ncu", lambda: None)
    report = nsight.profile(probes.copy_request(1 << 12))
    assert not report.available and "not installed" in report.message and report.facts() == ""


def fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_child_runs_under_ncu_with_the_metrics_and_the_kernel_named(tmp_path):
    seen = tmp_path / "argv.txt"
    binary = fake_ncu(tmp_path, f"""
        import sys
        args = sys.argv[1:]
        open({str(seen)!r}, "w").write("\\n".join(args))
        kernel = args[args.index("--kernel-name") + 1]
        print("==PROF== Connected to process 1")
        print({HEADER!r})
        for name, value in (("dram__throughput.avg.pct_of_peak_sustained_elapsed", "71.5"),
                            ("launch__waves_per_multiprocessor", "1,234.5"), ("lts__t_sector_hit_rate.pct", "n/a")):
            print(f'"0","1","python","h","{{kernel}}","1","7","(256, 1, 1)","(16, 1, 1)","0","9.0","s","{{name}}","%","{{value}}"')
    """)
    request = probes.copy_request(1 << 12)
    report = nsight.profile(request, binary=binary, timeout_s=60)
    args = seen.read_text().splitlines()
    assert args[args.index("--kernel-name") + 1] == request.kernel and "--csv" in args
    assert args[args.index("--metrics") + 1] == ",".join(nsight.METRICS)
    assert args[args.index("--cache-control") + 1] == "all" and args[args.index("--launch-count") + 1] == "1"
    assert nsight.__name__ in args  # the child is this module, run by ncu
    assert report.metrics == {nsight.DRAM: 71.5, nsight.WAVES: 1234.5} and "measured 2 counters" in report.message


def test_a_run_past_its_deadline_is_killed_with_its_group(tmp_path):
    binary = fake_ncu(tmp_path, """
        import time
        print("==PROF== Connected to process 1", flush=True)
        time.sleep(60)
    """)
    started = time.perf_counter()
    report = nsight.profile(probes.copy_request(1 << 12), binary=binary, timeout_s=1)
    assert time.perf_counter() - started < 30 and "did not finish within 1 s" in report.message
    assert "Connected" in report.output_tail and report.metrics == {}


@pytest.mark.gpu
def test_on_the_gpu_ncu_reads_the_counters_of_a_real_launch():
    """The lent GPUs' images have ncu: the copy kernel's first launch, 64 MiB each way, is measured
    with the caches flushed; a copy that large keeps DRAM busy."""
    if nsight.find_ncu() is None:
        pytest.fail("Nsight Compute (ncu) is not installed on this GPU machine: the counters cannot be read")
    report = nsight.profile(probes.copy_request(1 << 26), timeout_s=240)
    assert report.available and report.metrics, (report.message, report.output_tail[-2000:])
    assert {nsight.DRAM, nsight.OCCUPANCY, nsight.WAVES, nsight.DURATION} <= set(report.metrics), report.metrics
    assert report.metrics[nsight.DRAM] > 30 and report.metrics[nsight.WAVES] > 0 and report.metrics[nsight.DURATION] > 0
    assert report.facts().startswith("DRAM throughput") and "top warp stalls" in report.facts()
