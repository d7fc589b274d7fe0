"""The dispatch table's run-time pick: tuned shapes get their best, others the nearest tuned
configuration that runs there, or the runnable configuration closest to it."""

from __future__ import annotations

import time

from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

TUNED = {"THREADS": 256, "VEC": 8, "CHUNKS": 4, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
TABLE = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default",
                      entries=[DispatchEntry(shape={"T": 16, "D": 4096}, config=TUNED)])


def test_tuned_and_nearest_shapes():
    assert TABLE.pick({"T": 16, "D": 4096}) == (TUNED, "tuned", "template")
    assert TABLE.pick({"T": 32, "D": 8192}) == (TUNED, "nearest tuned shape 16x4096", "template")


def test_an_odd_width_keeps_the_tuned_choices_and_narrows_the_vector():
    started = time.perf_counter()
    config, why, _ = TABLE.pick({"T": 3, "D": 1002})  # 1002 = 2 mod 8: vectors of 2 at most
    assert time.perf_counter() - started < 5
    # 501 vectors in 4 chunks of 126: 256 threads would be over twice what a chunk can use
    assert config == {**TUNED, "VEC": 2, "THREADS": 128}
    assert why == "closest runnable to the tuned shape 16x4096's configuration"
    folder = suite.load("silu_and_mul")
    env = suite.environment(folder.spec, {"T": 3, "D": 1002}, "bf16", "default", 132)
    assert not isinstance(folder.template.instantiate(config, env), suite.Exclusion)


def test_without_entries_the_default_is_the_target():
    empty = TABLE.model_copy(update={"entries": []})
    config, why, _ = empty.pick({"T": 7, "D": 1000})
    assert "template default" in why and config["VEC"] == 8  # 1000 = 0 mod 8: the default runs


def _table(entries: dict[tuple[int, int], dict[str, int]]) -> DispatchTable:
    return DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default",
                         entries=[DispatchEntry(shape={"T": t, "D": d}, config=c) for (t, d), c in entries.items()])


def test_a_token_count_inside_its_width_s_tuned_range_takes_that_width_s_nearest_count():
    """40x14336 lies between 16 and 128 tokens tuned at its width: it takes 16x14336's pick, though
    32x8192 is nearer by the summed distance (0.78 against 0.92), which the H200 table's 40x14336
    used to run (3.08 us against torch.compile's 2.62)."""
    a, b, c = ({**TUNED, "CHUNKS": n} for n in (1, 2, 8))
    table = _table({(16, 14336): a, (128, 14336): b, (32, 8192): c})
    assert table.pick({"T": 40, "D": 14336}) == (a, "nearest tuned shape 16x14336", "template")
    assert table.pick({"T": 100, "D": 14336}) == (b, "nearest tuned shape 128x14336", "template")
    assert table.pick({"T": 40, "D": 8192}).config == c  # its own width's one count: the summed distance


def test_outside_its_width_s_tuned_range_or_at_an_untuned_width_the_summed_distance_decides():
    a, c = {**TUNED, "CHUNKS": 1}, {**TUNED, "CHUNKS": 4}
    table = _table({(32, 14336): a, (2048, 8192): c})
    # 1024 tokens: beyond the one count tuned at 14336, so 2048x8192 (1.25) beats 32x14336 (3.47)
    assert table.pick({"T": 1024, "D": 14336}) == (c, "nearest tuned shape 2048x8192", "template")
    assert table.pick({"T": 1500, "D": 5120}).config == c  # a width never tuned
    assert table.pick({"T": 32, "D": 14336}) == (a, "tuned", "template")


NARROW = {**TUNED, "THREADS": 64, "CHUNKS": 32, "UNROLL": 1}  # the H200 table's 1x14336
WIDE = {**TUNED, "THREADS": 128, "CHUNKS": 32, "UNROLL": 1}  # and its 1x28672


