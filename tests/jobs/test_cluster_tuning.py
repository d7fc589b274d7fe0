"""`astra tune --ray` on a local Ray cluster whose three "GPUs" answer from a recording: the
driver's results store and report equal a one-worker run's, the work is spread over the workers,
and a worker killed mid-run is replaced, its candidate lost (never stored) and measured by a re-run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import pytest

from astra_kernels import cli
from astra_kernels.jobs import cluster_tuning, tuning
from astra_kernels.suite import recordings
from astra_kernels.tools.cluster.pool import WorkerPool
from astra_kernels.tools.cluster.runtime import connected
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import StoredEvaluator

from support import cluster_replay as replay
from support.scripted_gpu import FOLDER as SCRIPTED_FOLDER, SHAPES as SCRIPTED_SHAPES, ScriptedWorker

ray = replay.need_ray()


@pytest.fixture(scope="module")
def cluster():
    """A local cluster with three stand-in GPUs (Ray's own GPU resources: nothing touches CUDA)."""
    with connected(None, num_gpus=3, num_cpus=2) as resources:
        yield resources


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    return replay.one_worker_run(tmp_path_factory.mktemp("one") / "results.sqlite")


def test_a_cluster_run_equals_a_one_worker_run(cluster, one_worker, tmp_path):
    report_one, rows_one = one_worker
    with WorkerPool(3, recordings=[replay.recording()]) as pool, ResultsStore(tmp_path / "r.sqlite") as store:
        reports = cluster_tuning.tune_on_cluster(pool, [replay.REQUEST], {replay.KERNEL: store},
                                                 recordings={replay.KERNEL: replay.recording()})
        status = pool.status()
        stored = store.rows()
        assert replay.rows(store) == rows_one
    assert list(reports) == [("NVIDIA H200", replay.KERNEL)]
    assert replay.comparable(reports["NVIDIA H200", replay.KERNEL]) == replay.comparable(report_one)
    # every evaluation went to a worker (the driver's store started empty), spread over them
    assert sum(s["done"] for s in status) >= len(stored) > 3 * len(replay.SHAPES)
    assert sum(s["done"] > 0 for s in status) >= 2
    # each row names the host and the GPU that measured it
    assert {r["result"]["host"] for r in stored} == {socket.gethostname()}
    assert {r["result"]["gpu"] for r in stored} <= {"0", "1", "2"}


def test_a_worker_killed_mid_run_is_replaced_and_its_evaluation_asked_again(cluster, one_worker, tmp_path, capsys):
    report_one, rows_one = one_worker
    done: dict = {}
    with WorkerPool(2, recordings=[replay.recording()], pace=10.0) as pool, \
            ResultsStore(tmp_path / "r.sqlite") as store:
        view = pool.view("NVIDIA H200", replay.recording())
        thread = threading.Thread(target=lambda: done.update(report=replay.tune(view, store, parallel=3)))
        thread.start()
        busy = _wait_for(lambda: [s for s in pool.status() if s["state"] == "busy"])
        victim = pool.slots[busy[0]["worker"]]
        os.kill(victim.device["pid"], signal.SIGKILL)
        thread.join(300)
        assert not thread.is_alive()
        _wait_for(lambda: pool.starting == 0 or None)
        assert any(victim.where in line for line in pool.lost)  # it was lost ...
        assert any(s.replaces == victim.index and s.alive for s in pool.slots)  # ... and replaced
        # what it held was asked again: the run is the uninterrupted one, and nothing "lost" is kept
        assert replay.comparable(done["report"]) == replay.comparable(report_one)
        assert replay.rows(store) == rows_one and store.count(status="lost") == 0
    # Ray's word of the death ("A worker died or was killed ...") may come later; it is never stdout's
    assert "died" not in capsys.readouterr().out


def test_ray_s_own_messages_go_to_stderr(cluster, capsys):
    """What a raylet reports reaches the driver through this function, which Ray calls with
    is_err False (stdout); within `connected` it prints to stderr, so `--json` stays JSON."""
    import ray._private.worker as ray_worker

    ray_worker.print_to_stdstream({"lines": ["A worker died (a test's)"], "pid": "raylet", "is_err": False},
                                  ignore_prefix=False)
    captured = capsys.readouterr()
    assert "A worker died (a test's)" in captured.err and "died" not in captured.out


def test_one_shape_s_configurations_are_measured_side_by_side(cluster, one_worker, tmp_path):
    """Three workers and one shape: an exhaustive search's proposals go three at a time, and come
    back in the order one worker would have measured them."""
    report_one, _ = one_worker
    with WorkerPool(3, recordings=[replay.recording()], pace=2.0) as pool, ResultsStore(tmp_path / "r.sqlite") as store:
        view = pool.view("NVIDIA H200", replay.recording())
        report = tuning.tune(tuning.TuneRequest(replay.FOLDER, replay.SHAPES[:1], "bf16", **replay.OPTIONS), view,
                             StoredEvaluator(view, store))
        busy = [s["done"] for s in pool.status()]
    assert sum(d > 0 for d in busy) == 3, busy
    trials = [t.model_dump(exclude={"reused"}) for t in report.shapes[0].search.trials]
    assert trials == [t.model_dump(exclude={"reused"}) for t in report_one.shapes[0].search.trials]


def test_astra_tune_ray_writes_each_kernel_and_shows_the_workers(cluster, tmp_path, capsys, monkeypatch):
    # The recordings as they were before the sweep's (h200-2026-11-28, every kernel an H200's):
    # silu_and_mul's newest an H200's, rmsnorm's an H100's, so the replay workers are of two kinds.
    every = recordings.shipped
    monkeypatch.setattr(recordings, "shipped", lambda: [r for r in every() if r.session != "h200-2026-11-28"])
    code = cli.main(["tune", "silu_and_mul", "rmsnorm", "--ray", "--replay", "recorded", "--shapes", "16x4096",
                     "--sample", "12", "--strategy", "exhaustive", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    for kernel in ("silu_and_mul", "rmsnorm"):
        assert (tmp_path / kernel / "dispatch.json").is_file() and (tmp_path / kernel / "results.sqlite").is_file()
        assert f"recorded/{recordings.resolve('recorded', kernel).parent.name}/{kernel}.sqlite.gz" in (tmp_path / kernel / "report.md").read_text()
    # silu_and_mul's recording is an H200's and rmsnorm's an H100's: a mixed cluster of replay workers,
    # each kernel tuned only on the kind its recording holds (so no KIND/ folders above)
    table = [line for line in out.splitlines() if line.startswith("| ") and "NVIDIA H" in line and "GPU" in line]
    assert len(table) == 3 and all(line.count("|") == 7 for line in table), out[-3000:]  # three workers, whole rows
    assert any("NVIDIA H200" in line for line in table) and any("NVIDIA H100" in line for line in table)


def test_astra_tune_ray_starts_each_gpu_kind_from_the_table_shipped_for_it(cluster, tmp_path, capsys):
    from astra_kernels.jobs.benchmark import shipped_table

    code = cli.main(["tune", "rmsnorm", "--ray", "--replay", "recorded", "--shapes", "128x4096", "--budget", "3",
                     "--start", "shipped", "--out", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    search = json.loads(out)["shapes"][0]["search"]
    recorded_on = recordings.find("rmsnorm").session.split("-")[0].upper()  # the replay workers' GPU kind
    pick = next(e.config for e in shipped_table("rmsnorm", f"NVIDIA {recorded_on}").entries if e.shape == {"T": 128, "H": 4096})
    assert search["rounds"][0]["action"] == "start" and search["trials"][0]["config"] == pick


class OtherGpu(ScriptedWorker):
    """A second GPU kind, which prefers narrow vectors where the scripted one prefers wide."""

    device = {**ScriptedWorker.device, "name": "Other GPU"}

    def evaluate(self, request):
        result = super().evaluate(request)
        us = 0.5 * request.options.defines.get("VEC", 8) + result.timing.median_us / 10
        result.timing = result.timing.model_copy(update={"median_us": us, "min_us": us, "max_us": us,
                                                         "samples_us": [us]})
        return result


def test_each_gpu_kind_of_a_mixed_cluster_tunes_its_own_table(cluster, tmp_path, capsys):
    """A recording of two GPU kinds replays a mixed cluster: each kind tunes the kernel from its own
    measurements only, into its own folder, with the table a run on that kind alone writes."""
    recording, alone = tmp_path / "two-kinds.sqlite", {}
    for gpu in (ScriptedWorker(), OtherGpu()):
        with ResultsStore(recording) as store:
            alone[gpu.device["name"]] = tuning.tune(
                tuning.TuneRequest(SCRIPTED_FOLDER, SCRIPTED_SHAPES, "bf16", sample=40, seed=2, strategy="exhaustive"),
                gpu, StoredEvaluator(gpu, store)).dispatch
    assert alone["Scripted GPU"].general != alone["Other GPU"].general
    out = tmp_path / "out"
    code = cli.main(["tune", "silu_and_mul", "--ray", "--replay", str(recording), "--sample", "40", "--seed", "2",
                     "--strategy", "exhaustive", "--shapes", "16x4096,64x8192", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed[-2000:]
    for kind, folder in (("Scripted GPU", "scripted-gpu"), ("Other GPU", "other-gpu")):
        table = json.loads((out / folder / "dispatch.json").read_text())
        assert table["general"] == alone[kind].general
        assert [e["config"] for e in table["entries"]] == [e.config for e in alone[kind].entries]
        assert f"replayed from a recording of {kind}" in (out / folder / "report.md").read_text()


def test_astra_optimize_ray_runs_the_agent_on_the_cluster(cluster, tmp_path, capsys):
    """The agent with the cluster's workers as its evaluator (no model: the rule-based planner tunes,
    its tune step's shapes at once): it measures the baseline and the search floor (the H200 table,
    the recording's GPU) there and reports."""
    code = cli.main(["optimize", "silu_and_mul", "--ray", "--replay", "recorded", "--shapes", "16x4096,32x8192",
                     "--tune-seconds", "4", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and all(row["baseline_us"] for row in report["shapes"]), printed[-2000:]
    assert "search floor: candidate 1, the table shipped for NVIDIA H200" in printed
    assert "tuner candidate 2" in printed and "| worker |" in printed


def test_astra_tune_ray_json_is_the_json_alone(cluster, tmp_path, capsys):
    code = cli.main(["tune", "silu_and_mul", "--ray", "--replay", "recorded", "--shapes", "16x4096", "--sample", "6",
                     "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["kernel"] == "silu_and_mul"
    assert "| worker |" in captured.err  # the workers' table goes beside it


def test_cluster_options_are_one_line_errors(cluster, capsys):
    assert cli.main(["tune", "silu_and_mul", "--workers", "2"]) == 2
    assert cli.main(["tune", "silu_and_mul", "--ray", "--pace", "2"]) == 2
    assert cli.main(["tune", "silu_and_mul", "--ray", "--workers", "5"]) == 2  # three GPUs
    assert cli.main(["tune", "silu_and_mul", "no_such_kernel", "--replay", "recorded"]) != 0  # before any tuning
    assert cli.main(["tune", "--ray", "silu_and_mul", "rmsnorm"]) == 2  # the kernel read as the address
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip() and "Token" not in line]
    assert len(lines) == 5, lines
    assert "--ray" in lines[0] and "--replay" in lines[1] and "3 GPU" in lines[2] and "no_such_kernel" in lines[3]
    assert "name the kernels before --ray" in lines[4]


def _wait_for(condition, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError("the condition never held")


def test_ray_s_printing_is_restored_after_the_block():
    """The stderr routing lasts the block only (also one that raises), and a Ray without the
    function is left as it is."""
    from types import SimpleNamespace

    from astra_kernels.tools.cluster.runtime import _ray_messages_on_stderr

    def original(data, ignore_prefix):
        seen.append(data["is_err"])

    seen: list = []
    fake = SimpleNamespace(_private=SimpleNamespace(worker=SimpleNamespace(print_to_stdstream=original)))
    with pytest.raises(RuntimeError):
        with _ray_messages_on_stderr(fake):
            fake._private.worker.print_to_stdstream({"lines": ["x"], "is_err": False}, ignore_prefix=False)
            raise RuntimeError("the block fails")
    assert seen == [True] and fake._private.worker.print_to_stdstream is original
    bare = SimpleNamespace()
    with _ray_messages_on_stderr(bare):
        pass
    assert vars(bare) == {}


def test_a_candidate_no_recording_holds_is_refused_naming_each_recording(cluster):
    """A replay worker holds every kernel's recording; when none has the candidate, its answer names
    them all, not only the last one asked (another kernel's, which would mislead)."""
    from astra_kernels.suite import recordings
    from astra_kernels import suite
    from astra_kernels.tools.cluster.host import EvaluationHost

    held = [str(recordings.resolve("recorded", k)) for k in ("merge_attn_states", "rmsnorm")]
    host = EvaluationHost(recordings=held)
    try:
        config = replay.OPTIONS["configs"][0]
        request = suite.request(replay.FOLDER, "template", replay.SHAPES[0], "bf16", "default", config,
                                sms=132, arch="sm_90")
        result = host.evaluate(request)
    finally:
        host.close()
    assert result.status == "unrecorded"
    assert all(name in result.message for name in held) and "none of the recordings" in result.message
