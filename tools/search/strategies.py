"""Search strategies: they only propose configurations; a runner evaluates them.

A strategy sees the candidates that survived the pruned space (tools/search/space.py) and the scores of
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
        self._untried = {_key(c): c for c in candidates}
        self._scores: dict[tuple, float] = {}
        self._frontier: list[dict[str, int]] = []

    def _neighbours(self, config: dict[str, int]) -> list[dict[str, int]]:
        mine = _key(config)
        return [c for k, c in self._untried.items()
                if sum(a != b for a, b in zip(k, mine)) == 1]

    def ask(self) -> dict[str, int] | None:
        while self._frontier:
            config = self._frontier.pop(0)
            if _key(config) in self._untried:
                return self._untried.pop(_key(config))
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
            self._scores[_key(config)] = score


class ModelBased:
    """Optuna's Tree-structured Parzen Estimator through its ask-and-tell interface.

    Each parameter is offered to the sampler as the index into its sorted values, so the model
    sees that 128 threads lie between 64 and 256. The pruned space has holes the sampler cannot
    know of (constraints, hardware limits), so a proposal outside it is recorded as failed and
    the nearest untried candidate (fewest index steps) is evaluated and told to the model under
    its own parameters: every proposal is evaluable and none repeats. Failures are told as
    failed trials, which TPE leaves out of its model.
    """

    name = "tpe"

    def __init__(self, candidates: Sequence[dict[str, int]], seed: int = 0, startup: int = 10):
        import optuna  # imported here: a second of import time that only this strategy needs

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._rng = random.Random(seed)
        self._untried = {_key(c): c for c in candidates}
        names = sorted({name for c in candidates for name in c})
        self._values = {n: sorted({c[n] for c in candidates}) for n in names}
        self._distributions = {n: optuna.distributions.IntDistribution(0, len(v) - 1)
                               for n, v in self._values.items() if len(v) > 1}
        self._study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=startup, multivariate=True))
        self._asked: dict[tuple, object] = {}

    def _index(self, config: dict[str, int]) -> dict[str, int]:
        return {n: self._values[n].index(config[n]) for n in self._distributions}

    def _nearest(self, wanted: dict[str, int]) -> dict[str, int]:
        def steps(config):
            return sum(abs(i - wanted[n]) for n, i in self._index(config).items())
        best = min(map(steps, self._untried.values()))
        return self._rng.choice([c for c in self._untried.values() if steps(c) == best])

    def ask(self) -> dict[str, int] | None:
        if not self._untried:
            return None
        trial = self._study.ask(self._distributions)
        config = self._nearest(trial.params)
        if self._index(config) != trial.params:
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
            trial = None
        self._asked[_key(config)] = trial
        return self._untried.pop(_key(config))

    def tell(self, config: dict[str, int], score: float | None) -> None:
        trial = self._asked.pop(_key(config), None)
        state = self._optuna.trial.TrialState
        if trial is not None:
            self._study.tell(trial, score, state=state.COMPLETE if score is not None else state.FAIL)
        elif score is not None:
            self._study.add_trial(self._optuna.trial.create_trial(
                params=self._index(config), distributions=self._distributions, value=score))


def _key(config: dict[str, int]) -> tuple:
    return tuple(sorted(config.items()))


STRATEGIES = {s.name: s for s in (Exhaustive, RandomSearch, HillClimb, ModelBased)}


def make_strategy(name: str, candidates: Sequence[dict[str, int]], seed: int = 0) -> Strategy:
    try:
        return STRATEGIES[name](candidates, seed)
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
