"""`astra tune`'s orchestration with a scripted GPU: pruning, search per shape, the general
configuration, the dispatch table, the output folder, and a re-run that measures nothing."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from astra_kernels import cli, suite
from astra_kernels.defaults import TIMING_NOISE
from astra_kernels.jobs import checking, tune_report, tuning
from astra_kernels.suite import tuned_tables
from astra_kernels.tools.toolchain.driver import gpu_available
from astra_kernels.tools.errors import AstraError, NoGpuError
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, StoredEvaluator

from support.scripted_gpu import FOLDER, SHAPES, ScriptedWorker, row_sample

ROOT = Path(__file__).resolve().parents[2]


def run(store, worker, **kw):
    hooks = {k: kw.pop(k) for k in ("parallel", "progress", "compiling", "searched", "compile_timeout_s") if k in kw}
    return tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", configs=row_sample(40, seed=2), seed=2, **kw), worker,
                       StoredEvaluator(worker, store), **hooks)


def test_tune_reports_each_shape_and_writes_outputs(tmp_path):
    worker = ScriptedWorker()
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, worker, strategy="exhaustive")
    assert [s.label for s in report.shapes] == ["16x4096", "64x8192"]
    for s in report.shapes:
        assert s.space_total == 40 and s.space_candidates == len(s.search.trials) > 0
        assert s.search.best_config["VEC"] == 8
        assert s.speedup and s.speedup > 0
    assert report.general is not None and set(report.general_us) == {"16x4096", "64x8192"}
    config, why, source = report.dispatch.pick({"T": 16, "D": 4096})
    assert config == report.shapes[0].search.best_config and why == "tuned" and source == "template"
    config, why, _ = report.dispatch.pick({"T": 5, "D": 1002})  # D = 2 mod 8: VEC=8 cannot run there
    assert config["VEC"] <= 2 and "VEC" in config
    written = tune_report.write_outputs(FOLDER, report, tmp_path / "out")
    assert all(p.exists() for p in written)
    best = json.loads((tmp_path / "out" / "best.json").read_text())
    assert best["per_shape"]["16x4096"]["config"]["VEC"] == 8
    assert "| 16x4096 | 40 |" in (tmp_path / "out" / "report.md").read_text()


class SlowSearch(ScriptedWorker):
    """Each template evaluation takes `seconds` of wall time (the baseline none)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def evaluate(self, request):
        if not request.label.endswith("baseline"):
            time.sleep(self.seconds)
        return super().evaluate(request)


def test_the_report_says_where_the_tunes_wall_time_went(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, SlowSearch(0.01), strategy="exhaustive", budget=Budget(evaluations=6))
    seconds = report.seconds
    assert set(seconds) == set(tuning.TunePhases.NAMES)
    searched = sum(len(s.search.trials) for s in report.shapes)
    assert seconds["search"] >= 0.01 * searched  # the sleeping evaluations are the search's
    assert seconds["search"] > seconds["baseline"]
    assert seconds["tune"] >= sum(v for k, v in seconds.items() if k != "tune") * 0.99  # one shape at a time
    line = report.time_spent()
    assert line.startswith("wall seconds by phase: at each shape, summed over them, baseline ") and "the whole tune" in line
    assert line in tune_report.render_markdown(report)
    assert tuning.TuneReport.model_validate_json(report.model_dump_json()).seconds == seconds


class TimedBaseline(ScriptedWorker):
    """The baseline takes `us` (at the shapes whose label contains `where`, or everywhere)."""

    def __init__(self, us: float, where: str = ""):
        super().__init__()
        self.us, self.where = us, where

    def evaluate(self, request):
        result = super().evaluate(request)
        if request.label.endswith("baseline") and self.where in request.label:
            result.timing = result.timing.model_copy(update={"median_us": self.us})
        return result


def test_the_table_keeps_the_baseline_where_nothing_beat_it(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, TimedBaseline(0.1, "64x8192"), strategy="exhaustive")
    at64 = report.shapes[1]
    assert at64.dispatch_from == "baseline" and at64.dispatch_us == 0.1
    assert report.dispatch.pick({"T": 64, "D": 8192}) == ({}, "tuned: the baseline", "baseline")
    assert report.dispatch.pick({"T": 128, "D": 8192}).source == "baseline"  # nearest tuned shape is 64x8192
    assert report.dispatch.pick({"T": 16, "D": 4096}).source == "template"
    assert "| 0.10 (baseline) |" in tune_report.render_markdown(report)


