"""SIGKILL in the middle of a tuning run and of an agent run, then resume.

Each killed run is a child process, killed from outside with SIGKILL once a given number of
results-store rows (or checkpoints) exist, so the kill lands wherever the run happens to be:
inside an evaluation, between a measurement and its row, inside a node. The resumed run must
request no evaluation whose row was already written (the workers log every request they get,
by results-store key) and must end with the same best as a run that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.agent_fakes import FakeGPU
from astra_kernels.jobs import tuning
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.search.runner import Budget, StoredEvaluator
from support.scripted_gpu import FOLDER, SHAPES, ScriptedWorker

TESTS = str(Path(__file__).parent)
TESTS_ROOT = str(Path(__file__).parents[1])  # support/ imports from here
DELAY_S = 0.05  # per evaluation in the children: long enough to be killed in the middle of one


def _log(path: str, key: str) -> None:
    with open(path, "a") as log:
        log.write(key + "\n")


class LoggingWorker(ScriptedWorker):
    """The scripted GPU, slowed down, writing the key of every evaluation it is asked for."""

    def __init__(self, log: str, delay: float = 0.0):
        super().__init__()
        self.log, self.delay = log, delay

    def evaluate(self, request):
        _log(self.log, evaluation_key(request, self.device["name"]))
        time.sleep(self.delay)
        return super().evaluate(request)


class LoggingFakeGPU(FakeGPU):
    def __init__(self, log: str, delay: float = 0.0):
        super().__init__()
        self.log, self.delay = log, delay

    def evaluate(self, request):
        _log(self.log, evaluation_key(request, self.device["name"]))
        time.sleep(self.delay)
        return super().evaluate(request)


def tune_run(store: str, log: str, report: str, delay: float) -> None:
    """`astra tune`'s whole logic (search in rounds with TPE, general configuration, dispatch
    table, verification), as a child process runs it."""
    worker = LoggingWorker(log, delay)
    with ResultsStore(store) as results:
        done = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=2, strategy="auto",
                                              budget=Budget(evaluations=12), search_rounds=3,
                                              verify=FOLDER.spec.shapes["astra"][:3]),
                           worker, StoredEvaluator(worker, results, run_id="tune"))
    Path(report).write_text(done.model_dump_json())


def agent_run(store: str, log: str, checkpoints: str, out: str, delay: float, resume: bool) -> None:
    """The agent graph, rule-based, on the logging fake GPU, checkpointed as `astra optimize` does."""
    from astra_kernels.graph import RunContext, build_graph, recursion_limit
    from astra_kernels.graph.checkpoints import sqlite_checkpointer

    context = RunContext(evaluator=LoggingFakeGPU(log, delay), results=store, tune_sample=40, tune_seconds=60,
                         strategy="exhaustive")
    app = build_graph().compile(checkpointer=sqlite_checkpointer(checkpoints))
    config = {"configurable": {"thread_id": "killed"}, "recursion_limit": recursion_limit(context)}
    payload = None if resume else {"kernel": "silu_and_mul", "shapes": SHAPES}
    result = app.invoke(payload, config=config, context=context, durability="sync")
    Path(out).write_text(json.dumps(result))


def _child(call: str) -> subprocess.Popen:
    code = f"import sys; sys.path[:0] = [{TESTS!r}, {TESTS_ROOT!r}]; import test_reliability_kill as t; t.{call}"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _count(path: Path, table: str) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet, or busy for a moment
        return 0


def _kill_when(proc: subprocess.Popen, path: Path, table: str, rows: int, timeout_s: float = 600) -> int:
    """SIGKILL `proc` once `table` in `path` has `rows` rows; the count it had when killed."""
    deadline = time.monotonic() + timeout_s
    while (seen := _count(path, table)) < rows:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before it had {rows} rows in {table}:\n"
                        + proc.stdout.read().decode()[-3000:])
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {rows} rows in {table} within {timeout_s} s")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL
    return seen


def _keys(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _stored(path: Path) -> set[str]:
    with ResultsStore(path) as store:
        return {row["key"] for row in store.rows()}


def _finish(proc: subprocess.Popen) -> None:
    output = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 0, output[-3000:]


def test_a_tuning_run_killed_mid_search_resumes_without_measuring_anything_twice(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    tune_run(str(whole / "r.sqlite"), str(whole / "log"), str(whole / "report.json"), 0.0)
    reference = tuning.TuneReport.model_validate_json((whole / "report.json").read_text())
    every = _keys(whole / "log")
    assert len(every) == len(set(every)) > 20  # an uninterrupted run measures each candidate once

    store, log, report = tmp_path / "r.sqlite", tmp_path / "log", tmp_path / "report.json"
    killed = _child(f"tune_run({str(store)!r}, {str(log)!r}, {str(report)!r}, {DELAY_S})")
    _kill_when(killed, store, "results", len(every) // 2)
    assert not report.exists()
    before = _stored(store)  # every completed evaluation: a row that survived the kill
    assert len(every) // 2 <= len(before) < len(every)
    assert set(_keys(log)) - before <= {_keys(log)[-1]}  # at most the one in flight was lost

    _finish(_child(f"tune_run({str(store)!r}, {str(tmp_path / 'log2')!r}, {str(report)!r}, 0.0)"))
    again = _keys(tmp_path / "log2")
    assert not set(again) & before, "the resumed run asked the worker again for stored evaluations"
    assert len(again) == len(set(again)) and set(again) | before == set(every)
    resumed = tuning.TuneReport.model_validate_json(report.read_text())
    for mine, theirs in zip(resumed.shapes, reference.shapes, strict=True):
        assert (mine.search.best_config, mine.search.best_us) == (theirs.search.best_config, theirs.search.best_us)
        assert [t.config for t in mine.search.trials] == [t.config for t in theirs.search.trials]
    undated = {"tuned_date": None}  # each table is dated by its own run (its age in the export's header)
    assert resumed.general == reference.general
    assert resumed.dispatch.model_copy(update=undated) == reference.dispatch.model_copy(update=undated)
    assert (resumed.dispatch.tuned_date, reference.dispatch.tuned_date) == (resumed.date, reference.date)
    assert [v.status for v in resumed.verified] == [v.status for v in reference.verified]
    assert _stored(store) == _stored(whole / "r.sqlite")


def test_an_agent_run_killed_mid_graph_resumes_from_its_checkpoint_without_measuring_anything_twice(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    agent_run(str(whole / "r.sqlite"), str(whole / "log"), str(whole / "c.sqlite"), str(whole / "out.json"), 0.0, False)
    reference = json.loads((whole / "out.json").read_text())
    every = _keys(whole / "log")
    assert len(every) == len(set(every)) > 10

    store, checkpoints, out = tmp_path / "r.sqlite", tmp_path / "c.sqlite", tmp_path / "out.json"
    args = f"{str(store)!r}, {{log!r}}, {str(checkpoints)!r}, {str(out)!r}"
    killed = _child(f"agent_run({args.format(log=str(tmp_path / 'log'))}, {DELAY_S}, False)")
    _kill_when(killed, store, "results", len(every) // 2)  # inside the tuner node, mid-search
    assert not out.exists() and _count(checkpoints, "checkpoints") >= 3  # load and the planner are on disk
    before = _stored(store)

    _finish(_child(f"agent_run({args.format(log=str(tmp_path / 'log2'))}, 0.0, True)"))
    again = _keys(tmp_path / "log2")
    assert not set(again) & before, "the resumed run asked the GPU again for stored evaluations"
    assert len(again) == len(set(again)) and set(again) | before == set(every)
    result = json.loads(out.read_text())
    assert result["best"] == reference["best"] and result["history"] == reference["history"]
    assert result["report"]["shapes"] == reference["report"]["shapes"]


def _optimize(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "astra_kernels.cli", "optimize", "rmsnorm", "--replay", "recorded",
                             "--shapes", "128x4096,16384x8192", "--strategy", "exhaustive", "--tune-seconds", "600",
                             "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_astra_optimize_killed_mid_graph_resumes_from_its_thread_to_the_same_report(tmp_path):
    """The command line on the shipped rmsnorm recording: killed once the planner's checkpoint is on
    disk (so inside the tuner), then `--resume THREAD`: the same report as an uninterrupted run,
    and the results store still exactly the recording's rows."""
    _finish(_optimize(tmp_path / "whole", "--thread", "whole"))
    reference = json.loads((tmp_path / "whole" / "report.json").read_text())

    out = tmp_path / "killed"
    killed = _optimize(out, "--thread", "k")
    _kill_when(killed, out / "checkpoints.sqlite", "checkpoints", 3)
    assert not (out / "report.json").exists()
    _finish(_optimize(out, "--resume", "k"))
    report = json.loads((out / "report.json").read_text())
    for key in ("best", "shapes", "path", "events", "geomean_speedup", "stop_reason"):
        assert report[key] == reference[key], key
    assert _stored(out / "results.sqlite") == _stored(tmp_path / "whole" / "results.sqlite")
