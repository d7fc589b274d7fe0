"""Reference kernels that measure the machine rather than the model's work.

The copy probe is a plain 16-byte-vector copy: timed through the evaluation protocol it should
reach the driver's copy bandwidth, which shows that the protocol itself costs nothing at scale.
The mix probe streams a kernel's own read/write ratio (tools/toolchain/ceiling.py): timed at a
kernel's bytes it is what moving exactly those bytes, in that mix, costs at that size.
The empty kernel is the launch floor: no kernel, however small, replays faster than it.
"""

from __future__ import annotations

import functools
from datetime import date

import numpy as np

from astra_kernels.tools.toolchain.ceiling import COPY_SOURCE, MIX_SOURCE, MIX_THREADS, mix_grids, mix_options
from astra_kernels.tools.toolchain.targets import DEFAULT_SMS
from .evaluation import EvaluationRequest, LaunchShape
from .problem import Case, Param, Problem
from .results import ResultsStore

EMPTY_SOURCE = r"""
extern "C" __global__ void empty(int* flag) {
    if (flag[0] == 12345 && threadIdx.x == 1024) flag[0] = 0;
}
"""


def _copy_case(words: int, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 2**32, size=words, dtype=np.uint32)
    return Case(inputs={"src": data}, expected={"dst": data})


def copy_request(nbytes: int, *, multiprocessors: int = DEFAULT_SMS, threads: int = 512,
                 **measuring) -> EvaluationRequest:
    """Copy `nbytes` (a multiple of 16) with a grid-stride vector copy; bytes moved = 2 * nbytes.
    `measuring`: the request's measuring choices (EvaluationRequest's fields: l2, pdl, ...)."""
    if nbytes % 16:
        raise ValueError("the copy probe moves whole 16-byte vectors")
    words = nbytes // 4
    params = [
        Param("src", "in", "uint32", (words,)),
        Param("dst", "out", "uint32", (words,)),
        Param("n", "scalar", "uint64", value=nbytes // 16),
    ]
    blocks = min(multiprocessors * 8, -(-(nbytes // 16) // threads))  # every vector its own thread when it fits
    problem = Problem(params=params, make_case=functools.partial(_copy_case, words),
                      bytes_moved=2 * nbytes, label=f"copy {nbytes} B")
    return EvaluationRequest(source=COPY_SOURCE, kernel="copy_vec4",
                             launch=LaunchShape(grid=(blocks,), block=(threads,)),
                             problem=problem, label=problem.label, **measuring)


def _mix_case(units: int, reads: int, writes: int, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 2**32, size=(reads, units, 4), dtype=np.uint32)
    acc = np.bitwise_xor.reduce(src, axis=0)
    dst = np.stack([acc + np.array([j, 0, 0, 0], dtype=np.uint32) for j in range(writes)])
    return Case(inputs={"src": src.reshape(-1)}, expected={"dst": dst.reshape(-1)})


def mix_requests(read_bytes: int, write_bytes: int, reads: int, writes: int, *,
                 multiprocessors: int = DEFAULT_SMS, **measuring) -> list[EvaluationRequest]:
    """The mix READS:WRITES over about `read_bytes + write_bytes` (whole 16-byte vectors), once
    per launch the ceiling tries (mix_grids); the faster is the probe's time."""
    units = max(1, -(-(read_bytes + write_bytes) // (16 * (reads + writes))))
    params = [
        Param("src", "in", "uint32", (units * reads * 4,)),
        Param("dst", "out", "uint32", (units * writes * 4,)),
        Param("units", "scalar", "uint64", value=units),
    ]
    problem = Problem(params=params, make_case=functools.partial(_mix_case, units, reads, writes),
                      bytes_moved=16 * units * (reads + writes), label=f"mix {reads}:{writes} {16 * units * (reads + writes)} B")
    return [EvaluationRequest(source=MIX_SOURCE, kernel="mix_vec4", options=mix_options(None, reads, writes),
                              launch=LaunchShape(grid=(blocks,), block=(MIX_THREADS,)), problem=problem,
                              label=f"{problem.label} grid {blocks}", **measuring)
            for blocks in mix_grids(units, multiprocessors)]


def _flag_case(seed: int) -> Case:
    flag = np.array([seed], dtype=np.int32)
    return Case(inputs={"flag": flag}, expected={})


def empty_request(**measuring) -> EvaluationRequest:
    """One block, one warp, no memory traffic: the cost of a graph-replayed launch. `measuring`:
    the request's measuring choices (EvaluationRequest's fields: stream_timing, pdl, ...)."""
    problem = Problem(params=[Param("flag", "in", "int32", (1,))], make_case=_flag_case,
                      bytes_moved=0, label="empty kernel")
    return EvaluationRequest(source=EMPTY_SOURCE, kernel="empty",
                             launch=LaunchShape(grid=(1,), block=(32,)), problem=problem,
                             label=problem.label, min_launches=200, **measuring)


def record_launch_floor(worker, store: ResultsStore) -> float | None:
    """The launch floor (an empty kernel graph-replayed: empty_request) measured on `worker`'s GPU,
    and kept with `store`'s measurements as that GPU's device facts (ResultsStore.device_facts)
    beside its multiprocessor count, so that a replay of the store judges shapes against it as the
    run did; None where it could not be measured (nothing is recorded then)."""
    result = worker.evaluate(empty_request(stream_timing=False))
    if result.status != "ok" or result.timing is None:
        return None
    facts = {"launch_floor_us": result.timing.median_us,
             "launch_floor_from": f"measured with these results, {date.today().isoformat()}"}
    if worker.device.get("multiprocessors"):
        facts["multiprocessors"] = worker.device["multiprocessors"]
    store.record_device_facts(worker.device["name"], facts)
    return result.timing.median_us
