"""Replaying a recorded results store: what a GPU measured comes back, nothing else is invented."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from astra_kernels import cli
from astra_kernels import suite
from astra_kernels.jobs import tune_report, tuning
from astra_kernels.tools.errors import AstraError, WorkerError
from astra_kernels.tools.search.space import REPLAY_REASON
from astra_kernels.tools.measuring.replay import RecordedWorker, ReplayWorker
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, StoredEvaluator
from support.scripted_gpu import FOLDER, SHAPES, ScriptedWorker


def _record(path, evaluations=6):
    """A 'GPU run': the scripted worker tunes two shapes into a results store."""
    worker = ScriptedWorker()
    with ResultsStore(path) as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=2, strategy="random",
                                                budget=Budget(evaluations=evaluations)), worker, StoredEvaluator(worker, store))
    return report


def _rows(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM results").fetchone()[0]


def test_replay_answers_recorded_candidates_and_refuses_the_rest(tmp_path):
    recorded = _record(tmp_path / "gpu.sqlite")
    before = _rows(tmp_path / "gpu.sqlite")
    replay = ReplayWorker(tmp_path / "gpu.sqlite")
    assert replay.device["name"] == "Scripted GPU" and replay.device["arch"] == "sm_90"
    with ResultsStore(tmp_path / "gpu.sqlite") as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=2, strategy="exhaustive"),
                             replay, StoredEvaluator(replay, store))
    assert _rows(tmp_path / "gpu.sqlite") == before  # refusals are not written as measurements
    with sqlite3.connect(tmp_path / "gpu.sqlite") as db:
        fastest = dict(db.execute("SELECT shape, min(median_us) FROM results WHERE which = 'template' "
                                  "AND status = 'ok' GROUP BY shape").fetchall())
    for old, new in zip(recorded.shapes, report.shapes):
        # only what the recording holds is compiled and searched: the rest is pruned unasked
        assert {t.status for t in new.search.trials} == {"ok"}
        assert dict(new.pruned_reasons)[REPLAY_REASON] == new.space_after_constraints - new.space_after_compile
        assert len({json.dumps(t.config, sort_keys=True) for t in old.search.trials}) <= new.space_after_compile < 40
        # the fastest recorded at the shape (its search or the general phase), from recorded times only
        assert new.search.best_us == fastest[json.dumps(new.shape, sort_keys=True, separators=(",", ":"))]
        assert new.search.best_us <= old.search.best_us and new.baseline_us == old.baseline_us
    assert report.replayed_from == str(tmp_path / "gpu.sqlite")
    assert "Replayed from the results store" in tune_report.render_markdown(report)


def test_astra_tune_replays_a_gzipped_recording_without_a_gpu(tmp_path):
    _record(tmp_path / "gpu.sqlite")
    with open(tmp_path / "gpu.sqlite", "rb") as source, gzip.open(tmp_path / "gpu.sqlite.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    out = tmp_path / "out"
    code = cli.main(["tune", "silu_and_mul", "--replay", str(tmp_path / "gpu.sqlite.gz"), "--shapes", "16x4096,64x8192",
                     "--strategy", "exhaustive", "--sample", "40", "--seed", "2", "--budget", "1000", "--out", str(out)])
    assert code == 0
    text = (out / "report.md").read_text()
    assert "gpu.sqlite.gz" in text and "| 16x4096 |" in text
    assert (out / "dispatch.json").is_file()


def test_replay_errors_name_the_problem(tmp_path):
    with pytest.raises(AstraError, match="no results store at"):
        ReplayWorker(tmp_path / "missing.sqlite")
    ResultsStore(tmp_path / "empty.sqlite").close()
    with pytest.raises(AstraError, match="holds no measurement"):
        ReplayWorker(tmp_path / "empty.sqlite")
    _record(tmp_path / "gpu.sqlite", evaluations=1)
    with pytest.raises(AstraError, match="no measurement from 'NVIDIA B200'"):
        ReplayWorker(tmp_path / "gpu.sqlite", device="NVIDIA B200")
    with pytest.raises(WorkerError, match="runs nothing on a GPU"):
        ReplayWorker(tmp_path / "gpu.sqlite").call(print)
    assert cli.main(["tune", "silu_and_mul", "--replay", str(tmp_path / "nope.sqlite")]) == 2


def test_the_shipped_recordings_replay(tmp_path):
    """The newest shipped recording rebuilds the shipped rmsnorm table it was tuned into (an H100's, cold:
    docs/performance.md entry 23)."""
    import json
    from pathlib import Path

    from astra_kernels.suite import recordings

    root = Path(__file__).resolve().parents[3]
    recording = recordings.resolve("recorded", "rmsnorm")
    shipped = json.loads((root / "kernels_sglang/tuned/h100/rmsnorm.json").read_text())
    shapes = ",".join(suite.load("rmsnorm").spec.label(e["shape"]) for e in shipped["entries"][:2])
    out = tmp_path / "out"
    assert cli.main(["tune", "rmsnorm", "--replay", str(recording), "--shapes", shapes, "--strategy", "exhaustive",
                     "--budget", "100000", "--search-rounds", "1", "--out", str(out)]) == 0
    rebuilt = json.loads((out / "dispatch.json").read_text())
    for entry in rebuilt["entries"]:
        match = next(e for e in shipped["entries"] if e["shape"] == entry["shape"])
        assert entry["median_us"] <= match["median_us"] + 1e-9


def test_recorded_names_the_shipped_store_and_unknown_ones_say_what_exists(tmp_path):
    from astra_kernels.suite import recordings

    path = recordings.resolve("recorded", "rmsnorm")
    assert path.is_file() and path.parent.name == "h200-2026-11-28"
    assert recordings.resolve("recorded:h200-2026-11-23", "fused_add_rmsnorm").name == "fused_add_rmsnorm.sqlite.gz"
    assert recordings.resolve("some/store.sqlite", "rmsnorm").as_posix() == "some/store.sqlite"
    with pytest.raises(AstraError, match="no shipped recording of merge_attn_states.*shipped recordings: .*rmsnorm"):
        recordings.resolve("recorded:h200-2026-11-23", "merge_attn_states")
    assert recordings.resolve("recorded", "merge_attn_states").parent.name == "h200-2026-11-28"
    assert cli.main(["tune", "merge_attn_states", "--replay", "recorded:h200-2026-11-23", "--out", str(tmp_path)]) == 2


def test_the_newest_recording_is_the_latest_date_whatever_the_gpu(tmp_path, monkeypatch):
    """`--replay recorded` takes the latest day's recording: an h100 one of a later day is newer
    than an h200 one of an earlier day, though "h100-..." sorts first by name; a day's second
    session (a letter after the date) is newer than its first, older than the next day's."""
    from astra_kernels.suite import recordings

    for session in ("h200-2026-11-26", "h100-2026-11-26b", "h100-2026-11-27", "h200-2026-11-23", "h100-2026-11-20"):
        (tmp_path / session).mkdir()
        (tmp_path / session / "rmsnorm.sqlite.gz").write_bytes(b"")
    monkeypatch.setattr(recordings, "_root", lambda: tmp_path)
    assert [r.session for r in recordings.shipped()] == [
        "h100-2026-11-20", "h200-2026-11-23", "h200-2026-11-26", "h100-2026-11-26b", "h100-2026-11-27"]
    assert recordings.find("rmsnorm").session == "h100-2026-11-27"
    shutil.rmtree(tmp_path / "h100-2026-11-27")
    assert recordings.find("rmsnorm").session == "h100-2026-11-26b"