def test_each_entry_is_the_fastest_measured_at_its_shape(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, TimedBaseline(100.0), strategy="exhaustive")
    shape = report.shapes[0]
    own, faster = shape.search.best_config, {**shape.search.best_config, "UNROLL": 4}
    entry = tuning._entry(shape, [])
    assert entry.config == own and shape.dispatch_from == "search" and entry.source == "template"
    # a winner of another shape measured faster here (a search starved of time at a large shape)
    entry = tuning._entry(shape, [(shape.search.best_us / 2, faster, "64x8192")])
    assert entry.config == faster and shape.dispatch_from == "the winner at 64x8192"
    assert entry.median_us == shape.dispatch_us == shape.search.best_us / 2
    # nothing measured beats the baseline
    slow = shape.model_copy(update={"baseline_us": shape.search.best_us / 4})
    entry = tuning._entry(slow, [(shape.search.best_us / 2, faster, "64x8192")])
    assert entry.source == "baseline" and entry.config == {} and slow.dispatch_from == "baseline"
    # a win inside the run-to-run spread keeps the baseline; one past it takes the template
    near = shape.model_copy(update={"baseline_us": shape.search.best_us * (1 + TIMING_NOISE / 2)})
    assert tuning._entry(near, []).source == "baseline"
    clear = shape.model_copy(update={"baseline_us": shape.search.best_us * (1 + 2 * TIMING_NOISE)})
    assert tuning._entry(clear, []).config == own


def test_the_winners_cross_measurement_stops_at_its_deadline(tmp_path, monkeypatch):
    """Under a time budget the general phase gets the searches' total time; where it runs out the
    report says so, the general configuration is the best winner measured everywhere, and a re-run
    on the same store (every result stored) completes it without measuring anything."""
    clock = [0.0]
    monkeypatch.setattr(tuning, "_clock", lambda: clock[0])

    class Slow(ScriptedWorker):
        def evaluate(self, request):  # every measurement takes 1 s of the patched clock
            clock[0] += 1.0
            return super().evaluate(request)

    with ResultsStore(tmp_path / "r.sqlite") as store:
        worker = Slow()
        report = run(store, worker, strategy="random", budget=Budget(evaluations=4, seconds=0.25, at_least=4))
        assert report.general_cut and "winners measured at every shape" in report.general_cut
        assert "Note: the winners' cross-measurement ran out of time" in tune_report.render_markdown(report)
        again = Slow()
        resumed = run(store, again, strategy="random", budget=Budget(evaluations=4))
    assert again.calls == 0
    assert resumed.general_cut is None and resumed.general is not None
    assert set(resumed.general_us) == {"16x4096", "64x8192"}


def test_rerun_measures_nothing_and_budget_limits_each_shape(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        first = ScriptedWorker()
        run(store, first, strategy="random", budget=Budget(evaluations=5))
        again = ScriptedWorker()
        report = run(store, again, strategy="random", budget=Budget(evaluations=5))
    assert again.calls == 0
    assert all(len(s.search.trials) == 5 and s.search.stopped_by == "evaluations" for s in report.shapes)


def test_auto_search_in_rounds_with_verification_and_charts(tmp_path):
    worker = ScriptedWorker()
    odd = FOLDER.spec.shapes["odd"]
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, worker, budget=Budget(evaluations=12), verify=odd)
    for s in report.shapes:
        assert s.search.strategy == "tpe" and len(s.search.trials) == 12
        assert len(s.search.rounds) >= 3 and all(r.reasons for r in s.search.rounds[1:])
    assert [v.label for v in report.verified] == [FOLDER.spec.label(shape) for shape in odd]
    assert not report.verification_failures
    assert all(v.median_us and v.baseline_us for v in report.verified)
    written = tune_report.write_outputs(FOLDER, report, tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## What the planner did between rounds" in text and "round 2 (" in text
    assert f"{len(odd)} of {len(odd)} shapes correct" in text
    for svg in [p for p in written if p.suffix == ".svg"]:
        root = ElementTree.parse(svg).getroot()
        assert root.tag.endswith("svg") and len(list(root.iter("{http://www.w3.org/2000/svg}text"))) > 5


def test_a_failing_pick_is_reported_and_fails_the_command(tmp_path):
    class BrokenAtOddWidths(ScriptedWorker):
        def evaluate(self, request):
            result = super().evaluate(request)
            if "1002" in request.problem.label and "CHUNKS" in request.options.defines:
                return EvaluationResult(status="incorrect", message="out: 3 of 5010 elements differ")
            return result

    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, BrokenAtOddWidths(), strategy="exhaustive", verify=[{"T": 3, "D": 1002}])
    assert [v.status for v in report.verification_failures] == ["incorrect"]
    assert "1 of 1" not in tune_report.render_markdown(report) and "0 of 1 shapes correct" in tune_report.render_markdown(report)


