"""The results store under faults: two tuning processes writing one store at once, a writer
killed between rows, a torn write-ahead log, a file cut at any length. Whatever happens, a row
that was committed is either there whole or the store refuses to open with an error naming the
file (and leaves the file as it is); nothing is silently half-written."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.replay import ReplayWorker
from astra_kernels.tools.measuring.results import ResultsStore, ResultsStoreError
from test_reliability_kill import TESTS, TESTS_ROOT, _keys, _stored
from astra_kernels.tools.measuring.probes import copy_request
from support.stored_results import result

ROWS = 200


def _rows_in_order(path: Path) -> list[int]:
    with ResultsStore(path) as store:
        found = store.rows()
        for row in found:
            EvaluationResult.model_validate(row["result"])  # each survivor is whole
    return sorted(int(row["key"].removeprefix("row-")) for row in found)


def hammer(path: str, count: int, progress: str) -> None:
    """Rows 0, 1, 2, ... each in its own transaction; the index of each committed one goes to
    `progress` after its commit returns."""
    request = copy_request(1 << 20)
    with ResultsStore(path) as store:
        for i in range(count):
            store.put(f"row-{i}", request, result(1.0 + i), kernel="copy", which="probe", config={"i": i})
            with open(progress, "a") as log:
                log.write(f"{i}\n")


def _hammer(path: Path, progress: Path, count: int = 100_000) -> subprocess.Popen:
    code = (f"import sys; sys.path[:0] = [{TESTS!r}, {TESTS_ROOT!r}]; import test_reliability_store as t; "
            f"t.hammer({str(path)!r}, {count}, {str(progress)!r})")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _killed_writer(tmp_path, rows: int = ROWS) -> tuple[Path, list[int]]:
    """A store whose writer was SIGKILLed after `rows` commits, its log still beside it."""
    path, progress = tmp_path / "results.sqlite", tmp_path / "progress"
    proc = _hammer(path, progress)
    deadline = time.monotonic() + 300
    while len(_keys(progress)) < rows:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL
    return path, [int(k) for k in _keys(progress)]


def test_a_writer_killed_between_rows_loses_no_committed_row(tmp_path):
    path, committed = _killed_writer(tmp_path)
    assert Path(f"{path}-wal").exists()  # the kill left the journal unmerged: recovery is tested
    survivors = _rows_in_order(path)
    assert survivors == list(range(len(survivors)))  # a prefix: no hole
    assert len(survivors) >= len(committed)  # every commit the writer saw return is there
    assert len(survivors) <= len(committed) + 1  # and at most the one in flight besides
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize("keep", [0.9, 0.5, 0.1])
def test_a_torn_write_ahead_log_loses_only_its_tail(tmp_path, keep):
    """The journal of a killed writer cut short (a crash of the machine, not only the process):
    SQLite's frame checksums drop the torn tail, so what remains is a prefix of the commits."""
    path, committed = _killed_writer(tmp_path)
    wal = Path(f"{path}-wal")
    data = wal.read_bytes()
    wal.write_bytes(data[: int(len(data) * keep)])
    survivors = _rows_in_order(path)
    assert survivors == list(range(len(survivors))) and len(survivors) <= len(committed) + 1
    with ResultsStore(path) as store:  # and the store takes new rows after the recovery
        store.put("after", copy_request(1 << 20), result(), kernel="copy")
        assert store.count() == len(survivors) + 1


