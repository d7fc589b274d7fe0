"""bench/tuner.py replays every strategy over a stored space without a GPU, and reports how long
each takes to come within 2% of the best measured."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from astra_kernels.jobs import tuning
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import StoredEvaluator
from support.scripted_gpu import FOLDER, ScriptedWorker

BENCH = Path(__file__).resolve().parents[3] / "bench" / "tuner.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_tuner", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_strategies_replayed_from_a_stored_exhaustive_run(tmp_path):
    store_path = tmp_path / "r.sqlite"
    worker = ScriptedWorker()
    with ResultsStore(store_path) as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, [{"T": 16, "D": 4096}], "bf16", strategy="exhaustive", sample=60,
                                                seed=4), worker, StoredEvaluator(worker, store))
    measured = worker.calls
    out = tmp_path / "bench.json"
    packed = tmp_path / "r.sqlite.gz"  # the form of the recordings under bench/data/
    packed.write_bytes(gzip.compress(store_path.read_bytes()))
    assert load_bench().main(["--stores", str(packed), "--compile", "0", "--evaluate", "0",
                              "--seeds", "3", "--round-budget", "60", "--json", str(out)]) == 0
    assert worker.calls == measured  # the replay measured nothing
    rows = json.loads(out.read_text())["strategies"]
    assert {(r["strategy"], r["mode"]) for r in rows} == {
        (s, m) for s in ("exhaustive", "random", "hillclimb", "tpe")
        for m in ("alone", "3 planned rounds, 60 evaluations")}
    space = report.shapes[0].space_candidates
    for row in rows:
        assert row["space"] == space and row["best_us"] == report.shapes[0].search.best_us
        assert row["reached"] == row["runs"]  # an unlimited budget, or one beyond the space, gets there
        assert 1 <= row["median_evaluations"] <= space
    exhaustive = next(r for r in rows if r["strategy"] == "exhaustive" and r["mode"] == "alone")
    best = report.shapes[0].search.best_us
    first = next(i for i, t in enumerate(report.shapes[0].search.trials, start=1)
                 if t.median_us is not None and t.median_us <= best * 1.02)
    assert exhaustive["median_evaluations"] == first
    assert exhaustive["median_seconds"] == pytest.approx(0.05 * first)