def test_generated_launcher_carries_the_dispatch_table(tmp_path):
    worker = ScriptedWorker()
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, worker, strategy="exhaustive")
    tune_report.write_outputs(FOLDER, report, tmp_path / "out")
    spec = importlib.util.spec_from_file_location("launcher", tmp_path / "out" / "launcher.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    assert launcher.TABLE == report.dispatch
    if not gpu_available():
        with pytest.raises(NoGpuError):
            launcher.load()


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_tune_without_gpu_says_what_can_run(capsys):
    assert cli.main(["tune", "silu_and_mul"]) == 2
    out = capsys.readouterr().out
    assert "no GPU here" in out and "astra space" in out and "astra tune silu_and_mul --replay recorded" in out


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_verify_needs_a_tuned_folder_and_a_gpu(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path)]) == 2
    assert "verify takes the --out folder" in capsys.readouterr().out
    worker = ScriptedWorker()
    with ResultsStore(tmp_path / "r.sqlite") as store:
        tune_report.write_outputs(FOLDER, run(store, worker, strategy="exhaustive"), tmp_path / "out")
    assert cli.main(["verify", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert "no GPU here" in out and f"astra export {tmp_path / 'out'}" in out and "astra report" in out


def _old_table(entries, general=None):
    """A table from before the template gained FLAT and STREAM (and with a parameter it has since lost)."""
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable
    return DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", general=general,
                         entries=[DispatchEntry(shape=s, config=c, source=src) for s, c, src in entries])


OLD_PICK = {"THREADS": 128, "VEC": 4, "CHUNKS": 16, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "GONE": 3}


def test_a_start_table_gives_its_pick_as_the_template_now_reads_it():
    table = _old_table([({"T": 16, "D": 4096}, OLD_PICK, "template"), ({"T": 64, "D": 8192}, {}, "baseline")])
    [config] = tuning.start_configs(table, FOLDER, {"T": 16, "D": 4096}, sms=132, arch="sm_90")
    # the parameters gained since at their defaults; the one the template lost dropped
    assert config == {**{k: v for k, v in OLD_PICK.items() if k != "GONE"}, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
    # where the table runs the baseline, its nearest template pick (a search has to start somewhere)
    assert tuning.start_configs(table, FOLDER, {"T": 64, "D": 8192}, sms=132, arch="sm_90") == [config]
    assert tuning.start_configs(None, FOLDER, {"T": 16, "D": 4096}, sms=132, arch="sm_90") == []
    only_baseline = _old_table([({"T": 16, "D": 4096}, {}, "baseline")])
    assert tuning.start_configs(only_baseline, FOLDER, {"T": 16, "D": 4096}, sms=132, arch="sm_90") == []
    # a value the template no longer offers: that pick is left out, not a crash
    dropped = _old_table([({"T": 16, "D": 4096}, {**OLD_PICK, "THREADS": 96}, "template")])
    assert tuning.start_configs(dropped, FOLDER, {"T": 16, "D": 4096}, sms=132, arch="sm_90") == []


def test_tune_measures_the_start_tables_pick_first_and_keeps_it_where_nothing_beats_it(tmp_path):
    # The scripted GPU is fastest at VEC=8, many CHUNKS, UNROLL=1: the start pick below is that
    # best, and a two-evaluation search of a sample must not lose it.
    best = {"THREADS": 64, "VEC": 8, "CHUNKS": 16, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 1}
    table = _old_table([({"T": 16, "D": 4096}, best, "template")])
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES[:1], "bf16",
                                                configs=[{**best, "FLAT": 0, "STREAM": 0, "STATIC_D": 0, "THREADS": 256, "UNROLL": 4},
                                                         {**best, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}],
                                                strategy="random", budget=Budget(evaluations=2), start=table),
                             ScriptedWorker(), StoredEvaluator(ScriptedWorker(), store))
    search = report.shapes[0].search
    assert search.rounds[0].action == "start" and search.trials[0].config == {**best, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
    assert report.dispatch.entries[0].config == {**best, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}


def test_a_sample_of_the_space_still_measures_the_start_tables_pick_first(tmp_path):
    """`--sample N --start shipped`: the table's pick is measured first though the seeded sample does
    not hold it (before, it was dropped as "not among the candidates here", so a re-tune on a sample
    could ship a slower table than the one it started from)."""
    best = {"THREADS": 64, "VEC": 8, "CHUNKS": 16, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
    assert best not in FOLDER.template.sample_configs(4, 0)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES[:1], "bf16", sample=4, seed=0, strategy="random",
                                                budget=Budget(evaluations=2),
                                                start=_old_table([({"T": 16, "D": 4096}, best, "template")])),
                             ScriptedWorker(), StoredEvaluator(ScriptedWorker(), store))
    shape = report.shapes[0]
    assert shape.space_total > 4 and shape.search.rounds[0].action == "start"  # the sample, the pick, the seeds
    assert shape.search.trials[0].config == best and report.dispatch.entries[0].config == best
    assert tuning.with_starts([best], [best, {**best, "VEC": 4}, {**best, "VEC": 4}]) == [best, {**best, "VEC": 4}]


