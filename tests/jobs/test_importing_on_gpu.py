"""SGLang's own kernels on a real GPU: the folders `astra import-sglang` writes pass the checks against
the float64 reference at their Astra and serving shapes, and `astra bench` times them beside the ports.

The imported folders come from ASTRA_SGLANG_IMPORTED (a directory `astra import-sglang` wrote, for a
GPU machine without the package index), or else are imported here from the wheels the CPU tests fetch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.jobs import benchmark, importing
from astra_kernels import suite
from astra_kernels.tools.measuring.worker import EvaluationWorker

from support import kernel_path

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def imported(request, tmp_path_factory) -> Path:
    given = os.environ.get("ASTRA_SGLANG_IMPORTED")
    if given:
        return Path(given).resolve()
    return kernel_path.import_sglang(tmp_path_factory.mktemp("imported") / "kernels", kernel_path.sglang_wheels(request))


@pytest.fixture
def on_path(imported, monkeypatch):
    yield from kernel_path.on_kernel_path(monkeypatch, imported)


@pytest.mark.parametrize("port", sorted(importing.RECIPES))
def test_sglangs_own_kernel_passes_the_checks(on_path, port, capsys):
    name = importing.RECIPES[port].name
    first = next(iter(suite.load(name).spec.shapes))  # astra where the port has it (rotary_embedding: serving)
    code = cli.main(["check", name, "--set", first, "--dtype", "bf16,fp16", "--json"])
    results = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in results} == {"ok"}, [(r["shape"], r["dtype"], r["status"], r["message"][:200])
                                                     for r in results if r["status"] != "ok"]
    assert code == 0 and len(results) >= 2 * len(suite.load(name).spec.shapes[first])


def test_bench_times_sglangs_kernels_beside_the_ports(on_path):
    kernels = {port: next(iter(suite.load(importing.RECIPES[port].name).spec.shapes.values()))[:2]
               for port in importing.RECIPES}
    with EvaluationWorker(timeout_s=600) as worker:
        report = benchmark.bench(worker, kernels, torch_modes=())
    for row in report.rows:
        assert row.sglang_jit_status == "ok", (row.kernel, row.label, row.sglang_jit_status)
        assert row.baseline_status == "ok" and row.sglang_jit_us > 0
    assert set(report.sglang_jit) == set(importing.RECIPES)
    print(benchmark.render_markdown(report))
