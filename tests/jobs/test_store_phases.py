"""bench/store_phases.py without a GPU: a scripted tune's store read back by kind and phase, and one
line (exit 2) for a file that is not a results store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from astra_kernels.jobs import tuning
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, StoredEvaluator

from support.scripted_gpu import FOLDER, SHAPES, ScriptedWorker, row_sample

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "store_phases.py"


def test_a_tune_s_store_is_summed_by_kind(tmp_path):
    path = tmp_path / "r.sqlite"
    worker = ScriptedWorker()
    with ResultsStore(path) as store:
        tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", configs=row_sample(12, seed=1), seed=1, strategy="random",
                                       budget=Budget(evaluations=3)), worker, StoredEvaluator(worker, store))
        stored = store.count()
    run = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f": {stored} rows" in run.stdout
    assert "baseline   n=" in run.stdout and "template   n=" in run.stdout and "rows per 30 s:" in run.stdout


def test_a_file_that_is_no_store_is_one_line(tmp_path):
    (tmp_path / "x.sqlite").write_text("not sqlite")
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "x.sqlite")], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "not a results store" in run.stderr