def test_the_report_names_the_start_round():
    from astra_kernels.tools.search.runner import RoundSummary, SearchOutcome

    report = tuning.TuneReport(kernel="silu_and_mul", dtype="bf16", variant="default", strategy="random",
                               device="Scripted GPU", arch="sm_90", date="2026-11-26")
    search = SearchOutcome(strategy="random", rounds=[
        RoundSummary(index=-1, action="start", pool=1, evaluated=1, best_us=1.5,
                     reasons=["given configurations, measured before the search"]),
        RoundSummary(index=0, action="first", pool=40, evaluated=5, best_us=1.2)])
    report.shapes = [tuning.ShapeResult(shape={"T": 16, "D": 4096}, label="16x4096", space_total=40,
                                        space_after_constraints=40, space_after_compile=40, space_candidates=40, pruned_reasons=[],
                                        baseline_us=2.0, baseline_status="ok", search=search)]
    text = tune_report.render_markdown(report)
    assert "- 16x4096 start (1 candidates, 1 evaluated, best 1.50 us): given configurations" in text
    assert "- 16x4096 round 1 (first, 40 candidates, 5 evaluated" in text


def test_the_specs_seeds_are_points_of_its_template_at_each_shape():
    """SGLang's norms as seeds: one to four 16-byte vectors a thread, a CTA per row, at every H that
    splits into such threads, each with the row length compiled in and unchecked (STATIC_ROW 2, as
    SGLang builds them) and read at run time (0); none at a width whose thread count the template
    does not offer."""
    from astra_kernels import suite

    rmsnorm = suite.load("rmsnorm")

    def seeds(shape, dtype="bf16"):
        return tuning.seed_configs(rmsnorm, suite.environment(rmsnorm.spec, shape, dtype, "default", 132, "sm_90"))

    found = seeds({"T": 128, "H": 4096})
    assert [(c["ROW_THREADS"], c["ITEMS"], c["VEC"], c["PRELOAD_W"], c["ROWS"], c["STATIC_ROW"]) for c in found] == [
        (512, 1, 8, 1, 1, 2), (512, 1, 8, 1, 1, 0), (256, 2, 8, 1, 1, 2), (256, 2, 8, 1, 1, 0),
        (128, 4, 8, 1, 1, 2), (128, 4, 8, 1, 1, 0)]
    assert [c["ROW_THREADS"] for c in seeds({"T": 1, "H": 8192})] == [1024, 1024, 512, 512, 256, 256]
    assert seeds({"T": 128, "H": 11008}) == []  # 1376 threads a row: not a value of ROW_THREADS
    fused = suite.load("fused_add_rmsnorm").spec.seeds
    assert fused[len(fused) - len(rmsnorm.spec.seeds):] == rmsnorm.spec.seeds  # after its own two-pass seeds


def test_fused_add_rmsnorm_seeds_torch_compiles_two_pass_form_first_at_every_dtype():
    """fused_add_rmsnorm measures Inductor's form first (512 threads a row, RELOAD, hints), in both
    register caps, then rmsnorm's row seeds: a start round cut by --budget keeps the two-pass ones."""
    from astra_kernels import suite

    fused = suite.load("fused_add_rmsnorm")
    for dtype in ("bf16", "fp16"):
        for shape in ({"T": 16384, "H": 4096}, {"T": 1, "H": 8192}):
            found = tuning.seed_configs(fused, suite.environment(fused.spec, shape, dtype, "default", 132, "sm_90"))
            assert [(c["ROW_THREADS"], c["RELOAD"], c["ITEMS"], c["HINT"], c["REG_CAP"], c["STATIC_ROW"], c["VEC"])
                    for c in found[:2]] == [(512, 1, 0, 1, 32, 1, 8), (512, 1, 0, 1, 128, 0, 8)]
            assert all(c["RELOAD"] == 0 for c in found[2:]) and len(found) == 8


def test_a_seed_that_is_no_point_of_the_template_is_left_out():
    from astra_kernels.suite.schema import Seed

    env = {"T": 16, "D": 4096, "ELEM_BYTES": 2, "SMS": 132, "SM": 90}
    seeded = FOLDER.spec.model_copy(update={"seeds": [
        Seed(note="a parameter this template lacks", config={"ROW_THREADS": "D / 8"}),
        Seed(note="a value it does not offer", config={"THREADS": "D // 3"}),
        Seed(note="not a whole number here", config={"THREADS": "(D + 1) / 32"}),  # 128.03: not 128
        Seed(note="a division by zero here", config={"THREADS": "D // (T - 16)"}),
        Seed(note="one a user has", config={"THREADS": "D / 32", "VEC": "16 / ELEM_BYTES"}),
        Seed(note="the same point again", config={"THREADS": "128", "VEC": "8"}),
    ]})
    folder = dataclasses.replace(FOLDER, spec=seeded)
    mine = {**FOLDER.template.default, "THREADS": 128, "VEC": 8}
    found = tuning.seed_configs(folder, env)
    assert found == [mine, mine] and all(type(v) is int for v in found[0].values())  # the search measures it once


