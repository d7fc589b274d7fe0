"""The SQLite results store without a GPU: round trips, keys, queries, sharing and damage."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3

import pytest

from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.evaluation import EvaluationResult, LaunchShape
from astra_kernels.tools.measuring.probes import copy_request
from astra_kernels.tools.measuring.results import SCHEMA_VERSION, ResultsStore, ResultsStoreError, evaluation_key

from support.stored_results import DEVICE, result

SHAPE = {"T": 16, "D": 4096}


def silu(config: dict | None = None, shape: dict | None = None, which: str = "template"):
    return suite.request(suite.load("silu_and_mul"), which, shape or SHAPE, "bf16", config=config)


def config(**changes) -> dict:
    return {**suite.load("silu_and_mul").template.default, **changes}


def put(store: ResultsStore, cfg: dict, median_us: float, *, status: str = "ok", device: str = DEVICE,
        shape: dict = SHAPE, run_id: str = "r1", which: str = "template") -> str:
    request = silu(cfg if which == "template" else None, shape, which)
    key = evaluation_key(request, device)
    res = result(median_us, status).model_copy(update={"device": device})
    store.put(key, request, res, kernel="silu_and_mul", which=which, config=cfg, shape=shape,
              dtype="bf16", variant="default", run_id=run_id)
    return key


def test_round_trip_keeps_the_full_record(tmp_path):
    original = result(4.25, spills=True)
    request = silu()
    with ResultsStore(tmp_path / "deep" / "er" / "results.db") as store:
        key = evaluation_key(request, DEVICE)
        store.put(key, request, original, kernel="silu_and_mul", which="template", config=config(),
                  shape=SHAPE, dtype="bf16", run_id="r1")
        assert store.get(key) == original
        assert store.get("missing") is None
        (row,) = store.rows()
    assert row["config"] == config() and row["shape"] == SHAPE
    assert row["median_us"] == 4.25 and row["spread"] == 0.05 and row["registers"] == 24
    assert row["spills"] is True and row["occupancy"] == 8 and row["arch"] == "sm_90"
    assert row["fraction_of_copy_bandwidth"] == pytest.approx(0.13 / 4.25)
    assert len(row["source_sha256"]) == 64 and row["created_at"].endswith("+00:00")
    assert EvaluationResult.model_validate(row["result"]) == original


def test_key_is_stable_and_sees_what_changes_the_measurement():
    base = evaluation_key(silu(), DEVICE)
    assert evaluation_key(silu(), DEVICE) == base  # a fresh Problem, a fresh make_case partial
    request = silu()
    request.problem.make_case = lambda seed: None
    assert evaluation_key(request, DEVICE) == base
    assert evaluation_key(silu(config(VEC=4)), DEVICE) != base
    assert evaluation_key(silu(shape={"T": 32, "D": 4096}), DEVICE) != base
    assert evaluation_key(silu(), "NVIDIA H200") != base

    copy = copy_request(1 << 20)
    copy_key = evaluation_key(copy, DEVICE)
    assert evaluation_key(copy_request(1 << 20), DEVICE) == copy_key
    variants = [
        dataclasses.replace(copy, seeds=(3, 4)),
        dataclasses.replace(copy, check=False),
        dataclasses.replace(copy, replays=20),
        dataclasses.replace(copy, launch=LaunchShape(grid=(64,), block=(512,))),
        dataclasses.replace(copy, options=copy.options.model_copy(update={"defines": {"X": 1}})),
        dataclasses.replace(copy, l2="warm"),
        copy_request(1 << 21),
    ]
    keys = {evaluation_key(v, DEVICE) for v in variants}
    assert copy_key not in keys and len(keys) == len(variants)


def test_filters_count_and_best(tmp_path):
    with ResultsStore(tmp_path / "results.db") as store:
        put(store, config(VEC=8), 5.0)
        fastest = put(store, config(VEC=4), 3.0, run_id="r2")
        put(store, config(VEC=2), 1.0, status="incorrect")  # fast but wrong never wins
        put(store, config(VEC=1), 0.5, device="NVIDIA H200")
        put(store, config(VEC=8), 0.1, shape={"T": 32, "D": 4096})
        put(store, {}, 2.5, which="baseline")

        assert store.count() == 6
        assert store.count(status="incorrect") == 1
        assert store.count(run_id="r2") == 1
        assert store.count(shape={"D": 4096, "T": 16}) == 5  # key order does not matter
        assert store.count(device="NVIDIA H200", kernel="silu_and_mul") == 1
        assert [r["config"]["VEC"] for r in store.rows(device=DEVICE, shape=SHAPE, which="template")] == [8, 4, 2]
        with pytest.raises(ValueError, match="cannot filter"):
            store.rows(colour="red")

        best = store.best("silu_and_mul", SHAPE, "bf16", "default", DEVICE)
        assert best["median_us"] == 2.5 and best["which"] == "baseline"
        best = store.best("silu_and_mul", SHAPE, "bf16", "default", DEVICE, which="template")
        assert best["key"] == fastest and best["config"] == config(VEC=4)
        assert store.best("silu_and_mul", SHAPE, "fp16", "default", DEVICE) is None


def test_reopen_sees_rows_and_replace_supersedes(tmp_path):
    path = tmp_path / "results.db"
    with ResultsStore(path) as store:
        key = put(store, config(), 5.0)
    with ResultsStore(path) as store:
        assert store.get(key).timing.median_us == 5.0
        assert store.schema_version == SCHEMA_VERSION
        put(store, config(), 4.0)
        assert store.count() == 1 and store.get(key).timing.median_us == 4.0
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()


def test_move_rewrites_rows_under_new_keys_keeping_their_measurement_or_moves_none(tmp_path):
    """ResultsStore.move (scripts/rekey_recording.py): the row keeps its time, run and date and takes
    the new key, configuration, source digest and result; one bad move undoes the others."""
    with ResultsStore(tmp_path / "results.db") as store:
        first, second = put(store, config(THREADS=128), 5.0), put(store, config(THREADS=256), 6.0)
        (was,) = [r for r in store.rows() if r["key"] == first]
        request = dataclasses.replace(silu(config(THREADS=128)), source=silu().source + "\n// a comment\n")
        moved = result(5.0).model_copy(update={"device": DEVICE, "label": "moved"})
        with pytest.raises(ResultsStoreError, match="no row under key missing"):
            store.move([(first, "new-first", {**config(THREADS=128), "EXTRA": 0}, request, moved),
                        ("missing", "new-missing", config(), request, moved)])
        assert {r["key"] for r in store.rows()} == {first, second}  # rolled back
        with pytest.raises(ResultsStoreError, match=f"key {second} is already taken"):
            store.move([(first, second, config(), request, moved)])
        store.move([(first, "new-first", {**config(THREADS=128), "EXTRA": 0}, request, moved)])
        (now,) = [r for r in store.rows() if r["key"] == "new-first"]
        assert store.get(first) is None and store.get("new-first").label == "moved"
    assert now["config"] == {**config(THREADS=128), "EXTRA": 0} and now["source_sha256"] != was["source_sha256"]
    assert (now["median_us"], now["run_id"], now["created_at"]) == (was["median_us"], was["run_id"], was["created_at"])


def _writer(path: str, worker: int, n: int) -> None:
    request = copy_request(1 << 20)
    with ResultsStore(path) as store:
        for i in range(n):
            store.put(f"w{worker}-{i}", request, result(1.0 + i), kernel="copy", which="probe",
                      config={"i": i}, run_id=f"w{worker}")


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "shared" / "results.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 50)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with ResultsStore(path) as store:
        assert store.count() == 100
        assert store.count(run_id="w0") == store.count(run_id="w1") == 50


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign"])
def test_a_damaged_or_foreign_file_is_an_error_and_left_alone(tmp_path, damage):
    path = tmp_path / "results.db"
    if damage == "garbage":
        path.write_bytes(b"these are not the results you are looking for\n" * 100)
    elif damage == "truncated":
        with ResultsStore(path) as store:
            for i in range(40):
                put(store, config(VEC=[1, 2, 4, 8][i % 4], THREADS=[64, 128, 256, 512, 1024][i % 5],
                                  UNROLL=[1, 2, 4][i % 3]), 1.0 + i, run_id=str(i))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE checkpoints (id TEXT)")
        db.commit()
        db.close()
    before = path.read_bytes()
    with pytest.raises(ResultsStoreError, match=str(path)) as raised:
        ResultsStore(path)
    assert isinstance(raised.value, AstraError)
    assert path.read_bytes() == before


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "results.db"
    ResultsStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(ResultsStoreError, match="version 99"):
        ResultsStore(path)