def test_at_an_untuned_width_the_nearest_configuration_keeping_a_thread_s_work_is_picked():
    """1x18944 (Qwen2-7B's width): the nearest tuned shape 1x14336's 64 threads x 32 chunks make one
    round over a chunk's 56 vectors there and two over 74 here (2.9-3.2 us against torch.compile's
    1.8-2.1 on an H200); 1x28672's 128 threads x 32 chunks keep their one round (112 vectors there)."""
    table = _table({(1, 14336): NARROW, (1, 28672): WIDE})
    assert table.pick({"T": 1, "D": 18944}) == (
        WIDE, "work per thread kept (1): tuned shape 1x28672's configuration", "template")
    # where the nearest keeps its work (1536 vectors: 48 a chunk, one round), the ordinary pick
    assert table.pick({"T": 1, "D": 12288}) == (NARROW, "nearest tuned shape 1x14336", "template")
    # at a tuned width the work is not weighed: 2x14336 is outside its width's range, 1x14336 is nearest
    assert table.pick({"T": 2, "D": 14336}) == (NARROW, "nearest tuned shape 1x14336", "template")
    # where no other width's entry keeps its work, the nearest as before
    assert _table({(1, 14336): NARROW, (1, 16384): NARROW}).pick({"T": 1, "D": 18944}) == (
        NARROW, "nearest tuned shape 1x16384", "template")


def test_a_source_that_declares_no_work_keeps_the_nearest_pick():
    """The table's own source without the `work:` line: nothing to weigh, so the nearest entry."""
    text = "\n".join(line for line in suite.load("silu_and_mul").template.source.split("\n")
                     if not line.startswith("//@ work:"))
    table = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", sources={"mine": text},
                          entries=[DispatchEntry(shape={"T": 1, "D": 14336}, config=NARROW, source="mine"),
                                   DispatchEntry(shape={"T": 1, "D": 28672}, config=WIDE, source="mine")])
    assert table.pick({"T": 1, "D": 18944}) == (NARROW, "nearest tuned shape 1x14336: mine", "mine")
    with_work = DispatchTable.model_validate({**table.model_dump(), "sources": {"mine": suite.load("silu_and_mul").template.source}})
    assert with_work.pick({"T": 1, "D": 18944}) == (
        WIDE, "work per thread kept (1): tuned shape 1x28672's configuration: mine", "mine")


def test_a_baseline_entry_is_carried_as_before():
    table = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default",
                          entries=[DispatchEntry(shape={"T": 1, "D": 14336}, config={}, source="baseline"),
                                   DispatchEntry(shape={"T": 1, "D": 28672}, config=WIDE)])
    assert table.pick({"T": 1, "D": 18944}) == ({}, "nearest tuned shape 1x14336: the baseline", "baseline")


EXACT = {"ROW_THREADS": 512, "ROWS": 1, "VEC": 8, "ITEMS": 1, "PRELOAD_W": 1, "REG_CAP": 128, "CLUSTER": 1, "HINT": 0,
         "STATIC_ROW": 2, "RELOAD": 0}  # the H200 fused_add_rmsnorm table's 1x4096: the row compiled in, no bounds checks
FAR = {"ROW_THREADS": 1024, "ROWS": 1, "VEC": 2, "ITEMS": 8, "PRELOAD_W": 1, "REG_CAP": 128, "CLUSTER": 1, "HINT": 1,
       "STATIC_ROW": 0, "RELOAD": 0}  # and its 128x11008
TWO = {"ROW_THREADS": 256, "ROWS": 1, "VEC": 8, "ITEMS": 2, "PRELOAD_W": 1, "REG_CAP": 128, "CLUSTER": 1, "HINT": 0,
       "STATIC_ROW": 0, "RELOAD": 0}  # and its 3450x4096


def _norm_table(entries: dict[tuple[int, int], dict[str, int]]) -> DispatchTable:
    return DispatchTable(kernel="fused_add_rmsnorm", dtype="bf16", variant="default",
                         entries=[DispatchEntry(shape={"T": t, "H": h}, config=c) for (t, h), c in entries.items()])


