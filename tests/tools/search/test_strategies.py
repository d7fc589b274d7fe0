"""Strategies propose every candidate once, respect their order, and hill-climbing finds a
minimum quickly on a smooth space."""

from __future__ import annotations

import itertools

import pytest

from astra_kernels.tools.search.strategies import make_strategy

SPACE = [{"A": a, "B": b} for a, b in itertools.product(range(8), range(8))]


def cost(config) -> float:
    return (config["A"] - 5) ** 2 + (config["B"] - 2) ** 2 + 1.0


def drain(strategy, failing=()):
    seen = []
    while (config := strategy.ask()) is not None:
        seen.append(config)
        strategy.tell(config, None if config in failing else cost(config))
    return seen


@pytest.mark.parametrize("name", ["exhaustive", "random", "hillclimb", "tpe"])
def test_every_candidate_exactly_once(name):
    seen = drain(make_strategy(name, SPACE, seed=3))
    assert sorted(map(str, seen)) == sorted(map(str, SPACE))


def test_exhaustive_keeps_order_and_random_is_seeded():
    assert drain(make_strategy("exhaustive", SPACE)) == SPACE
    assert drain(make_strategy("random", SPACE, 1)) == drain(make_strategy("random", SPACE, 1))
    assert drain(make_strategy("random", SPACE, 1)) != drain(make_strategy("random", SPACE, 2))


def test_hillclimb_reaches_the_minimum_early():
    seen = drain(make_strategy("hillclimb", SPACE, seed=0), failing=[{"A": 4, "B": 2}])
    first = next(i for i, c in enumerate(seen) if c == {"A": 5, "B": 2})
    assert first < len(SPACE) // 2


def test_tpe_is_seeded_and_finds_the_minimum_of_a_space_with_holes():
    holes = [c for c in SPACE if (c["A"] + c["B"]) % 3 != 0 or c == {"A": 5, "B": 2}]
    runs = [drain(make_strategy("tpe", holes, seed=7)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert sorted(map(str, runs[0])) == sorted(map(str, holes))
    first = runs[0].index({"A": 5, "B": 2})
    assert first < len(holes) // 2, first


def test_tpe_survives_failures_and_a_single_valued_parameter():
    space = [dict(c, C=1) for c in SPACE]
    seen = drain(make_strategy("tpe", space, seed=0), failing=space[::2])
    assert len(seen) == len(space)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="exhaustive"):
        make_strategy("annealing", SPACE)
