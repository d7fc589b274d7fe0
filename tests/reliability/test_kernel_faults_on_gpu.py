"""Kernel faults and cheats on a real GPU, through the path a tuning run takes: one evaluation
worker behind the results store (runner.StoredEvaluator).

Each fault is followed by a good evaluation that the store cannot answer (other seeds), which
must pass: in the same worker when the fault left the context usable, in a fresh one when it did
not. Every result, faults included, must be in the store with its reason, and the first
measurement must come through to the end unchanged. Run with -s to see the table of what
happened, which docs/reliability.md publishes.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from support import faulty
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.measuring.evaluation import LaunchShape
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.search.runner import StoredEvaluator
from astra_kernels.tools.measuring.sanitizer import find_compute_sanitizer, sanitize

pytestmark = pytest.mark.gpu

N = (1 << 18) + 3  # not a multiple of the 256-thread block: the last block has idle threads
HANG_DEADLINE_S = 5.0
COMPILE_DEADLINE_S = 10.0  # a real compile of `scale` takes well under a second


def _scale(variant: int, **kw):
    return faulty.scale_request(variant, n=N, **kw)


def _faults(grid: tuple[int, ...]):
    """(case, request, status, needles in the message, worker replaced?, deadline)."""
    good = _scale(0)
    return [
        ("wrong math", _scale(1), "incorrect", ["outside rtol"], False, None),
        ("writes only part of its output", _scale(2), "incorrect", ["NaN", "unwritten"], False, None),
        ("modifies its input", _scale(3), "incorrect", ["modified its input 'x'"], False, None),
        ("returns cached output", _scale(6, kernel="scale_cached"), "incorrect", ["cached result"], False, None),
        ("works only in the checked launches", _scale(9, source=faulty.FAULTS_SOURCE), "incorrect",
         ["timed outputs", "did not do the work the checks saw", "outside rtol", "filled with finite values"], False,
         None),
        ("work on another stream (device launch)", _scale(10, source=faulty.FAULTS_SOURCE), "compile_error",
         ["cudaStreamFireAndForget"], False, None),
        ("work on another stream, built -rdc", _scale(10, source=faulty.FAULTS_SOURCE, extra=("-rdc=true",)),
         "compile_error", ["relocatable device code"], False, None),
        ("writes past the end of its output (arena)", _scale(7, source=faulty.FAULTS_SOURCE), "incorrect",
         ["guard bands", "output 'y'", "after its end", "from byte +0 to +1 past it"], False, None),
        ("writes past the end of its output (separate)",
         dataclasses.replace(_scale(7, source=faulty.FAULTS_SOURCE), input_layout="separate"), "incorrect",
         ["guard bands", "output 'y'", "after its end", "from byte +0 to +1 past it"], False, None),
        ("writes in front of its input", _scale(8, source=faulty.FAULTS_SOURCE), "incorrect",
         ["guard bands", "input 'x'", "before its start", "from byte -2 to -1"], False, None),
        ("block of 2048 threads", dataclasses.replace(good, launch=LaunchShape(grid=grid, block=(2048,))),
         "invalid", ["block x of 2048 exceeds the device's 1024"], False, None),
        ("grid y of 70000", dataclasses.replace(good, launch=LaunchShape(grid=(grid[0], 70000), block=(256,))),
         "invalid", ["grid y of 70000 exceeds the device's 65535"], False, None),
        ("1 MiB of dynamic shared memory",
         dataclasses.replace(good, launch=LaunchShape(grid=grid, block=(256,), shared_bytes=1 << 20)),
         "invalid", ["1048576 bytes of dynamic shared memory", "exceed the device's"], False, None),
        ("a compile that never ends", _scale(0, source=faulty.endless_source()), "compile_timeout",
         [f"did not finish within {COMPILE_DEADLINE_S:g} s", "killed"], False, None),
        ("illegal address", _scale(4), "launch_error", ["ILLEGAL_ADDRESS"], True, None),
        ("infinite loop", _scale(5), "timeout", [f"no answer within {HANG_DEADLINE_S:.1f} s", "killed"], True,
         HANG_DEADLINE_S),
    ]


class _Deadline:
    """The worker as the runner sees it, with one deadline for its evaluations."""

    def __init__(self, worker: EvaluationWorker, timeout_s: float | None):
        self.worker, self.timeout_s = worker, timeout_s
        self.device = worker.device

    def evaluate(self, request):
        return self.worker.evaluate(request, timeout_s=self.timeout_s)


def test_faults_are_recorded_with_their_reason_and_the_run_goes_on(tmp_path):
    problems: list[str] = []
    table: list[tuple[str, str, int, float, str]] = []
    with EvaluationWorker(timeout_s=120, compile_timeout_s=COMPILE_DEADLINE_S) as worker, \
            ResultsStore(tmp_path / "results.sqlite") as store:
        keys: list[str] = []
        run_id = "faults"

        def evaluate(request, deadline=None):
            evaluator = StoredEvaluator(_Deadline(worker, deadline), store, run_id=run_id)
            result, reused = evaluator(request, kernel="scale", which="fault-suite")
            assert not reused, f"{request.label}: the store answered a request meant to run"
            keys.append(evaluation_key(request, worker.device["name"]))
            return result

        def good(index: int):
            request = dataclasses.replace(_scale(0), seeds=(100 + 2 * index, 101 + 2 * index),
                                          label=f"good after #{index}")
            result = evaluate(request)
            if result.status != "ok" or not result.correct or result.timing is None:
                problems.append(f"the good evaluation after fault #{index} did not pass: "
                                f"{result.status}: {result.message[:400]}")
            return result

        first = good(0)
        assert first.status == "ok", f"the baseline evaluation failed, nothing else means anything: {first.message}"
        first_row = store.rows(key=keys[0])[0]
        for index, (case, request, status, needles, replaced, deadline) in enumerate(_faults((-(-N // 256),)),
                                                                                   start=1):
            request = dataclasses.replace(request, label=case)
            restarts, pid = worker.restarts, worker.pid
            started = time.perf_counter()
            result = evaluate(request, deadline)
            seconds = time.perf_counter() - started
            table.append((case, result.status, worker.restarts - restarts, seconds, result.message[:160]))
            where = f"#{index} {case}"
            if result.status != status:
                problems.append(f"{where}: status {result.status}, expected {status}: {result.message[:600]}")
            missing = [n for n in needles if n not in result.message]
            if missing:
                problems.append(f"{where}: message lacks {missing}: {result.message[:600]}")
            if result.status == "incorrect" and not any(not c.passed for c in result.checks):
                problems.append(f"{where}: incorrect, yet no failed check names the reason")
            stored = store.get(keys[-1])
            if stored is None or (stored.status, stored.message) != (result.status, result.message):
                problems.append(f"{where}: the store holds {stored and (stored.status, stored.message[:200])}, "
                                f"not what the evaluation returned")
            good(index)
            replaced_now = worker.restarts - restarts
            if replaced_now != int(replaced):
                problems.append(f"{where}: the worker was replaced {replaced_now} times, expected {int(replaced)}")
            if not replaced and worker.pid != pid:
                problems.append(f"{where}: the worker's process changed ({pid} -> {worker.pid}) for a fault "
                                "that leaves the context usable")

        rows = store.rows(run_id=run_id)
        if len(rows) != len(keys) or {r["key"] for r in rows} != set(keys):
            problems.append(f"the store holds {len(rows)} rows of this run for {len(keys)} evaluations")
        if store.rows(key=keys[0])[0] != first_row:
            problems.append("the first measurement changed or vanished by the end of the run")
        good_rows = [r for r in rows if r["result"]["label"].startswith("good")]
        if any(r["status"] != "ok" or r["median_us"] is None for r in good_rows):
            problems.append("a good evaluation's row is not ok and timed in the store")

    print("\n| case | status | worker replaced | seconds | message |\n|---|---|---|---|---|")
    for case, status, replaced, seconds, message in table:
        print(f"| {case} | {status} | {replaced} | {seconds:.1f} | {message.splitlines()[0] if message else ''} |")
    assert not problems, "\n".join(problems)


def test_memcheck_sees_a_write_past_the_end_and_passes_a_correct_kernel():
    if find_compute_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed (not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin)")
    bad = sanitize(faulty.scale_request(7, n=4099, source=faulty.FAULTS_SOURCE), timeout_s=300)
    assert bad.available and bad.clean is False, bad.message + "\n" + bad.output_tail
    assert any("Invalid __global__ write" in e for e in bad.errors), bad.output_tail
    clean = sanitize(faulty.scale_request(0, n=4099), timeout_s=300)
    assert clean.clean, clean.message + "\n" + clean.output_tail
    assert clean.result is not None and clean.result.status == "ok", clean.result
    assert not any(c.name.startswith("guard bands") for c in clean.result.checks)  # exact-size buffers
