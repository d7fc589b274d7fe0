"""`astra bench` on a real GPU: one small shape per Astra kernel, every column measured."""

from __future__ import annotations

import pytest

from astra_kernels.jobs import benchmark
from astra_kernels.jobs.torch_peers import torch_cuda
from astra_kernels.tools.measuring.worker import EvaluationWorker

pytestmark = pytest.mark.gpu


def test_every_column_of_a_small_benchmark(tmp_path):
    kernels = {"silu_and_mul": [{"T": 16, "D": 4096}], "merge_attn_states": [{"N": 16, "HD": 32, "D": 128}]}
    modes = ("eager", "compile") if torch_cuda() else ()
    with EvaluationWorker(timeout_s=600) as worker:
        tables = {name: benchmark.shipped_table(name, worker.device["name"]) for name in kernels}
        report = benchmark.bench(worker, kernels, tables=tables, torch_modes=modes)
    assert report.launch_floor_us and 0.3 < report.launch_floor_us < 20
    assert report.copy_bandwidth_gbs and report.copy_bandwidth_gbs > 500
    for row in report.rows:
        assert row.baseline_status == "ok" and row.baseline_us > report.launch_floor_us * 0.5
        assert row.floor_us and row.floor_us < row.baseline_us
        if tables[row.kernel] is not None:
            assert row.tuned_status == "ok", row.tuned_status
        for mode in modes:
            assert getattr(row, f"torch_{mode}_status") == "ok", getattr(row, f"torch_{mode}_status")
            assert getattr(row, f"torch_{mode}_us") > 0
    print(benchmark.render_markdown(report))
    assert benchmark.chart(report).startswith("<svg")
