"""The profiler evidence the prompts carry (nodes/shared/evidence.py): each shape's holder's launch
on the GPU and the bottleneck it names, by shape class, from the project's own probes, saying so."""

from __future__ import annotations

from astra_kernels.nodes.state import Candidate, ShapeMeasurement
from astra_kernels import suite
from astra_kernels.nodes.shared import facts
from astra_kernels.nodes.shared.evidence import ShapeEvidence, describe_evidence, front_evidence, launch_geometry
from astra_kernels.nodes.shared.floors import ShapeRow

H200 = {"name": "NVIDIA H200", "arch": "sm_90", "multiprocessors": 132}


def evidence(label, us, floor, *, ctas=None, threads=256, per_sm=None, launch=2.0) -> ShapeEvidence:
    return ShapeEvidence(label=label, holder="candidate 0 (baseline)", row=ShapeRow(label, us, floor, launch),
                         ctas=ctas, threads=threads, ctas_per_sm=per_sm, sms=132, max_threads_per_sm=2048)


def test_each_bottleneck_is_named_where_its_facts_hold():
    # latency-bound (bytes floor under half a launch floor): launch cost, or too few CTAs
    assert evidence("1x4096", 2.5, 0.1, ctas=1).bottleneck() == "at the floor"  # 1.25 launch floors
    assert evidence("2x4096", 3.6, 0.1, ctas=2).bottleneck() == "launch cost"  # 1.8 launch floors
    assert evidence("8x4096", 5.0, 0.2, ctas=8).bottleneck() == "too few CTAs"
    # bandwidth-bound: at the floor, a partial last wave, low occupancy, else latency not hidden
    assert evidence("a", 105.0, 100.0, ctas=4096, per_sm=8).bottleneck() == "at the floor"
    assert evidence("b", 130.0, 100.0, ctas=132 * 8 + 100, per_sm=8).bottleneck() == "a partial last wave"
    assert evidence("c", 130.0, 100.0, ctas=132 * 64, per_sm=1).bottleneck() == "low occupancy"  # 256 of 2048
    assert evidence("d", 130.0, 100.0, ctas=132 * 64, per_sm=8).bottleneck() == "memory latency not hidden"
    assert evidence("f", 130.0, 100.0, ctas=132, per_sm=8).bottleneck() == "low occupancy"  # one CTA an SM: 12.5%
    assert evidence("16x4096", 6.0, 0.4, ctas=512, per_sm=8).bottleneck() == "each thread's chain of dependent steps"
    assert evidence("e", 130.0, 100.0, ctas=64, per_sm=8).bottleneck() == "too few CTAs"
    assert evidence("g", 130.0, 100.0, ctas=128, per_sm=8).bottleneck() != "too few CTAs"  # 128 of 132 SMs work


def test_the_classes_give_ranges_and_count_the_bottlenecks_and_say_where_the_facts_come_from():
    text = describe_evidence([evidence("1x4096", 3.6, 0.1, ctas=1), evidence("8x4096", 5.0, 0.2, ctas=8),
                              evidence("16384x4096", 130.0, 100.0, ctas=16384, per_sm=8)])
    lines = text.splitlines()
    assert "project's probes" in lines[0] and "Nsight Compute" in lines[0] and "not collected" in lines[0]
    latency = next(line for line in lines if line.startswith("- latency-bound, 2 shapes"))
    assert "1-8 CTAs of 256 threads on 132 SMs" in latency and "1.80-2.50x the launch floor" in latency
    assert "launch cost at 1 (1x4096)" in latency and "too few CTAs at 1 (8x4096)" in latency
    bandwidth = next(line for line in lines if line.startswith("- bandwidth-bound, 1 shape:"))
    assert "77% of the mix's bandwidth" in bandwidth and "at most 100% of an SM's threads resident" in bandwidth
    assert "15.52 waves" in bandwidth and "memory latency not hidden at 1 (16384x4096)" in bandwidth
    assert describe_evidence([]) == ""


