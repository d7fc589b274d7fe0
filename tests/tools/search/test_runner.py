"""The runner with a scripted evaluator: budgets, failures, and re-runs answered by the store."""

from __future__ import annotations

import itertools

import pytest

from astra_kernels import suite
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, StoredEvaluator, search
from astra_kernels.tools.search.strategies import make_strategy
from astra_kernels.tools.toolchain.timing import Timing

FOLDER = suite.load("silu_and_mul")
SHAPE = {"T": 16, "D": 4096}
SPACE = [{**FOLDER.template.default, "THREADS": t, "UNROLL": u}
         for t, u in itertools.product((64, 128, 256, 512), (1, 2, 4))]


class ScriptedWorker:
    """Times each configuration by a formula; THREADS=64 with UNROLL=4 "crashes"."""

    device = {"name": "Scripted GPU", "arch": "sm_90"}

    def __init__(self):
        self.calls = 0

    def evaluate(self, request):
        self.calls += 1
        d = request.options.defines
        if d["THREADS"] == 64 and d["UNROLL"] == 4:
            return EvaluationResult(status="crashed", message="illegal address", fatal=True)
        us = 2.0 + abs(d["THREADS"] - 256) / 256 + abs(d["UNROLL"] - 2) * 0.1
        timing = Timing(median_us=us, min_us=us, max_us=us, spread=0.0, samples_us=[us],
                        launches_per_replay=100, input_sets=100, method="graph")
        return EvaluationResult(status="ok", timing=timing, fraction_of_copy_bandwidth=0.1)


def request_for(config):
    return suite.request(FOLDER, "template", SHAPE, "bf16", config=config, arch="sm_90")


@pytest.fixture
def store(tmp_path):
    with ResultsStore(tmp_path / "results.sqlite") as s:
        yield s


def test_exhaustive_finds_the_best_and_never_picks_a_failure(store):
    worker = ScriptedWorker()
    outcome = search(make_strategy("exhaustive", SPACE), request_for, StoredEvaluator(worker, store),
                     Budget())
    assert outcome.stopped_by == "exhausted" and len(outcome.trials) == len(SPACE)
    assert outcome.best_config["THREADS"] == 256 and outcome.best_config["UNROLL"] == 2
    assert outcome.best_us == pytest.approx(2.0)
    assert any(t.status == "crashed" for t in outcome.trials)
    assert store.count() == len(SPACE)


def test_a_rerun_evaluates_nothing_twice_and_ends_the_same(store):
    first_worker, second_worker = ScriptedWorker(), ScriptedWorker()
    first = search(make_strategy("random", SPACE, 4), request_for, StoredEvaluator(first_worker, store),
                   Budget(evaluations=7))
    second = search(make_strategy("random", SPACE, 4), request_for, StoredEvaluator(second_worker, store),
                    Budget(evaluations=7))
    assert first.stopped_by == "evaluations" and first_worker.calls == 7
    assert second_worker.calls == 0 and all(t.reused for t in second.trials)
    assert second.best_config == first.best_config and second.best_us == first.best_us


def test_an_interrupted_search_resumes_where_it_stopped(store):
    partial = ScriptedWorker()
    search(make_strategy("exhaustive", SPACE), request_for, StoredEvaluator(partial, store), Budget(evaluations=5))
    resumed = ScriptedWorker()
    outcome = search(make_strategy("exhaustive", SPACE), request_for, StoredEvaluator(resumed, store), Budget())
    assert resumed.calls == len(SPACE) - 5
    assert outcome.fresh_evaluations == len(SPACE) - 5


def test_seconds_budget_stops_the_search(store):
    outcome = search(make_strategy("exhaustive", SPACE), request_for, StoredEvaluator(ScriptedWorker(), store),
                     Budget(seconds=0.0))
    assert outcome.stopped_by == "seconds" and not outcome.trials and outcome.best_config is None


def test_at_least_evaluations_outlast_the_seconds(store):
    evaluator = StoredEvaluator(ScriptedWorker(), store)
    outcome = search(make_strategy("exhaustive", SPACE), request_for, evaluator, Budget(seconds=0.0, at_least=4))
    assert len(outcome.trials) == 4 and outcome.stopped_by == "seconds"