def _damage_cases(whole: bytes) -> dict[str, bytes]:
    page = 4096
    return {
        "cut inside the header": whole[:60],
        "only the first page": whole[:page],
        "cut mid-page": whole[: len(whole) // 2 + 1234],
        "last page missing": whole[:-page],
        "one byte short": whole[:-1],
        "a page of zeros": whole[:page] + bytes(page) + whole[2 * page:],
        "garbage in the middle": whole[: len(whole) // 2] + os.urandom(3 * page) + whole[len(whole) // 2 + 3 * page:],
    }


def _full_store(path: Path) -> None:
    with ResultsStore(path) as store:
        for i in range(ROWS):
            store.put(f"row-{i}", copy_request(1 << 20), result(1.0 + i), kernel="copy", config={"i": i},
                      run_id="x" * 200)
    assert not Path(f"{path}-wal").exists()  # closed cleanly: everything is in the main file


@pytest.mark.parametrize("damage", list(_damage_cases(b"x" * 10 ** 6)))
def test_a_damaged_file_reads_whole_or_fails_naming_the_file(tmp_path, damage):
    """Opened and read through every call the tuner and the reports use: either every row that
    comes back is whole, or the error is a ResultsStoreError that names the file, and the file
    is left exactly as it was found."""
    path = tmp_path / "results.sqlite"
    _full_store(path)
    damaged = _damage_cases(path.read_bytes())[damage]
    path.write_bytes(damaged)
    try:
        with ResultsStore(path) as store:
            for row in store.rows():
                EvaluationResult.model_validate(row["result"])
            store.count()
            store.get("row-7")
            store.best("copy", {}, "", "", "")
    except ResultsStoreError as exc:
        assert str(path) in str(exc) and isinstance(exc, AstraError)
        assert path.read_bytes() == damaged
    except Exception as exc:  # anything else is a crash without the file's name
        pytest.fail(f"{damage}: {type(exc).__name__}: {exc}")


def _damaged_recordings(tmp_path) -> dict[str, Path]:
    good = tmp_path / "good.sqlite"
    _full_store(good)
    pages = tmp_path / "pages.sqlite"
    pages.write_bytes(good.read_bytes()[:4096] + os.urandom(8192))
    cut = tmp_path / "cut.sqlite.gz"
    cut.write_bytes(gzip.compress(good.read_bytes())[:3000])
    return {"sqlite pages overwritten": pages, "gzip cut short": cut}


@pytest.mark.parametrize("damage", ["sqlite pages overwritten", "gzip cut short"])
@pytest.mark.parametrize("command", ["tune", "optimize"])
def test_a_damaged_recording_is_named_by_the_cli_not_a_traceback(tmp_path, command, damage):
    recording = _damaged_recordings(tmp_path)[damage]
    damaged = recording.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "astra_kernels.cli", command, "rmsnorm", "--replay", str(recording),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert f"{recording} is not a readable results store" in proc.stdout  # on one line, however long the path
    assert recording.read_bytes() == damaged


def test_a_damaged_recording_never_replaces_a_good_working_copy(tmp_path):
    store = tmp_path / "run" / "results.sqlite"
    damaged = _damaged_recordings(tmp_path)
    ReplayWorker.from_recording(tmp_path / "good.sqlite", store)
    kept = store.read_bytes()
    for recording in damaged.values():
        with pytest.raises(AstraError, match="is not a readable results store"):
            ReplayWorker.from_recording(recording, store)
        assert store.read_bytes() == kept
    assert not [p.name for p in store.parent.iterdir() if ".copy" in p.name]  # no half copy left behind


def tune_writer(store: str, log: str, seed: int) -> None:
    """One of two tuning processes sharing a store: the same kernel and shapes, a different seed,
    so their searches overlap on some candidates and not on others."""
    from astra_kernels.jobs import tuning
    from astra_kernels.tools.search.runner import Budget, StoredEvaluator
    from test_reliability_kill import LoggingWorker
    from support.scripted_gpu import FOLDER, SHAPES

    worker = LoggingWorker(log, 0.01)
    with ResultsStore(store) as results:
        tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=seed, strategy="random",
                                       budget=Budget(evaluations=15), search_rounds=1),
                    worker, StoredEvaluator(worker, results, run_id=f"seed{seed}"))


def test_two_tuning_processes_writing_one_store_at_once_lose_nothing(tmp_path):
    store = tmp_path / "shared.sqlite"
    procs = []
    for seed in (1, 2):
        code = (f"import sys; sys.path[:0] = [{TESTS!r}, {TESTS_ROOT!r}]; import test_reliability_store as t; "
                f"t.tune_writer({str(store)!r}, {str(tmp_path / f'log{seed}')!r}, {seed})")
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for proc in procs:
        output = proc.communicate(timeout=600)[0].decode()
        assert proc.returncode == 0, output[-3000:]
    asked = set(_keys(tmp_path / "log1")) | set(_keys(tmp_path / "log2"))
    assert _stored(store) == asked  # every measurement either process made is a row
    with ResultsStore(store) as results:
        assert results.count(run_id="seed1") > 0 and results.count(run_id="seed2") > 0
        for row in results.rows():
            assert EvaluationResult.model_validate(row["result"]).status == "ok"
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    json.dumps(sorted(asked))  # keys are plain text


def test_a_report_on_a_damaged_store_says_it_cannot_read_it_and_leaves_it(tmp_path, capsys):
    """`astra report` only reads, so its error on a damaged store is a read error (it once said
    'write failed', from creating the schema in its private copy), and the file is untouched."""
    from astra_kernels import cli

    good = tmp_path / "good.sqlite"
    _full_store(good)
    text = good.read_bytes()  # the schema's pages whole, so the tables are found; the data pages not
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(text[:8192] + b"A" * (len(text) - 8192))
    before = damaged.read_bytes()
    assert cli.main(["report", str(damaged), "--out", str(tmp_path / "report")]) == 2
    out = capsys.readouterr().out
    assert f"results store {damaged}: read failed" in out and "write" not in out, out
    assert damaged.read_bytes() == before