def test_a_seed_with_an_unknown_symbol_is_refused_when_the_spec_loads():
    from astra_kernels.suite.schema import Seed

    with pytest.raises(ValueError, match=r"seed 'mine' sets THREADS from unknown symbol\(s\) \['N'\]"):
        FOLDER.spec.model_validate({**FOLDER.spec.model_dump(), "seeds": [Seed(note="mine", config={"THREADS": "N * 2"})]})


def test_tune_measures_the_seeds_first_after_the_start_tables_pick_and_within_the_budget(tmp_path):
    """The spec's seeds are measured in the round before the search, after `--start`'s pick, each
    once; without a start table too; and a budget smaller than them caps that round (the table's
    pick first), leaving the rest to the search."""
    from astra_kernels.suite.schema import Seed

    best = {"THREADS": 64, "VEC": 8, "CHUNKS": 16, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
    slow, slower = {**best, "UNROLL": 2}, {**best, "UNROLL": 4}
    seeds = [Seed(note=f"unroll {c['UNROLL']}", config={k: str(v) for k, v in c.items()}) for c in (best, slow)]
    folder = dataclasses.replace(FOLDER, spec=FOLDER.spec.model_copy(update={"seeds": seeds}))

    def tuned(path, budget, start=None):
        with ResultsStore(tmp_path / path) as store:
            report = tuning.tune(tuning.TuneRequest(folder, SHAPES[:1], "bf16", configs=[slower, slow, best],
                                                    strategy="random", budget=Budget(evaluations=budget), start=start),
                                 ScriptedWorker(), StoredEvaluator(ScriptedWorker(), store))
        return report.shapes[0].search

    search = tuned("a.sqlite", 3)  # no start table: the seeds alone, in their order
    assert search.rounds[0].action == "start" and search.rounds[0].evaluated == 2
    assert [t.config for t in search.trials] == [best, slow, slower] and search.best_config == best
    search = tuned("b.sqlite", 3, start=_old_table([({"T": 16, "D": 4096}, slow, "template")]))
    assert [t.config for t in search.trials[:2]] == [slow, best]  # the table's pick, then the seed not yet there
    search = tuned("c.sqlite", 1, start=_old_table([({"T": 16, "D": 4096}, slower, "template")]))
    assert [t.config for t in search.trials] == [slower]  # the budget: the table's pick only
    assert any("2 more left to the search: the budget is 1" in r for r in search.rounds[0].reasons)
    plain = dataclasses.replace(FOLDER, spec=FOLDER.spec.model_copy(update={"seeds": [
        Seed(note="not a candidate of this sample", config={"THREADS": "1024"})]}))
    with ResultsStore(tmp_path / "d.sqlite") as store:
        report = tuning.tune(tuning.TuneRequest(plain, SHAPES[:1], "bf16", configs=[best], strategy="random",
                                                budget=Budget(evaluations=1)),
                             ScriptedWorker(), StoredEvaluator(ScriptedWorker(), store))
    assert [r.action for r in report.shapes[0].search.rounds] == ["first"]  # no empty start round


def _shape_results(tokens: list[int]) -> list[tuning.ShapeResult]:
    from astra_kernels.tools.search.runner import SearchOutcome

    return [tuning.ShapeResult(shape={"T": t, "D": 4096}, label=f"{t}x4096", space_total=1,
                               space_after_constraints=1, space_after_compile=1, space_candidates=1,
                               pruned_reasons=[], baseline_us=1.0, baseline_status="ok",
                               search=SearchOutcome(strategy="random", trials=[]))
            for t in tokens]


def test_under_an_evaluation_budget_each_shape_measures_its_nearest_winners_and_one_general_candidate():
    """--budget B bounds the cross-measurement like the searches: at each shape the winners of the
    B shapes nearest it, plus everywhere the most central shape's winner (the general
    configuration's candidate), instead of every winner at every shape."""
    tokens = [1, 4, 16, 64, 256, 1024, 4096]
    shapes = _shape_results(tokens)
    winners = {s.label: {"VEC": i} for i, s in enumerate(shapes)}
    full = tuning.cross_plan(winners, shapes, ["T", "D"], None)
    assert full.bound is None and all(len(at) == len(shapes) for _, _, at in full.measurements)
    assert tuning.cross_plan(winners, shapes, ["T", "D"], 6).bound is None  # B >= the others: all of them
    plan = tuning.cross_plan(winners, shapes, ["T", "D"], 2)
    at = {owner: {s.label for s in where} for _, owner, where in plan.measurements}
    assert at["64x4096"] == {s.label for s in shapes}  # the central shape's winner, at every shape
    assert plan.bound and "64x4096's winner" in plan.bound and "up to 2 other shapes' winners" in plan.bound
    for shape in shapes:
        others = {owner for owner, where in at.items() if shape.label in where and owner != shape.label}
        assert len(others - {"64x4096"}) <= 2
    assert at["1x4096"] == {"1x4096", "4x4096", "16x4096"}  # its own, and the two nearest to it
    assert at["4096x4096"] == {"1024x4096", "256x4096", "4096x4096"}
    shared = dict(winners, **{"4x4096": {"VEC": 0}})  # two shapes with one winner: measured once per shape
    plan = tuning.cross_plan(shared, shapes, ["T", "D"], 2)
    assert sum(1 for config, _, _ in plan.measurements if config == {"VEC": 0}) == 1

    # the general candidate must run everywhere: the most central that does
    plan = tuning.cross_plan(winners, shapes, ["T", "D"], 2, runs_at=lambda config, shape: config["VEC"] != 3)
    assert "16x4096's winner" in plan.bound or "256x4096's winner" in plan.bound


ODD = {"1x4097", "3x1002", "7x1000", "5x12"}  # silu_and_mul's odd set


class Recording(ScriptedWorker):
    """Keeps every request it is sent."""

    def __init__(self):
        super().__init__()
        self.requests = []

    def evaluate(self, request):
        self.requests.append(request)
        return super().evaluate(request)


def test_every_configuration_the_table_runs_is_checked_at_the_odd_shapes_in_every_dtype_and_variant(tmp_path):
    worker = Recording()
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, worker, strategy="exhaustive")
    configs = checking.table_configs(report.dispatch)
    entries = [("template", e.config) for e in report.dispatch.entries if e.source == "template"]
    assert {tuple(c.items()) for _, c in configs} == {tuple(c.items()) for _, c in entries + [("", report.general)]}
    assert len(configs) == len({tuple(c.items()) for _, c in configs})  # each once
    rows = report.config_checks
    assert {r.shape for r in rows} == ODD
    assert {(r.dtype, r.variant) for r in rows} == {(d, v) for d in FOLDER.spec.dtypes for v in FOLDER.spec.variants}
    for odd in ODD:  # at each: every configuration of the table, and what pick() runs there, in all 9 pairs
        here = [r for r in rows if r.shape == odd]
        picked = report.dispatch.pick(dict(zip(("T", "D"), map(int, odd.split("x")))))
        runs = {(s, tuple(c.items())) for s, c in configs} | {(picked.source, tuple(picked.config.items()))}
        assert {(r.which, tuple(r.config.items())) for r in here} == runs and len(here) == len(runs) * 9
    assert any(r.status == "ok" and r.config["VEC"] <= 2 for r in rows if r.shape == "3x1002")  # the pick there
    # a configuration its constraints refuse somewhere is "excluded" there (pick() passes it over):
    # 16-byte loads of 8 fp32 values are refused
    assert all(r.status == "excluded" for r in rows if r.dtype == "fp32" and r.config["VEC"] == 8)
    ran = [r for r in rows if r.status != "excluded"]
    assert ran and all(r.status == "ok" for r in ran) and not report.config_check_failures
    checks = [q for q in worker.requests if any(f" {label} " in q.problem.label for label in ODD)]
    assert len(checks) == len(ran) and all(q.check and not q.time for q in checks)  # checked, not timed
    assert "## The table's configurations away from the tuned shapes" in tune_report.render_markdown(report)


