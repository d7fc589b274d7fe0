"""The dispatch table's run-time pick: tuned shapes get their best, others the nearest tuned
configuration that runs there, or the runnable configuration closest to it."""

from __future__ import annotations

import time

from astra_kernels.kernels_sglang import suite
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

TUNED = {"THREADS": 256, "VEC": 8, "CHUNKS": 4, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0}
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
