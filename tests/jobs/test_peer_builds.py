"""The peers built ahead of a benchmark (jobs/peer_builds.py): every shape built once, spread over
the children, a failure counted and the rest built, and a deadline that leaves no child running.
The builders here stand in for torch_peers.build_peer (which needs a GPU: its cache hit is checked
in test_peer_builds_on_gpu.py): each child runs this module, which serves the builder its request
names (see the end of the file)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from astra_kernels.jobs import benchmark, peer_builds

HERE = __name__.rpartition(".")[2]  # the module's own name, as `python -m` runs it from the test folder


def fake_build(kernel, shape, dtype, variant, device_index):
    """Where the shape says "hang", wait past any deadline; else write what was built, by which
    process, into the folder named by the kernel, failing where the shape says "bad"."""
    if shape.get("noisy"):  # a library printing: more than a pipe holds, and a line that is JSON
        print("42\n" + "x" * (1 << 17), flush=True)
    if shape.get("exit"):
        os._exit(3)
    if shape.get("hang"):
        Path(kernel, f"{os.getpid()}.pid").write_text("")
        time.sleep(600)
    if shape.get("bad"):
        raise RuntimeError("this shape does not compile\nsecond line")
    Path(kernel, f"{shape['T']}.json").write_text(json.dumps({"pid": os.getpid(), "dtype": dtype, "variant": variant,
                                                               "device_index": device_index}))


def test_every_shape_is_built_once_spread_over_the_children_and_a_failure_is_counted(tmp_path):
    items = [(str(tmp_path), {"T": t}, "bf16", "default") for t in range(1, 8)]
    items.append((str(tmp_path), {"T": 99, "bad": 1}, "bf16", "default"))
    built = peer_builds.build_ahead(items, device_index=3, children=3, child=HERE)
    assert built.built == 7 and built.left == 0
    assert len(built.failed) == 1 and "RuntimeError: this shape does not compile" in built.failed[0]
    assert "second line" not in built.failed[0]  # one line each
    records = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(records, key=int) == [str(t) for t in range(1, 8)]
    assert len({r["pid"] for r in records.values()}) == 3  # side by side, not one after another
    assert {(r["dtype"], r["variant"], r["device_index"]) for r in records.values()} == {("bf16", "default", 3)}
    assert "7 shape(s)" in built.line() and "1 failed" in built.line()


def test_the_deadline_leaves_no_child_running(tmp_path):
    items = [(str(tmp_path), {"T": t, "hang": 1}, "bf16", "default") for t in range(4)]
    started = time.perf_counter()
    built = peer_builds.build_ahead(items, children=2, deadline_s=10.0, child=HERE)
    assert time.perf_counter() - started < 40
    assert built.built == 0 and built.left == 4 and built.deadline_passed
    assert "4 left to compile as they come (the deadline passed)" in built.line()
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"child {pid} outlived build_ahead")


def test_what_else_a_child_prints_neither_blocks_it_nor_counts_and_a_child_that_dies_is_said(tmp_path):
    items = [(str(tmp_path), {"T": 1, "noisy": 1}, "bf16", "default"), (str(tmp_path), {"T": 2}, "bf16", "default")]
    started = time.perf_counter()
    built = peer_builds.build_ahead(items, children=1, deadline_s=60.0, child=HERE)
    assert (built.built, built.failed, built.left) == (2, [], 0) and time.perf_counter() - started < 30
    items = [(str(tmp_path), {"T": 3, "exit": 1}, "bf16", "default"), (str(tmp_path), {"T": 4}, "bf16", "default")]
    built = peer_builds.build_ahead(items, children=1, deadline_s=60.0, child=HERE)
    assert built.left == 2 and not built.deadline_passed and "(a child ended before them)" in built.line()


def test_nothing_to_build_starts_nothing():
    built = peer_builds.build_ahead([], child=HERE)
    assert built.built == 0 and built.left == 0 and built.seconds == 0.0


def test_the_time_spent_ahead_counts_in_the_summary_and_adds_up_over_merged_runs():
    one = benchmark.BenchReport(device="H200", arch="sm_90", date="2026-11-29T10:00:00", dtype="bf16",
                                ahead_seconds={"torch_compile_build_ahead": 40.0})
    two = one.model_copy(update={"date": "2026-11-29T11:00:00", "ahead_seconds": {"torch_compile_build_ahead": 2.5}})
    assert "torch_compile_build_ahead 40" in one.time_spent()
    assert benchmark.merge([one, two]).ahead_seconds == {"torch_compile_build_ahead": 42.5}


if __name__ == "__main__":  # a child of build_ahead(child=HERE)
    peer_builds.serve(fake_build)