def test_a_replay_works_on_a_copy_and_never_overwrites_other_results(tmp_path):
    _record(tmp_path / "gpu.sqlite", evaluations=1)
    with open(tmp_path / "gpu.sqlite", "rb") as source, gzip.open(tmp_path / "gpu.sqlite.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    recording = tmp_path / "gpu.sqlite.gz"
    shipped = recording.read_bytes()
    work = tmp_path / "run" / "results.sqlite"
    replay = ReplayWorker.from_recording(recording, work)
    assert replay.device["replay"] == str(recording) and _rows(work) == _rows(tmp_path / "gpu.sqlite")
    ReplayWorker.from_recording(recording, work)  # an earlier copy of the same recording is replaced
    assert recording.read_bytes() == shipped

    _record(tmp_path / "measured.sqlite", evaluations=6)  # a GPU run's store holds more than the recording
    before = _rows(tmp_path / "measured.sqlite")
    with pytest.raises(AstraError, match=r"holds \d+ result\(s\) that .*gpu.sqlite.gz lacks"):
        ReplayWorker.from_recording(recording, tmp_path / "measured.sqlite")
    assert _rows(tmp_path / "measured.sqlite") == before
    (tmp_path / "notes.txt").write_text("someone's notes")
    with pytest.raises(AstraError, match="not a readable results store"):
        ReplayWorker.from_recording(recording, tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "someone's notes"
    with pytest.raises(AstraError, match="is the recording itself"):
        ReplayWorker.from_recording(tmp_path / "gpu.sqlite", tmp_path / "gpu.sqlite")
    with pytest.raises(AstraError, match="no results store at"):
        ReplayWorker.from_recording(tmp_path / "missing.sqlite.gz", work)
    assert not list(tmp_path.glob(".*.copy")) and not list(work.parent.glob(".*.copy"))


def test_a_recorded_worker_answers_everything_from_its_recording(tmp_path):
    """The cluster's stand-in GPU: asked everything (its caller's store is empty), it answers the
    recorded result of what was measured and refuses the rest naming the recording, never writing it."""
    _record(tmp_path / "rec.sqlite")
    with open(tmp_path / "rec.sqlite", "rb") as raw, gzip.open(tmp_path / "rec.sqlite.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    with ResultsStore(tmp_path / "rec.sqlite", read_only=True) as recorded:
        expected = {r["key"]: r["result"] for r in recorded.rows()}
    worker = RecordedWorker(tmp_path / "rec.sqlite.gz")

    def run(store_name: str, evaluations: int):
        with ResultsStore(tmp_path / store_name) as store:
            report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=2, strategy="random",
                                                    budget=Budget(evaluations=evaluations)),
                                 worker, StoredEvaluator(worker, store))
            return report, {r["key"]: r["result"] for r in store.rows()}

    _, answered = run("same.sqlite", 6)  # the recorded run again: every answer the recorded one
    assert answered == expected
    report, _ = run("more.sqlite", 10)  # a longer search proposes only what the recording holds
    assert {t.status for s in report.shapes for t in s.search.trials} == {"ok"}
    never = suite.request(FOLDER, "baseline", {"T": 3, "D": 4096}, "bf16")  # a shape never measured: refused
    refused = worker.evaluate(never)
    assert not worker.answers(never) and refused.status == "unrecorded"
    assert str(tmp_path / "rec.sqlite.gz") in refused.message
    worker.close()
    again = RecordedWorker(tmp_path / "rec.sqlite.gz")  # the unpacked copy is one, shared, in the cache
    assert again.path == worker.path and again.path.is_file() and str(tmp_path) not in str(again.path)
    again.close()


def test_a_store_keeps_device_facts_beside_its_measurements_and_a_replay_reads_them(tmp_path):
    """A run on a GPU records its launch floor and SM count with its store (probes.record_launch_floor);
    a replay of the store stands as that GPU with them, so the agent's prompt can judge its shapes."""
    path = tmp_path / "r.sqlite"
    _record(path)
    with ResultsStore(path) as store:
        assert store.device_facts("Scripted GPU") == {}
        store.record_device_facts("Scripted GPU", {"launch_floor_us": 0.9, "launch_floor_from": "here"})
        store.record_device_facts("Scripted GPU", {"multiprocessors": 132})  # merged over what was there
        assert store.device_facts("Scripted GPU") == {"launch_floor_us": 0.9, "launch_floor_from": "here",
                                                     "multiprocessors": 132}
    device = ReplayWorker(path).device
    assert device["launch_floor_us"] == 0.9 and device["multiprocessors"] == 132 and device["name"] == "Scripted GPU"
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'oops' WHERE name = 'device_facts:Scripted GPU'")
    with pytest.raises(AstraError, match="facts recorded about Scripted GPU are not JSON"):
        ReplayWorker(path)


@pytest.mark.parametrize("kernel", ["rmsnorm", "silu_and_mul"])
def test_every_shipped_recording_says_its_gpu_s_launch_floor_and_where_it_was_measured(kernel, tmp_path):
    """scripts/device_facts.py gave the older shipped recordings the launch floor astra bench measured
    on their GPU kind the day they were recorded (their runs kept none), saying so; a newer run
    measured its own beside its results (probes.record_launch_floor), saying that."""
    from astra_kernels.suite import recordings

    for recording in [r for r in recordings.shipped() if r.kernel == kernel]:
        worker = ReplayWorker.from_recording(recording.path, tmp_path / f"{recording.session}.sqlite")
        device = worker.device
        assert 0.5 < device["launch_floor_us"] < 2.0, recording
        assert device["multiprocessors"] == 132 and recording.session[:4].upper() in device["name"]
        assert "astra bench" in device["launch_floor_from"] or "measured with these results" in device["launch_floor_from"]
        assert recording.session.split("-", 1)[1][:10] in device["launch_floor_from"]  # the recording's day