class WrongInFp16GeluAtOddWidths(ScriptedWorker):
    """Correct wherever the search times it (bf16), wrong in another dtype and variant at odd widths:
    what a template that special-cases what it was tuned on looks like."""

    def evaluate(self, request):
        words = request.problem.label.split()  # kernel, shape, dtype, and a variant other than the default
        if words[2:] == ["fp16", "gelu"] and words[1] in ("3x1002", "7x1000"):
            return EvaluationResult(status="incorrect", message="out: 12 of 1000 elements differ")
        return super().evaluate(request)


def test_a_configuration_wrong_away_from_the_tuned_shapes_fails_the_tune_and_keeps_the_earlier_result(tmp_path):
    import argparse

    from astra_kernels.cli.commands import tune as tune_command

    out = tmp_path / "out"
    out.mkdir()
    (out / "dispatch.json").write_text("the earlier result\n")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, WrongInFp16GeluAtOddWidths(), strategy="exhaustive")
    failures = report.config_check_failures
    assert failures and {(r.dtype, r.variant) for r in failures} == {("fp16", "gelu")}
    assert {r.shape for r in failures} <= {"3x1002", "7x1000"}
    markdown = tune_report.render_markdown(report)
    assert "this table must not ship" in markdown and "fp16, gelu" in markdown
    args = argparse.Namespace(json=False)
    assert tune_command.finish(args, FOLDER, report, out, tmp_path / "r.sqlite") == 1
    assert (out / "dispatch.json").read_text() == "the earlier result\n"