def test_the_geometry_is_the_holder_s_template_at_its_configuration_on_this_gpu():
    silu = suite.load("silu_and_mul")
    baseline = Candidate(id=0, origin="baseline", source=silu.baseline.source)
    assert launch_geometry("silu_and_mul", baseline, {}, {"T": 16, "D": 4096}, "bf16", 132, "sm_90") == (16, 256)
    template = Candidate(id=1, origin="tune", source=silu.template.source)
    flat = {**silu.template.default, "FLAT": 1, "THREADS": 128, "VEC": 8}
    assert launch_geometry("silu_and_mul", template, flat, {"T": 16, "D": 4096}, "bf16", 132, "sm_90") == (64, 128)
    split = {**silu.template.default, "CHUNKS": 8, "THREADS": 64}  # 8 CTAs a row: a (16, 8) grid
    assert launch_geometry("silu_and_mul", template, split, {"T": 16, "D": 4096}, "bf16", 132, "sm_90") == (128, 64)
    excluded = {**silu.template.default, "CHUNKS": 8}  # 256 threads over a chunk of 64 vectors: refused
    assert launch_geometry("silu_and_mul", template, excluded, {"T": 16, "D": 4096}, "bf16", 132, "sm_90") is None
    broken = Candidate(id=2, origin="rewrite", source="not a kernel")
    assert launch_geometry("silu_and_mul", broken, {}, {"T": 16, "D": 4096}, "bf16", 132, "sm_90") is None


def test_the_model_s_facts_carry_the_front_s_evidence():
    silu = suite.load("silu_and_mul")
    shapes = [{"T": 1, "D": 4096}, {"T": 16384, "D": 4096}]
    measured = [ShapeMeasurement(label="1x4096", status="ok", median_us=3.0, floor_us=0.01, registers=18,
                                 occupancy_blocks_per_sm=8),
                ShapeMeasurement(label="16384x4096", status="ok", median_us=120.0, floor_us=100.0, registers=18,
                                 occupancy_blocks_per_sm=8)]
    baseline = Candidate(id=0, origin="baseline", source=silu.baseline.source, measurements=measured,
                         verdict="passed").model_dump()
    state = {"kernel": "silu_and_mul", "dtype": "bf16", "shapes": shapes, "baseline": baseline, "best": baseline,
             "history": [], "gpu": {"device": H200, "launch_floor_us": 1.3, "copy_bandwidth_gbs": 4200.0},
             "front": {m.label: {"candidate": 0, "origin": "baseline", "median_us": m.median_us,
                                 "floor_us": m.floor_us, "config": {}} for m in measured}}
    rows = {r.label: r for r in front_evidence(state)}
    assert (rows["1x4096"].ctas, rows["1x4096"].threads, rows["1x4096"].registers) == (1, 256, 18)
    assert rows["1x4096"].bottleneck() == "too few CTAs" and rows["16384x4096"].ctas == 16384
    text = facts.model_facts(state)
    assert "## Where the time goes, by shape class (profiler evidence)" in text
    assert "too few CTAs at 1 (1x4096)" in text and "83% of the mix's bandwidth" in text


def test_nsight_s_counters_are_shown_where_measured_and_why_not_where_not():
    rows = [evidence("8x4096", 5.0, 0.2, ctas=8), evidence("16384x4096", 130.0, 100.0, ctas=16384, per_sm=8)]
    measured = {"16384x4096": {"candidate": 3, "origin": "tune", "facts": "DRAM throughput 71% of peak",
                               "message": "ncu measured 2 counters"}}
    text = describe_evidence(rows, measured)
    assert "Nsight Compute measured the slowest shape of each class" in text.splitlines()[0]
    assert "- Nsight Compute at 16384x4096 (candidate 3, tune): DRAM throughput 71% of peak." in text
    missing = {"8x4096": {"candidate": 0, "origin": "baseline", "facts": "", "message": "ncu is not installed here"}}
    assert "were not collected: ncu is not installed here." in describe_evidence(rows, missing).splitlines()[0]


