"""Search strategies: they only propose configurations; a runner evaluates them.

A strategy sees the candidates that survived the pruned space (tools/space.py) and the scores of
what it proposed before (per-launch microseconds, or None for a failure), and answers with the
next configuration, or None when it has nothing more to propose. Budgets live in the runner.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol


class Strategy(Protocol):
    name: str

    def ask(self) -> dict[str, int] | None: ...

    def tell(self, config: dict[str, int], score: float | None) -> None: ...


class Exhaustive:
    """Every candidate once, in the order given (the space's order)."""

    name = "exhaustive"

    def __init__(self, candidates: Sequence[dict[str, int]], seed: int = 0):
        self._queue = list(candidates)

    def ask(self) -> dict[str, int] | None:
        return self._queue.pop(0) if self._queue else None

    def tell(self, config: dict[str, int], score: float | None) -> None:
        pass


class RandomSearch(Exhaustive):
    """Every candidate once, in a seeded random order: a fair baseline for smarter strategies."""

    name = "random"

    def __init__(self, candidates: Sequence[dict[str, int]], seed: int = 0):
        super().__init__(candidates)
        random.Random(seed).shuffle(self._queue)


class HillClimb:
    """Greedy local search over the candidates: from the best so far, try its untried neighbours
    (configurations that differ in one parameter), best-first; restart from a random untried
    candidate when a neighbourhood is exhausted. Cheap and often within a few percent of the
    exhaustive best on these smooth, low-dimensional spaces."""

    name = "hillclimb"

    def __init__(self, candidates: Sequence[dict[str, int]], seed: int = 0):
        self._rng = random.Random(seed)
        self._untried = {self._key(c): c for c in candidates}
        self._scores: dict[tuple, float] = {}
        self._frontier: list[dict[str, int]] = []

    @staticmethod
    def _key(config: dict[str, int]) -> tuple:
        return tuple(sorted(config.items()))

    def _neighbours(self, config: dict[str, int]) -> list[dict[str, int]]:
        mine = self._key(config)
        return [c for k, c in self._untried.items()
                if sum(a != b for a, b in zip(k, mine)) == 1]

    def ask(self) -> dict[str, int] | None:
        while self._frontier:
            config = self._frontier.pop(0)
            if self._key(config) in self._untried:
                return self._untried.pop(self._key(config))
        if not self._untried:
            return None
        if self._scores:
            best = min(self._scores, key=self._scores.get)
            neighbours = self._neighbours(dict(best))
            if neighbours:
                self._frontier = neighbours
                return self.ask()
        key = self._rng.choice(list(self._untried))
        return self._untried.pop(key)

    def tell(self, config: dict[str, int], score: float | None) -> None:
        if score is not None:
            self._scores[self._key(config)] = score


STRATEGIES = {s.name: s for s in (Exhaustive, RandomSearch, HillClimb)}


def make_strategy(name: str, candidates: Sequence[dict[str, int]], seed: int = 0) -> Strategy:
    try:
        return STRATEGIES[name](candidates, seed)
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