def test_a_replay_checks_only_what_its_recording_holds(tmp_path):
    class Replay(ScriptedWorker):
        device = {**ScriptedWorker.device, "replay": "recording.sqlite"}

        def answers(self, request):
            return not any(f" {odd} " in request.problem.label for odd in ODD)

    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run(store, Replay(), strategy="exhaustive")
    assert {r.status for r in report.config_checks} == {"unrecorded", "excluded"}
    assert not report.config_check_failures


def test_a_local_worker_is_told_each_draw_ahead_once_in_the_order_the_tune_needs_it(tmp_path, monkeypatch):
    """tune() hands a local evaluation worker the draws its searches will check on, shape by shape,
    before the first evaluation (tools/measuring/draws.py draws them on other cores), then those of
    the cross-measurement not already stored; a replay or a cluster's view is told nothing."""
    from astra_kernels.tools.measuring import draws

    class Local(ScriptedWorker):
        told: list = []

        def call(self, function, *args):
            assert function is draws.prefetch
            self.told.append([(problem.label, seed) for problem, seed in args[0]])

    monkeypatch.setattr(tuning, "EvaluationWorker", Local)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        run(store, Local(), strategy="random", budget=Budget(evaluations=3))
    first = Local.told[0]
    assert len(first) == len(set(first))  # each draw once
    labels = list(dict.fromkeys(label for label, _ in first))
    assert labels == [f"silu_and_mul {FOLDER.spec.label(s)} bf16" for s in SHAPES]  # the searches' order
    assert {seed for _, seed in first} >= {1, 2}  # the checks' two draws, then the timing's
    assert len(Local.told) <= 2  # and at most once more, for the cross-measurement's unstored
    with ResultsStore(tmp_path / "r.sqlite") as store:
        Local.told = []
        run(store, ScriptedWorker(), strategy="random", budget=Budget(evaluations=3))
    assert Local.told == []  # not a local worker: nothing drawn ahead


def test_a_clusters_view_is_handed_the_same_draws_to_share_out(tmp_path):
    """A cluster's workers of one kind (KindView) get the same list through their prefetch, which
    WorkerPool.prefetch shares out, each problem to one worker (tests/tools/cluster/test_matching.py)."""

    class View(ScriptedWorker):
        told: list = []

        def prefetch(self, items):
            self.told.append([(problem.label, seed) for problem, seed in items])
            return len(items)

    with ResultsStore(tmp_path / "r.sqlite") as store:
        run(store, View(), strategy="random", budget=Budget(evaluations=3))
    first = View.told[0]
    assert len(first) == len(set(first))
    assert list(dict.fromkeys(label for label, _ in first)) == [f"silu_and_mul {FOLDER.spec.label(s)} bf16" for s in SHAPES]


