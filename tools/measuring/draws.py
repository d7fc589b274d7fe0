"""The seeded draws a worker checks candidates on: each drawn once, kept, and drawn ahead.

Every configuration of a search is checked on the same two draws (EvaluationRequest.seeds): the
inputs `make_inputs` draws and the float64 reference of them, computed in NumPy on one core. At a
large shape that takes seconds, so draws are kept, the most recently used first, up to
cases_kept_bytes() (and always the last two used).

A tuner knows which problems come next, and drawing them one after another held back a whole
sweep: of a silu_and_mul sweep's 476 s on an H200 (2026-11-28), 276 s were its 82 baselines'
checks, nearly all of it drawing, while the GPU idled. `prefetch` has the listed draws made ahead
on this host's other cores while the GPU measures (NumPy's random fills and ufuncs release the
GIL, so threads draw side by side), no further ahead than the memory they may take: the draws
made ahead and not yet used stay within half the kept budget, and those being drawn, whose
float64 temporaries are a few times the draw's own size (PEAK_FACTOR), within the whole of it.
The draws are the same either way: a draw's seed, not its thread, decides its values.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path

from .problem import Case, Problem

_CASES: OrderedDict[tuple, Case] = OrderedDict()
# The draws kept, by size: a worker of a cluster gets the candidates of every shape in flight
# interleaved (26 shapes at once on 2026-11-25's two-H100 run), and keeping only the last problem's
# two draws redrew and recomputed the float64 reference for 424 of 426 evaluations; with every
# problem kept, 26. The budget is a share of the host's memory, a quarter of it split among the
# host's GPUs (each has a worker), and at least 4 GiB: a fixed 4 GiB was less than the two draws
# of silu_and_mul 16384x28672 alone (5.6 GB), so a worker interleaving it with other shapes drew it
# again, seconds each time. The last two draws used are kept whatever their size.
CASES_KEPT_BYTES: int | None = None  # None: cases_kept_bytes() decides
CASES_HOST_SHARE = 4
HOST_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU of this host, visible here or not
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory.max")
_CASES_KEPT_AT_LEAST = 2
# A draw's peak memory while it is made, over its kept size: silu_and_mul's reference holds the
# float64 copy of its inputs and two or three float64 temporaries of its output's size.
PEAK_FACTOR = 4
MAX_DRAWING_THREADS = 8

_LOCK = threading.Condition()
_DRAWING: dict[tuple, Future] = {}  # key -> the draw being made (by an evaluation or ahead)
_AHEAD: dict[tuple, int] = {}  # key -> kept bytes: drawn (or being drawn) ahead, not used yet
_generation = 0  # a new prefetch list retires the drawing threads of the last


def cases_kept_bytes() -> int:
    """CASES_KEPT_BYTES, or this host's memory (or its container's limit) over CASES_HOST_SHARE times
    its GPUs (the driver's list of the host's GPUs, whatever CUDA_VISIBLE_DEVICES lets this process
    see), at least 4 GiB."""
    if CASES_KEPT_BYTES is not None:
        return CASES_KEPT_BYTES
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 4 << 30
    try:  # a container's limit, where it has one (cgroup v2), is the host's memory to this worker
        limit = CGROUP_MEMORY.read_text().strip()
        memory = min(memory, int(limit)) if limit.isdigit() else memory
    except OSError:
        pass
    return max(4 << 30, memory // (CASES_HOST_SHARE * host_gpus()))


def host_gpus() -> int:
    return max(1, len(list(HOST_GPUS.iterdir())) if HOST_GPUS.is_dir() else 1)


def case_key(problem: Problem, seed: int) -> tuple:
    return (problem.label, tuple(problem.params), repr(problem.make_case), seed)


def case_bytes(case: Case) -> int:
    return sum(a.nbytes for a in case.inputs.values()) + sum(a.nbytes for a in case.expected.values())


def draw_bytes(problem: Problem) -> int:
    """What a draw of `problem` will keep, before it is made: its inputs as the kernel takes them
    and a float64 reference of each output."""
    inputs = sum(p.nbytes for p in problem.buffers if p.role in ("in", "inout"))
    outputs = sum(math.prod(p.shape) * 8 for p in problem.buffers if p.role in ("out", "inout"))
    return inputs + outputs


def seeded_case(problem: Problem, seed: int) -> Case:
    """The seeded draw and its reference, computed once per problem and seed in this worker (or
    awaited, where a thread is drawing it ahead); nothing mutates them."""
    key = case_key(problem, seed)
    with _LOCK:
        _AHEAD.pop(key, None)  # used now: room for the next draw ahead
        _LOCK.notify_all()
        if key in _CASES:
            _CASES.move_to_end(key)
            return _CASES[key]
        pending = _DRAWING.get(key)
    if pending is not None:
        return pending.result()
    return _draw(problem, seed, key)


def _draw(problem: Problem, seed: int, key: tuple) -> Case:
    """Make the draw (one thread per key: a second caller awaits the first's), keep it, and trim
    what is kept to the budget."""
    with _LOCK:
        if key in _CASES:
            return _CASES[key]
        if (pending := _DRAWING.get(key)) is not None:
            mine = False
        else:
            pending, mine = Future(), True
            _DRAWING[key] = pending
    if not mine:
        return pending.result()
    try:
        case = problem.make_case(seed)
        problem.validate_case(case)
    except BaseException as exc:
        with _LOCK:
            _DRAWING.pop(key, None)
            _AHEAD.pop(key, None)
            _LOCK.notify_all()
        pending.set_exception(exc)
        raise
    with _LOCK:
        _DRAWING.pop(key, None)
        _CASES[key] = case
        _trim()
        _LOCK.notify_all()
    pending.set_result(case)
    return case


def _trim() -> None:
    """Let go of the least recently used draws beyond the budget (under _LOCK): never one drawn
    ahead and not yet used, and never the last two used."""
    held = sum(case_bytes(c) for c in _CASES.values())
    budget = cases_kept_bytes()
    used = [k for k in _CASES if k not in _AHEAD]
    for key in used[:max(0, len(used) - _CASES_KEPT_AT_LEAST)]:
        if held <= budget:
            break
        held -= case_bytes(_CASES.pop(key))


def prefetch(device, items: list[tuple[Problem, int]], threads: int | None = None) -> int:
    """Draw `items` (problem, seed), in their order, on background threads of this worker, as far
    ahead of their use as the memory allows (see the module docstring); the list replaces any
    earlier one, whose draws in flight or still listed stay counted against the memory. Returns at once with the number of threads; `device` is unused (the worker's
    call() passes it). The threads are daemons: they end with the worker, whatever they hold."""
    global _generation
    threads = threads or max(1, min(MAX_DRAWING_THREADS, (os.cpu_count() or 2) // (2 * host_gpus())))
    listed = {case_key(problem, seed) for problem, seed in items}
    with _LOCK:
        _generation += 1
        generation = _generation
        # a draw ahead the new list still holds, or one being drawn, stays counted (and kept from
        # _trim): a cluster's tunes send a worker several lists within seconds (docs/scaling.md)
        for key in [k for k in _AHEAD if k not in listed and k not in _DRAWING]:
            del _AHEAD[key]
        _LOCK.notify_all()
    queue = list(items)
    taken = threading.Lock()

    def next_item() -> tuple[Problem, int] | None:
        with taken:
            return queue.pop(0) if queue else None

    def drawer() -> None:
        while (item := next_item()) is not None:
            problem, seed = item
            key = case_key(problem, seed)
            size = draw_bytes(problem)
            budget = cases_kept_bytes()
            with _LOCK:
                while True:
                    if generation != _generation:
                        return
                    if key in _CASES or key in _DRAWING:
                        break
                    waiting = sum(_AHEAD.values())
                    drawing = sum(_AHEAD[k] for k in _DRAWING if k in _AHEAD) * PEAK_FACTOR
                    if not _AHEAD or (waiting + size <= budget // 2 and drawing + size * PEAK_FACTOR <= budget):
                        _AHEAD[key] = size
                        break
                    _LOCK.wait(1.0)
                if key not in _AHEAD:
                    continue
            try:
                _draw(problem, seed, key)
            except BaseException:  # the evaluation that needs it draws it again and says why
                pass

    for _ in range(threads):
        threading.Thread(target=drawer, name="astra-draw-ahead", daemon=True).start()
    return threads