def test_at_least_is_shared_by_the_rounds(store):
    from astra_kernels.tools.search.runner import RoundPlan
    from astra_kernels.tools.search.runner import search_rounds

    def plan(trials):
        return RoundPlan(action="widen", candidates=[c for c in SPACE if c not in [t.config for t in trials]],
                         reasons=["the rest"])

    outcome = search_rounds("exhaustive", SPACE, request_for, StoredEvaluator(ScriptedWorker(), store),
                            Budget(seconds=0.0, at_least=6), rounds=3, plan=plan)
    assert len(outcome.trials) == 6 and [r.evaluated for r in outcome.rounds] == [2, 2, 2]


class _LuckyWorker:
    """The search's measurements carry noise that favoured one configuration; a re-timing shows its
    real time. `retimed[config key]` is what a re-timing measures (a status string to fail it)."""

    device = {"name": "Scripted GPU", "arch": "sm_90"}

    SEARCHED = {64: 1.0, 128: 1.01, 256: 1.015, 512: 3.0}  # 64 drew lucky noise in the search; all but 512 contend

    def __init__(self, retimed: dict[int, float | str], searched: dict[int, float] | None = None,
                 spread: float | dict[int, float] = 0.0):
        self.retimed, self.requests = retimed, []
        self.searched, self.spread = searched or self.SEARCHED, spread

    def evaluate(self, request):
        self.requests.append(request)
        threads = request.options.defines["THREADS"]
        if request.retime:
            value = self.retimed[threads]
            if isinstance(value, str):
                return EvaluationResult(status=value, message=value)
            us = value
        else:
            us = self.searched[threads]
        spread = self.spread.get(threads, 0.0) if isinstance(self.spread, dict) else self.spread
        timing = Timing(median_us=us, min_us=us, max_us=us, spread=spread, samples_us=[us],
                        launches_per_replay=100, input_sets=100, method="graph")
        return EvaluationResult(status="ok", timing=timing)


def _retime_search(worker, store):
    from astra_kernels.tools.search.runner import retime_finalists

    evaluator = StoredEvaluator(worker, store)
    space = [{**FOLDER.template.default, "THREADS": t} for t in (64, 128, 256, 512)]
    request_for = lambda c: suite.request(FOLDER, "template", SHAPE, "bf16", "default", c)  # noqa: E731
    outcome = search(make_strategy("exhaustive", space), request_for, evaluator, Budget())
    assert outcome.best_config["THREADS"] == 64
    return retime_finalists(outcome, request_for, evaluator), evaluator


def test_the_winner_is_named_by_re_timing_the_finalists_interleaved(tmp_path):
    worker = _LuckyWorker({64: 1.03, 128: 1.012, 256: 1.02})
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
        assert outcome.best_config["THREADS"] == 128 and outcome.best_us == 1.012
        assert [f.config["THREADS"] for f in outcome.finalists] == [64, 128, 256]  # the 3 fastest, not 512
        retimes = [(r.options.defines["THREADS"], r.retime) for r in worker.requests if r.retime]
        assert retimes == [(64, 1), (128, 1), (256, 1), (64, 2), (128, 2), (256, 2)]  # interleaved rounds
        assert "re-timed" in outcome.retime_note
        again = _LuckyWorker({})  # a re-run: the store answers the re-timings too
        outcome, _ = _retime_search(again, store)
        assert again.requests == [] and outcome.best_config["THREADS"] == 128


def test_a_finalist_that_fails_its_re_timing_is_out(tmp_path):
    worker = _LuckyWorker({64: "incorrect", 128: 1.015, 256: 1.012})
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
    assert outcome.best_config["THREADS"] == 256 and "1 failed when re-timed" in outcome.retime_note


def test_a_replay_without_re_timings_keeps_the_search_s_winner(tmp_path):
    """A replay answers the search from its recording and refuses the re-timings ("unrecorded"):
    the search's winner and time stand, as the recording had them."""
    worker = _LuckyWorker({64: "unrecorded", 128: "unrecorded", 256: "unrecorded"})
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
        assert store.count() == 4  # the refusals are not stored as measurements
    assert outcome.best_config["THREADS"] == 64 and outcome.best_us == 1.0
    assert "not re-timed (unrecorded)" in outcome.retime_note