def test_a_tune_onto_a_table_keeps_its_entries_where_it_tuned_nothing(tmp_path):
    """`--onto`: the table written extends the one given. Its entries at shapes not tuned now stay
    (with the named sources they run, a template entry as the template now reads it), a shape tuned
    now takes the new pick, its general configuration and the older date stay, and the report says
    how many entries were kept; a table of another regime, kernel or dtype is refused, not mixed in."""
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

    old = {"THREADS": 128, "VEC": 4, "CHUNKS": 16, "ROWS": 1, "UNROLL": 2, "FAST_MATH": 1, "FLAT": 0, "STREAM": 0, "STATIC_D": 0}
    older = {k: v for k, v in old.items() if k not in ("FLAT", "STREAM")} | {"GONE": 3}  # before FLAT and STREAM
    rewrite = FOLDER.source_of("baseline").source  # a model's rewrite, say
    base = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", general=old,
                         sources={"model": rewrite}, tuned_on="Scripted GPU (sm_90)", tuned_date="2026-11-20",
                         entries=[DispatchEntry(shape={"T": 16, "D": 4096}, config=old),  # tuned again below
                                  DispatchEntry(shape={"T": 1, "D": 14336}, config=older),
                                  DispatchEntry(shape={"T": 2, "D": 14336}, config={**old, "THREADS": 96}),  # no longer offered
                                  DispatchEntry(shape={"T": 8, "D": 18944}, config={}, source="model")])
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = tuning.tune(tuning.TuneRequest(FOLDER, SHAPES[:1], "bf16", configs=row_sample(12, seed=2), seed=2,
                                                strategy="exhaustive", onto=base),
                             ScriptedWorker(), StoredEvaluator(ScriptedWorker(), store))
    table = report.dispatch
    assert [FOLDER.spec.label(e.shape) for e in table.entries] == ["16x4096", "1x14336", "8x18944"]  # base's order
    entries = {FOLDER.spec.label(e.shape): e for e in table.entries}
    assert report.kept_entries == 2
    assert entries["16x4096"].config == report.shapes[0].search.best_config != old
    assert entries["1x14336"].config == old and entries["8x18944"].source == "model"
    assert table.sources == {"model": rewrite} and table.general == old != report.general
    assert table.tuned_on == f"{report.device} ({report.arch})" and table.tuned_date == "2026-11-20"  # its oldest picks'
    assert table.pick({"T": 1, "D": 14336}).picked_by == "tuned"
    assert {json.dumps(r.config, sort_keys=True) for r in report.config_checks} >= {json.dumps(old, sort_keys=True)}
    assert "keeps 2 entries of the table it was tuned onto" in tune_report.render_markdown(report)

    for other in (base.model_copy(update={"l2": "warm"}), base.model_copy(update={"dtype": "fp16"})):
        with pytest.raises(AstraError, match="cannot take entries"):
            table.onto(other)
    assert table.onto(base.model_copy(update={"general": older}))[0].general == old  # as the template reads it now
    mine = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", sources={"model": rewrite + "\n"},
                         entries=[DispatchEntry(shape={"T": 2, "D": 4096}, config={}, source="model")])
    with pytest.raises(AstraError, match="different code"):  # base's 8x18944 runs its own "model"
        mine.onto(base)
    assert mine.model_copy(update={"entries": [DispatchEntry(shape={"T": 8, "D": 18944}, config={}, source="model")]}
                           ).onto(base)[1] == 2  # base's entry there replaced: its source not carried, no clash


def test_onto_leaves_the_pick_at_every_shape_it_did_not_tune_as_it_was():
    """Entries replaced in place, new ones after: pick() breaks ties by the table's order, so a
    re-tune of one shape with the same pick changes no other shape's pick (kept-first-then-new
    moved 4x4096 from 1x4096's entry to 16x4096's in the shipped H100 rmsnorm table)."""
    from astra_kernels.runtime.dispatch import DispatchTable

    base = DispatchTable.model_validate_json((ROOT / "kernels_sglang/tuned/h100/rmsnorm.json").read_text())
    spec = suite.load("rmsnorm").spec
    one = next(e for e in base.entries if e.shape == {"T": 1, "H": 4096})
    again = base.model_copy(update={"entries": [one], "general": None})
    merged, kept = again.onto(base)
    assert kept == len(base.entries) - 1 and [e.shape for e in merged.entries] == [e.shape for e in base.entries]
    for shape in spec.sweep_shapes():
        assert merged.pick(shape) == base.pick(shape), spec.label(shape)
    assert tuned_tables.same_kind("NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA H100 PCIe")  # as shipped tables are looked up
    assert not tuned_tables.same_kind("NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA H200")
    assert tuned_tables.same_kind(None, "NVIDIA H200") and not tuned_tables.same_kind("Scripted GPU (sm_90)", "NVIDIA L4")


def test_onto_given_on_the_command_line_is_checked_before_any_gpu_work(tmp_path, capsys):
    table = tmp_path / "warm.json"
    shipped = json.loads((ROOT / "kernels_sglang" / "tuned" / "h200" / "warm" / "silu_and_mul.json").read_text())
    table.write_text(json.dumps(shipped))
    h100 = tmp_path / "h100.json"  # the replay's recording is an H200's
    h100.write_text((ROOT / "kernels_sglang" / "tuned" / "h100" / "silu_and_mul.json").read_text())
    cases = [
        (["--onto", str(table)], "was tuned with warm L2 and this tune times with cold L2"),
        (["--onto", str(tmp_path / "none.json")], "--onto"),
        (["--onto", " "], "--onto needs a table"),
        (["--onto", str(table), "rmsnorm"], "--onto TABLE is one kernel's table"),
        (["--onto", str(h100), "--replay", "recorded", "--shapes", "1x14336"],
         "was tuned on NVIDIA H100 80GB HBM3 (sm_90), and this tune runs on NVIDIA H200"),
    ]
    for extra, said in cases:
        kernels = ["silu_and_mul", *[a for a in extra if a == "rmsnorm"]]
        flags = [a for a in extra if a != "rmsnorm"]
        assert cli.main(["tune", *kernels, *flags, "--out", str(tmp_path / "out")]) == 2
        captured = capsys.readouterr()
        said_all = captured.out + captured.err
        assert said in said_all and "Traceback" not in said_all and len(said_all.strip().splitlines()) == 1, said_all
