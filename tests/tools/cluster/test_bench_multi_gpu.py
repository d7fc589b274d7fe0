"""bench/multi_gpu.py's analysis of a run's stores (no GPU, no Ray): run H's, shipped under
docs/bench/multi-gpu-2026-11-26c/, give the figures docs/scaling.md quotes."""

from __future__ import annotations

import dataclasses
import importlib.util
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STORES = ROOT / "docs" / "bench" / "multi-gpu-2026-11-26c" / "run-h-stores.tgz"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_multi_gpu", ROOT / "bench" / "multi_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_h(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run-h")
    with tarfile.open(STORES) as packed:
        # the data filter where this Python has it (3.11.4 on): the archive is the project's own
        packed.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return folder


def test_the_tables_pick_is_compared_not_the_searchs_best(run_h):
    """At silu_and_mul 16384x14336 the one-worker search's best ran 521.0 us; its table picks the
    configuration the cross-measurement found faster there (464.95 us), as the two-worker run's does."""
    bench = load_bench()
    one = bench.best_by_shape(bench.reports_of(run_h / "w1"), run_h / "w1")
    two = bench.best_by_shape(bench.reports_of(run_h / "w2"), run_h / "w2")
    pick = one["silu_and_mul 16384x14336"]
    assert pick["config"] != pick["search_config"] and pick["median_us"] == pytest.approx(464.95, abs=0.01)
    assert pick["config"] == two["silu_and_mul 16384x14336"]["config"]
    compared = bench.compare(one, two)
    assert (compared["shapes"], compared["within_spread"], compared["same_config"]) == (57, 57, 49)


def test_the_analysis_counts_the_draws_and_compares_every_run(run_h, capsys):
    assert load_bench().analyse(run_h) == 0
    printed = capsys.readouterr().out
    assert "w1: draws made again with the last problem kept: 608 of 608; with every problem kept: 57" in printed
    assert "with every problem kept: 61" in printed
    assert "w2's tables against w1's: 57 of 57 shapes within spread, 49 the same pick" in printed
    assert "w2-kill's tables against w1's: 57 of 57 shapes within spread, 48 the same pick" in printed


def test_a_runs_table_is_compared_with_the_shipped_one_as_the_run_measured_both(run_h, monkeypatch):
    """against_shipped reads the shipped table's pick at each shape from the run's own store: with
    the run's own table as the one shipped, every pick is within spread; with each shape's slowest
    measured configuration as the one shipped, the run's pick is faster; a table the run never
    measured is unmeasured, not a tie."""
    from astra_kernels import suite
    from astra_kernels.jobs import benchmark
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.templating.template import parse_template

    bench = load_bench()
    w1 = run_h / "w1"
    # the run's measurements are keyed by the template it ran (its kernel.cu): silu_and_mul's has
    # gained STATIC_D since, so its rows answer only as that template reads them
    folder = suite.load("silu_and_mul")
    ran = dataclasses.replace(folder, template=parse_template(
        (w1 / "silu_and_mul" / "kernel.cu").read_text(), "template.cu", suite.template_symbols(folder.spec)))
    load = suite.load
    monkeypatch.setattr(suite, "load", lambda name: ran if name == "silu_and_mul" else load(name))
    reports = {r["kernel"]: r for r in bench.reports_of(w1)}
    shipped = {k: DispatchTable.model_validate(r["dispatch"]) for k, r in reports.items()}
    monkeypatch.setattr(benchmark, "shipped_table", lambda kernel, device, l2="cold": shipped.get(kernel))
    own = bench.against_shipped(w1)
    assert own["silu_and_mul"] == {"faster": 0, "within": 15, "slower": 0, "unmeasured": 0}
    assert own["merge_attn_states"] == {"faster": 0, "within": 8, "slower": 0, "unmeasured": 0}

    with ResultsStore(w1 / "silu_and_mul" / "results.sqlite", read_only=True) as store:
        rows = [r for r in store.rows(kernel="silu_and_mul", status="ok") if r["which"] == "template"]
    slowest = {}
    for r in rows:
        key = tuple(sorted(r["shape"].items()))
        if key not in slowest or r["median_us"] > slowest[key]["median_us"]:
            slowest[key] = r
    shipped["silu_and_mul"] = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", entries=[
        DispatchEntry(shape=r["shape"], config=r["config"], source="template") for r in slowest.values()])
    shipped["merge_attn_states"] = DispatchTable(kernel="merge_attn_states", dtype="bf16", variant="default", entries=[
        DispatchEntry(shape=e.shape, config={**e.config, "THREADS": 7}, source="template")
        for e in shipped["merge_attn_states"].entries if e.config])
    worse = bench.against_shipped(w1)
    assert worse["silu_and_mul"]["faster"] == 15 and worse["silu_and_mul"]["slower"] == 0
    assert worse["merge_attn_states"]["unmeasured"] == 8