def test_only_the_configurations_within_the_margin_of_the_best_are_re_timed(tmp_path):
    """A configuration whose search time lies beyond RETIME_MARGIN of the best's (and beyond the
    timings' spread) has never overturned the order in the recorded sweeps: it is not re-timed; where
    none contends, nothing is, and the search's winner and time stand, with the note saying why."""
    from astra_kernels.tools.search.runner import RETIME_MARGIN

    assert RETIME_MARGIN == 0.02
    worker = _LuckyWorker({64: 1.03, 128: 1.012}, searched={64: 1.0, 128: 1.01, 256: 1.05, 512: 3.0})
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
    assert [f.config["THREADS"] for f in outcome.finalists] == [64, 128]  # 256, 5% off, is not re-timed
    assert outcome.best_config["THREADS"] == 128 and "2 finalists re-timed" in outcome.retime_note
    alone = _LuckyWorker({}, searched={64: 1.0, 128: 1.03, 256: 1.05, 512: 3.0})
    with ResultsStore(tmp_path / "alone.sqlite") as store:
        outcome, _ = _retime_search(alone, store)
    assert not [r for r in alone.requests if r.retime] and outcome.finalists == []
    assert outcome.best_config["THREADS"] == 64 and outcome.best_us == 1.0
    assert ("not re-timed: the next configuration's search time is 3.00% above the best's, beyond the 2.00% it "
            "would have to lie within") in outcome.retime_note


def test_a_spread_wider_than_the_margin_widens_it_up_to_its_cap(tmp_path):
    """Noisy timings (a spread of 6%) let a configuration 5% off the best contend; a spread of 50% (an
    outlying sample) widens it only to RETIME_SPREAD_CAP, and the finalists are the fastest below it."""
    from astra_kernels.tools.search.runner import RETIME_SPREAD_CAP

    assert RETIME_SPREAD_CAP == 0.10
    capped = _LuckyWorker({64: 1.1, 128: 1.09}, searched={64: 1.0, 128: 1.08, 256: 1.2, 512: 3.0}, spread=0.5)
    with ResultsStore(tmp_path / "capped.sqlite") as store:
        outcome, _ = _retime_search(capped, store)
    assert [f.config["THREADS"] for f in outcome.finalists] == [64, 128]  # 256, 20% off, is beyond 10%
    worker = _LuckyWorker({64: 1.08, 128: 1.06, 256: 1.051}, searched={64: 1.0, 128: 1.03, 256: 1.05, 512: 3.0},
                          spread=0.06)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
    assert [f.config["THREADS"] for f in outcome.finalists] == [64, 128, 256]
    assert outcome.best_config["THREADS"] == 256 and outcome.best_us == 1.051


def test_only_the_best_s_spread_widens_it_and_the_finalists_are_the_fastest_below_it(tmp_path):
    """A slower configuration's own noisy timing does not make it contend (a spread is one outlier
    away from large), and none after the first that does not contend is taken: 128 (3% off, quiet)
    ends the finalists, so 256 (5% off, with a 6% spread of its own) is not re-timed."""
    worker = _LuckyWorker({}, searched={64: 1.0, 128: 1.03, 256: 1.05, 512: 3.0}, spread={256: 0.06})
    with ResultsStore(tmp_path / "r.sqlite") as store:
        outcome, _ = _retime_search(worker, store)
    assert outcome.finalists == [] and not [r for r in worker.requests if r.retime]
    assert "3.00% above the best's, beyond the 2.00%" in outcome.retime_note


def test_a_re_timing_keys_apart_from_the_search_s_measurement_and_only_then():
    import dataclasses

    from astra_kernels.tools.measuring.results import evaluation_key

    request = suite.request(FOLDER, "template", SHAPE, "bf16", "default", FOLDER.template.default)
    assert request.retime == 0
    once, twice = (dataclasses.replace(request, retime=r) for r in (1, 2))
    keys = {evaluation_key(r, "GPU") for r in (request, once, twice)}
    assert len(keys) == 3
