"""The rule-based planner picks the next round from measured facts, and search_rounds follows it
without measuring anything twice."""

from __future__ import annotations

import itertools

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.search.hardware import Occupancy
from astra_kernels.tools.search.rounds import plan_round
from astra_kernels.tools.toolchain.resources import ResourceUsage
from astra_kernels.tools.search.runner import Budget, Trial, search_rounds
from astra_kernels.tools.search.space import FeasibleConfig

SMS = 132
TOKENS = 16


def candidate(threads: int, chunks: int, warps: int = 32) -> FeasibleConfig:
    return FeasibleConfig(
        config={"THREADS": threads, "CHUNKS": chunks}, grid=(TOKENS, chunks, 1), block=(threads, 1, 1),
        shared_bytes=0, options=CompileOptions(), resources=ResourceUsage(registers=32),
        occupancy=Occupancy(blocks_per_sm=1, warps_per_sm=warps, fraction=warps / 64, limiter="blocks"),
    )


SPACE = [candidate(t, c) for t, c in itertools.product((64, 128, 256, 512, 1024), (1, 2, 4, 8, 16))]


def trial(config, us, fraction) -> Trial:
    return Trial(config=config, status="ok" if us else "mismatch", median_us=us, fraction_of_copy_bandwidth=fraction)


def test_an_idle_gpu_well_under_bandwidth_asks_for_more_ctas():
    measured = [trial({"THREADS": 256, "CHUNKS": 1}, 5.0, 0.2), trial({"THREADS": 128, "CHUNKS": 1}, 6.0, 0.15)]
    plan = plan_round(SPACE, measured, SMS)
    assert plan.action == "narrow"
    assert plan.candidates and all(c["CHUNKS"] > 1 for c in plan.candidates)
    assert "16 CTAs on 132 SMs" in plan.reasons[0]


def test_near_the_bandwidth_it_narrows_around_what_the_best_agree_on():
    measured = [trial({"THREADS": 256, "CHUNKS": 16}, 2.0, 0.9), trial({"THREADS": 256, "CHUNKS": 8}, 2.05, 0.88),
                trial({"THREADS": 64, "CHUNKS": 1}, 9.0, 0.2)]
    plan = plan_round(SPACE, measured, SMS)
    assert plan.action == "narrow"
    assert {c["THREADS"] for c in plan.candidates} == {128, 256, 512}
    assert {c["CHUNKS"] for c in plan.candidates} == {4, 8, 16}
    assert {"THREADS": 256, "CHUNKS": 16} not in plan.candidates
    assert "THREADS in [128, 256, 512]" in plan.reasons[0]


def test_few_resident_warps_ask_for_more():
    space = [candidate(t, 16, warps=t // 32) for t in (64, 128, 256, 512, 1024)]
    plan = plan_round(space, [trial({"THREADS": 128, "CHUNKS": 16}, 3.0, 0.5)], SMS)
    assert {c["THREADS"] for c in plan.candidates} == {256, 512, 1024}
    assert "warps resident" in plan.reasons[0]


def test_nothing_correct_widens_and_nothing_untried_stops():
    plan = plan_round(SPACE, [trial({"THREADS": 64, "CHUNKS": 1}, None, None)], SMS)
    assert plan.action == "widen" and len(plan.candidates) == len(SPACE) - 1
    everything = [trial(c.config, 1.0 + i, 0.9) for i, c in enumerate(SPACE)]
    assert plan_round(SPACE, everything, SMS).action == "stop"


def test_a_rule_with_nothing_left_widens():
    measured = [trial({"THREADS": 256, "CHUNKS": 16}, 5.0, 0.2)]
    small = [candidate(256, 16), candidate(64, 1)]  # more CTAs than 256 are not on offer
    plan = plan_round(small, measured, SMS)
    assert plan.action == "widen" and plan.candidates == [{"THREADS": 64, "CHUNKS": 1}]


def fake_time(config) -> tuple[float, float]:
    """Fewer CTAs than SMs is slow; 256 threads is best."""
    ctas = TOKENS * config["CHUNKS"]
    us = 2.0 + 20.0 / min(ctas, SMS) * 16 + abs(config["THREADS"] - 256) / 256
    return us, 2.0 / us


def run_rounds(evaluated: list, strategy="random", budget=Budget(evaluations=15), start=None):
    class Result:
        def __init__(self, us, fraction):
            self.status, self.message, self.fraction_of_copy_bandwidth = "ok", "", fraction
            self.timing = type("T", (), {"median_us": us})()

    def evaluate(config, **labels):
        evaluated.append(config)
        return Result(*fake_time(config)), False

    return search_rounds(strategy, [c.config for c in SPACE], lambda c: c, evaluate, budget, rounds=3,
                         plan=lambda trials: plan_round(SPACE, trials, SMS), seed=1, start=start)


def test_search_rounds_follows_the_planner_within_the_budget():
    evaluated = []
    outcome = run_rounds(evaluated)
    assert len(evaluated) == 15 and len({tuple(sorted(c.items())) for c in evaluated}) == 15
    assert outcome.rounds[0].evaluated == 5 and len(outcome.rounds) >= 3
    assert outcome.rounds[0].action == "first" and all(r.reasons for r in outcome.rounds[1:])
    assert outcome.best_us == min(fake_time(c)[0] for c in evaluated)
    assert outcome.best_config["CHUNKS"] >= 8  # the planner steered toward more CTAs
    again = []
    assert run_rounds(again).trials == outcome.trials  # seeded: a resumed run retraces the path


def test_an_unlimited_budget_tries_everything_in_the_first_round_and_stops():
    evaluated = []
    outcome = run_rounds(evaluated, strategy="exhaustive", budget=Budget())
    assert len(evaluated) == len(SPACE) and len(outcome.rounds) == 1


def test_start_configurations_are_measured_first_and_count_toward_the_best():
    # The best of the space (256 threads, 16 CTAs a row) as an earlier table's pick, and one the
    # space no longer has: the first is measured before the search and stays the best; the other
    # is skipped, never measured.
    best, gone = {"THREADS": 256, "CHUNKS": 16}, {"THREADS": 96, "CHUNKS": 1}
    evaluated = []
    outcome = run_rounds(evaluated, budget=Budget(evaluations=6), start=[best, gone])
    assert evaluated[0] == best and gone not in evaluated
    assert outcome.rounds[0].action == "start" and outcome.rounds[0].evaluated == 1
    assert any("not among the candidates" in r and "96" in r for r in outcome.rounds[0].reasons)
    assert outcome.best_config == best and outcome.best_us == fake_time(best)[0]
    # the start round is counted against the budget, and nothing is measured twice
    assert len(outcome.trials) == 6 and len({tuple(sorted(c.items())) for c in evaluated}) == 6
    everything = []
    run_rounds(everything, strategy="exhaustive", budget=Budget(), start=[best])
    assert len(everything) == len(SPACE) and everything[0] == best