def test_nsight_is_not_run_on_a_replay(monkeypatch):
    """A replay measures nothing: no ncu run, whatever the context asks."""
    from astra_kernels.nodes.context import RunContext
    from astra_kernels.nodes.shared import evidence as module

    calls = []
    monkeypatch.setattr(module.nsight, "profile", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(module, "local_gpu", lambda context, kernel: None)
    state = {"kernel": "silu_and_mul", "dtype": "bf16", "shapes": [{"T": 1, "D": 4096}], "front": {}}
    assert module.nsight_profiles(state, RunContext(replay="recorded")) == {} and calls == []


def test_nsight_profiles_the_slowest_shape_of_each_class_once_per_holder(monkeypatch):
    from types import SimpleNamespace

    from astra_kernels.nodes.context import RunContext
    from astra_kernels.nodes.shared import evidence as module
    from astra_kernels.tools.measuring.nsight import DRAM, NsightReport

    silu = suite.load("silu_and_mul")
    labels = {"1x4096": 3.0, "2x4096": 3.2, "2048x4096": 30.0, "16384x4096": 130.0}
    floors = {"1x4096": 0.01, "2x4096": 0.02, "2048x4096": 20.0, "16384x4096": 100.0}
    shapes = [silu.spec.parse_shape(label) for label in labels]
    baseline = Candidate(id=0, origin="baseline", source=silu.baseline.source, verdict="passed").model_dump()
    state = {"kernel": "silu_and_mul", "dtype": "bf16", "shapes": shapes, "baseline": baseline, "best": baseline,
             "history": [], "gpu": {"device": H200, "launch_floor_us": 1.3},
             "front": {label: {"candidate": 0, "origin": "baseline", "median_us": us, "floor_us": floors[label],
                               "config": {}} for label, us in labels.items()}}
    asked = []
    monkeypatch.setattr(module, "local_gpu", lambda context, kernel: SimpleNamespace(device_index=1))
    monkeypatch.setattr(module.measure, "requests", lambda context, kernel, dtype, shapes, candidate:
                        (None, [(shapes[0], silu.spec.label(shapes[0]), {}, f"request {silu.spec.label(shapes[0])}")]))

    def profile(request, device_index):
        asked.append((request, device_index))
        return NsightReport(available=True, kernel="act_and_mul", metrics={DRAM: 50.0}, message="measured")

    monkeypatch.setattr(module.nsight, "profile", profile)
    found = module.nsight_profiles(state, RunContext())
    assert sorted(asked) == [("request 16384x4096", 1), ("request 2x4096", 1)]  # the slowest of each class
    assert found["16384x4096"] == {"candidate": 0, "origin": "baseline", "facts": "DRAM throughput 50% of peak",
                                   "message": "measured"}
    assert module.nsight_profiles({**state, "nsight": found}, RunContext()) == {}  # the same holders: not again
    assert module.nsight_profiles(state, RunContext(nsight=False)) == {} and len(asked) == 2

    def broken(request, device_index):
        raise RuntimeError("no permission to read the performance counters")

    monkeypatch.setattr(module.nsight, "profile", broken)  # the run goes on, saying why
    failed = module.nsight_profiles(state, RunContext())
    assert failed["16384x4096"]["facts"] == "" and "RuntimeError: no permission" in failed["16384x4096"]["message"]


def test_too_few_ctas_points_where_every_shipped_winner_went():
    """Where the evidence names "too few CTAs" for SGLang's kernel (at most half as many CTAs as SMs),
    the shipped tables' winners do what its legend says: the work spread over more CTAs or more
    threads, or (a row reduction) one CTA a row. Held against every shipped cold table's template entries, so a
    retune that does otherwise fails this until the legend says so."""
    from astra_kernels.suite import tuned_tables
    from astra_kernels.runtime.dispatch import DispatchTable

    checked = 0
    for kind in tuned_tables.gpu_kinds():
        for kernel in tuned_tables.shipped_kernels(kind, "cold"):
            table = DispatchTable.model_validate_json(tuned_tables.table_path(kernel, kind).read_text())
            folder = suite.load(kernel)
            baseline = Candidate(id=0, origin="baseline", source=folder.baseline.source)
            for entry in table.entries:
                if entry.source != "template":
                    continue
                shape = entry.shape
                base = launch_geometry(kernel, baseline, {}, shape, table.dtype, 132, "sm_90")
                won = launch_geometry(kernel, Candidate(id=1, origin="tune", source=folder.template.source),
                                      entry.config, shape, table.dtype, 132, "sm_90")
                moved = suite.problem(folder, shape, table.dtype).bytes_moved
                if base is None or won is None or ShapeEvidence(
                        "", "", ShapeRow("", 10.0, 0.1, 2.0), ctas=base[0], threads=base[1], sms=132,
                        bytes_moved=moved).bottleneck() != "too few CTAs":
                    continue
                tokens = shape[folder.spec.symbols[0]]
                # the legend's claims: more CTAs or more threads at work, or (a row reduction) a CTA a row
                assert won[0] > base[0] or won[0] * won[1] > base[0] * base[1] or won[0] == tokens, (
                    kind, kernel, folder.spec.label(shape), base, won)
                checked += 1
    assert checked >= 20
