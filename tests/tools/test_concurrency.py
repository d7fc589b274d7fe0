"""tools/concurrency.py's SmallestFirst: one holder at a time, the smallest waiting job next (what
orders a cluster's space compiles), and a waiter that gives up leaves the queue to the others."""

from __future__ import annotations

import threading
import time

import pytest

from astra_kernels.tools.concurrency import SmallestFirst


def _wait_for(predicate, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_one_holder_at_a_time_and_the_smallest_waiting_goes_next():
    gate = SmallestFirst()
    order: list[int] = []
    holding = threading.Event()
    release = threading.Event()
    inside = []

    def job(size: int) -> None:
        with gate(size):
            inside.append(size)
            assert len(inside) == 1  # never two at once
            order.append(size)
            if size == 50:  # the first holder waits until every other job is queued
                holding.set()
                release.wait(10)
            inside.remove(size)

    first = threading.Thread(target=job, args=(50,))
    first.start()
    assert holding.wait(10)
    others = [threading.Thread(target=job, args=(size,)) for size in (900, 10, 300, 10)]
    for thread in others:
        thread.start()
    _wait_for(lambda: len(gate._waiting) == 4)
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert order == [50, 10, 10, 300, 900]


def test_a_waiter_that_is_interrupted_leaves_the_queue():
    gate = SmallestFirst()
    release = threading.Event()
    held = threading.Event()
    done: list[int] = []

    def holder() -> None:
        with gate(5):
            held.set()
            release.wait(10)

    def waiter(size: int) -> None:
        with gate(size):
            done.append(size)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)

    class Interrupted(Exception):
        pass

    original = gate._changed.wait
    calls = []

    def interrupted_wait(*args, **kwargs):  # the first wait of the smallest waiter is interrupted
        if threading.current_thread().name == "smallest" and not calls:
            calls.append(1)
            raise Interrupted
        return original(*args, **kwargs)

    gate._changed.wait = interrupted_wait
    failed = []

    def smallest() -> None:
        try:
            waiter(1)
        except Interrupted:
            failed.append(1)

    small = threading.Thread(target=smallest, name="smallest")
    small.start()
    small.join(10)
    assert failed == [1] and gate._waiting == []
    large = threading.Thread(target=waiter, args=(100,))
    large.start()
    release.set()
    large.join(10)
    thread.join(10)
    assert done == [100]  # the interrupted one's ticket did not block the next


@pytest.mark.parametrize("size", [0, 3])
def test_a_lone_job_goes_at_once(size):
    gate = SmallestFirst()
    with gate(size):
        pass
    assert gate._waiting == [] and not gate._held