def test_where_no_other_width_keeps_the_work_the_nearest_configuration_moves_one_value_the_launch_does_not_read():
    """1x3584: 1x4096's exact row (512 threads x one 8-element vector) cannot hold 448 vectors without
    bounds checks; STATIC_ROW 1 is the same launch and work with them (2.15-2.21 us against the
    fastest peer's 2.44-2.83 at 1-8 tokens on an H200), where the next entry that ran, 128x11008's,
    took 2.83-2.92."""
    table = _norm_table({(1, 4096): EXACT, (128, 11008): FAR})
    assert table.pick({"T": 1, "H": 3584}) == (
        {**EXACT, "STATIC_ROW": 1}, "work per thread kept (1): tuned shape 1x4096's configuration with STATIC_ROW=1",
        "template")
    # a move of a parameter the launch reads is never made: at 3450x5120, 3450x4096's 256 threads
    # x 2 vectors would need 512 threads or a cluster of 2 (0.79-0.87x of the fastest peer measured)
    assert {"ROW_THREADS", "ROWS", "CLUSTER", "ITEMS", "RELOAD"} == \
        suite.load("fused_add_rmsnorm").template.launch_parameters()
    assert _norm_table({(3450, 4096): TWO, (128, 11008): FAR}).pick({"T": 3450, "H": 5120}) == (
        FAR, "nearest tuned shape 128x11008", "template")


def test_where_the_nearest_width_s_configuration_cannot_keep_its_work_a_farther_width_s_moved_one_may():
    """1x5120 (a width no table is tuned at): 1x4096's exact row with bounds checks makes two passes
    over 640 vectors where it made one; 1x8192's 1024 threads x one vector, exact there, keep their
    one pass with the bounds kept (STATIC_ROW 1). Before, the pick fell past both to 128x11008's
    1024 threads x 2-element vectors, three passes over the row (six where it was tuned)."""
    wide = {**EXACT, "ROW_THREADS": 1024}  # the H200 table's 1x8192
    table = _norm_table({(1, 4096): EXACT, (1, 8192): wide, (128, 11008): FAR})
    assert table.pick({"T": 1, "H": 5120}) == (
        {**wide, "STATIC_ROW": 1}, "work per thread kept (1): tuned shape 1x8192's configuration with STATIC_ROW=1",
        "template")
    # at 3584 (448 vectors) 1x4096's own move keeps its one pass
    assert table.pick({"T": 1, "H": 3584}).config == {**EXACT, "STATIC_ROW": 1}


def test_a_configuration_that_runs_with_other_work_is_not_moved_to_count_it_anew():
    """Only a configuration that cannot run is moved: at 454x5120, rmsnorm's 128x11008 entry (512
    threads x 8-element vectors, three a thread there, two here) runs; moved to 4-element vectors it
    would keep three a thread of half the bytes (0.90-0.97x of the fastest peer from 1022 tokens up
    on an H200, cold, where the entry as it was tuned ran 1.00-1.04x)."""
    row = {"ROW_THREADS": 512, "ROWS": 1, "VEC": 8, "ITEMS": 4, "PRELOAD_W": 1, "REG_CAP": 128, "CLUSTER": 1,
           "HINT": 0, "STATIC_ROW": 0}
    table = DispatchTable(kernel="rmsnorm", dtype="bf16", variant="default",
                          entries=[DispatchEntry(shape={"T": 128, "H": 11008}, config=row)])
    assert table.pick({"T": 454, "H": 5120}) == (row, "nearest tuned shape 128x11008", "template")
    assert "VEC" not in suite.load("rmsnorm").template.launch_parameters()  # so only that rule keeps it


def test_a_table_from_before_a_parameter_runs_what_it_was_tuned_with():
    """fused_add_rmsnorm's RELOAD came after its tables were tuned: an entry without it reads at the
    default (the code that ran), for pick() and for the benchmark's comparison of a kept row with
    today's column alike; a name the template does not have still fails where it is used."""
    from astra_kernels.jobs.benchmark import BenchRow, tuned_column

    older = {k: v for k, v in TWO.items() if k != "RELOAD"}
    table = _norm_table({(3450, 4096): older})
    assert table.entries[0].config == TWO
    assert table.pick({"T": 3450, "H": 4096}) == (TWO, "tuned", "template")
    row = BenchRow(kernel="fused_add_rmsnorm", label="3450x4096", shape={"T": 3450, "H": 4096}, dtype="bf16",
                   variant="default", bytes_moved=1, tuned_config=older, tuned_status="ok")
    assert row.tuned_column == tuned_column(table, {"T": 3450, "H": 4096}, 132, "sm_90") == TWO
    misspelt = _norm_table({(3450, 4096): {**older, "RELAOD": 1}})
    try:
        misspelt.pick({"T": 3450, "H": 4096})
    except suite.AstraError as exc:
        assert "RELAOD" in str(exc)
    else:
        raise AssertionError("a misspelt parameter was accepted")
