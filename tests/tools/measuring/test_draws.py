"""Draws made ahead (draws.prefetch): the same values as drawn on demand, each made once, and no
further ahead than the memory budget allows."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from astra_kernels.tools.measuring import draws, probes


@pytest.fixture(autouse=True)
def fresh_draws(monkeypatch):
    monkeypatch.setattr(draws, "_CASES", type(draws._CASES)())
    monkeypatch.setattr(draws, "_DRAWING", {})
    monkeypatch.setattr(draws, "_AHEAD", {})
    yield
    draws.prefetch(None, [])  # retire the test's drawing threads


def counted(words: int, made: list, gate: threading.Event | None = None):
    """A copy problem whose draws are counted (and, with `gate`, held until it is set)."""
    problem = probes.copy_request(words).problem
    original = problem.make_case

    def make_case(seed: int):
        if gate is not None:
            gate.wait(10)
        made.append((words, seed))
        return original(seed)

    return dataclasses.replace(problem, make_case=make_case)


def settle(condition, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_prefetched_draws_are_the_ones_drawn_on_demand_and_made_once():
    made: list = []
    sizes = [1 << n for n in (10, 11, 12)]
    items = [(words, counted(words, made), seed) for words in sizes for seed in (1, 2)]
    assert draws.prefetch(None, [(p, seed) for _, p, seed in items], threads=3) == 3
    assert settle(lambda: len(made) == len(items))
    for words, problem, seed in items:
        case = draws.seeded_case(problem, seed)
        fresh = probes.copy_request(words).problem.make_case(seed)
        assert np.array_equal(case.inputs["src"], fresh.inputs["src"])
    assert sorted(made) == sorted((words, seed) for words, _, seed in items)  # none drawn twice


def test_an_evaluation_needing_a_draw_being_made_ahead_waits_for_it_rather_than_drawing_again():
    made: list = []
    gate = threading.Event()
    problem = counted(1 << 12, made, gate)
    draws.prefetch(None, [(problem, 1)], threads=1)
    assert settle(lambda: draws.case_key(problem, 1) in draws._DRAWING)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(draws.seeded_case(problem, 1)))
    waiter.start()
    time.sleep(0.1)
    assert not got  # waiting on the draw ahead
    gate.set()
    waiter.join(10)
    assert got and made == [(1 << 12, 1)]


def test_draws_ahead_stay_within_half_the_budget_until_used(monkeypatch):
    made: list = []
    problems = [counted(1 << 14, made) for _ in range(6)]
    size = draws.draw_bytes(problems[0])
    assert size >= draws.case_bytes(problems[0].make_case(7))  # the estimate bounds the kept size (float64 outputs)
    made.clear()
    monkeypatch.setattr(draws, "CASES_KEPT_BYTES", 4 * size)  # half of it: two draws ahead
    draws.prefetch(None, [(p, 1) for p in problems], threads=4)
    assert settle(lambda: len(made) == 2)
    time.sleep(0.3)
    assert len(made) == 2  # no further ahead
    draws.seeded_case(problems[0], 1)  # used: room for one more
    assert settle(lambda: len(made) == 3)
    time.sleep(0.2)
    assert len(made) == 3


def test_a_new_list_retires_the_last():
    made: list = []
    gate = threading.Event()
    first = [counted(1 << 10, made, gate) for _ in range(4)]
    draws.prefetch(None, [(p, 1) for p in first], threads=1)
    assert settle(lambda: len(draws._DRAWING) == 1)
    second = counted(1 << 11, made)
    draws.prefetch(None, [(second, 1)], threads=1)
    gate.set()
    assert settle(lambda: (1 << 11, 1) in made)
    time.sleep(0.2)
    assert len([m for m in made if m[0] == 1 << 10]) == 1  # the one in hand finished, no more of the old list


def test_a_draw_that_fails_ahead_fails_again_for_its_evaluation():
    problem = probes.copy_request(1 << 10).problem

    def broken(seed):
        raise ValueError("reference.py: no such output")

    problem = dataclasses.replace(problem, make_case=broken)
    draws.prefetch(None, [(problem, 1)], threads=1)
    assert settle(lambda: not draws._DRAWING and not draws._AHEAD)
    with pytest.raises(ValueError, match="no such output"):
        draws.seeded_case(problem, 1)
