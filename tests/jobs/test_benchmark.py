"""`astra bench` without a GPU: the goals it states, the report it writes, the tables it reads."""

from __future__ import annotations

import json
import math

import pytest

from astra_kernels.tools.errors import UsageError
from astra_kernels import cli
from astra_kernels.cli.commands import bench as bench_command
from astra_kernels.jobs import benchmark
from astra_kernels import suite
from astra_kernels.jobs.benchmark import BenchReport, BenchRow
from astra_kernels.tools.toolchain.driver import gpu_available


def _row(kernel, label, baseline, tuned, floor=1.0, **extra):
    spec = suite.load(kernel).spec
    shape = spec.parse_shape(label)
    return BenchRow(kernel=kernel, label=label, shape=shape, dtype="bf16", variant="default", bytes_moved=1,
                    floor_us=floor, baseline_us=baseline, tuned_us=tuned, baseline_status="ok",
                    tuned_status="ok" if tuned else "", **extra)


def _report(rows):
    return BenchReport(device="NVIDIA H200", arch="sm_90", date="2026-11-23", dtype="bf16",
                       copy_bandwidth_gbs=4200.0, launch_floor_us=1.0, rows=rows)


def test_goals_name_what_misses_them():
    report = _report([
        _row("silu_and_mul", "16x4096", 2.0, 1.0),           # astra shape, decode, 2x
        _row("silu_and_mul", "64x8192", 4.0, 5.0),           # astra shape, slower than the baseline
        _row("rmsnorm", "16384x8192", 190.0, 150.0, floor=128.0, mix_floor_us=140.0),  # large: 93% of its mix
        _row("merge_attn_states", "8192x32x128", 51.0, 50.0, floor=46.0, mix_floor_us=48.0),  # large: 96%
    ])
    goals = "\n".join(report.goals())
    assert "3 of 4 shapes" in goals and "silu_and_mul 64x8192 0.800x" in goals
    assert "geometric-mean speedup 1.265x over 2 shapes" in goals  # sqrt(2 * 0.8); rmsnorm is not one of Astra's three
    assert "1 of 2 shapes at >= 95% of the bandwidth of their own read/write mix" in goals
    assert "rmsnorm 16384x8192 93.3%" in goals
    assert "decode shapes (<= 16 tokens): 1 of 1 within 1.3x" in goals


def test_the_fastest_peer_at_each_shape_is_the_bar():
    """torch.compile beats the tuned kernel at one shape and the baseline is the fastest peer at
    another: the summary counts the first as slower than its best peer, names it, and the Astra
    line gives the geometric mean over the fastest peer per shape."""
    report = _report([
        _row("silu_and_mul", "16x4096", 2.0, 1.0, torch_compile_us=1.2, torch_eager_us=3.0),  # 1.2x the best peer
        _row("silu_and_mul", "32x5120", 3.0, 2.0, torch_compile_us=1.5),  # torch.compile 25% faster
        _row("silu_and_mul", "32x8192", 3.0, 3.02, torch_compile_us=4.0),  # the baseline, within the noise
    ])
    rows = report.rows
    noisy = _row("silu_and_mul", "32x5120", 3.0, 2.06, torch_compile_us=2.0, torch_compile_spread=0.05)
    assert not noisy.slower_than_best_peer  # 3% behind a peer whose own replays spread 5%
    assert rows[0].best_peer == ("torch.compile", 1.2) and not rows[0].slower_than_best_peer
    assert rows[1].slower_than_best_peer and rows[1].speedup_over_best_peer == pytest.approx(0.75)
    assert rows[2].best_peer == ("SGLang baseline", 3.0) and not rows[2].slower_than_best_peer
    goals = "\n".join(report.goals())
    assert "never slower than the fastest peer at the shape: 2 of 3 shapes (slower: silu_and_mul 32x5120 0.750x of torch.compile)" in goals
    assert f"geometric mean {(1.2 * 0.75 * 3.0 / 3.02) ** (1 / 3):.3f}x (goal 1.15x)\n" in goals + "\n"
    for row, probe in zip(rows, (1.0, 1.25, 2.5)):  # the same-mix probe of each shape's bytes
        row.mix_us = probe
    assert (f"(goal 1.15x); a kernel as fast as the same-mix probe of its bytes would be "
            f"{(1.2 / 1.0 * 1.5 / 1.25 * 3.0 / 2.5) ** (1 / 3):.3f}x") in "\n".join(report.goals())
    text = benchmark.render_markdown(report)
    assert "| torch.compile 1.50 | 0.750x (slower) |" in text and "L2 cold" in text


def test_reports_of_two_l2_regimes_are_not_merged():
    cold, warm = _report([_row("silu_and_mul", "16x4096", 2.0, 1.0)]), _report([_row("silu_and_mul", "16x4096", 2.0, 1.0)])
    warm.l2 = "warm"
    with pytest.raises(suite.AstraError, match="different L2 regimes cannot be merged: cold, warm"):
        benchmark.merge([cold, warm])


def test_decode_goal_counts_against_the_launch_floor():
    report = _report([_row("silu_and_mul", "1x14336", 3.0, 1.5)])
    assert "0 of 1 within 1.3x" in report.goals()[-1] and "1.50x" in report.goals()[-1]


def test_markdown_and_chart_show_every_row_and_what_was_not_measured():
    rows = [_row("silu_and_mul", "16x4096", 2.0, 1.0, torch_compile_us=1.3, torch_compile_status="ok"),
            _row("rmsnorm", "16x4096", 3.0, None, torch_compile_status="failed: no CUDA")]
    rows[1].tuned_status = "excluded: no configuration runs here"
    report = _report(rows)
    report.commands = ["astra bench --kernels silu_and_mul,rmsnorm"]
    text = benchmark.render_markdown(report)
    assert "| silu_and_mul | 16x4096 | 2.00 | 1.00 | 2.000 |" in text
    assert "rmsnorm 16x4096 tuned: excluded" in text and "torch.compile: failed: no CUDA" in text
    assert "`astra bench --kernels silu_and_mul,rmsnorm`" in text
    svg = benchmark.chart(report)
    assert svg.startswith("<svg") and svg.count("<rect") >= 4 and "torch.compile" in svg


def test_shipped_tables_are_per_gpu_kind():
    table = benchmark.shipped_table("silu_and_mul", "NVIDIA H200")
    assert table is not None and table.kernel == "silu_and_mul" and table.entries
    assert benchmark.shipped_table("silu_and_mul", "NVIDIA A100-SXM4-80GB") is None
    assert benchmark.shipped_table("topk_softmax", "NVIDIA H100 80GB HBM3") is None  # tuned on the H200 only


def test_every_shipped_table_records_the_regime_of_its_folder():
    from astra_kernels.suite import tuned_tables

    seen = 0
    for kind in tuned_tables.gpu_kinds():
        for regime in tuned_tables.REGIMES:
            for name in tuned_tables.shipped_kernels(kind, regime):
                table = benchmark.load_table(tuned_tables.table_path(name, kind, regime))
                assert (table.kernel, table.l2) == (name, regime), (kind, regime, name)
                seen += 1
    assert seen >= 15  # the H200's seven, the H100's four cold and four warm tables at least
    assert tuned_tables.shipped_kernels("h100", "warm") == ["fused_add_rmsnorm", "merge_attn_states", "rmsnorm",
                                                           "silu_and_mul"]


def _ship(root, kind, regime, kernel, l2):
    from astra_kernels.suite import tuned_tables

    table = json.loads(tuned_tables.table_path(kernel, "h200").read_text())
    table["l2"] = l2
    folder = root / kind if regime == "cold" else root / kind / regime
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{kernel}.json").write_text(json.dumps(table))


def test_bench_tables_take_the_regime_timed_else_the_other_and_say_which(tmp_path, monkeypatch):
    """A warm bench runs the warm table where one is shipped and the cold one where not; the
    report then names each table's regime, so a cold table timed warm is never silent."""
    from astra_kernels.suite import tuned_tables

    _ship(tmp_path, "h100", "cold", "rmsnorm", "cold")
    _ship(tmp_path, "h100", "warm", "rmsnorm", "warm")
    _ship(tmp_path, "h100", "cold", "silu_and_mul", "cold")
    monkeypatch.setattr(tuned_tables, "TUNED_DIR", tmp_path)
    names, h100 = ["rmsnorm", "silu_and_mul", "topk_softmax"], "NVIDIA H100 80GB HBM3"
    warm = benchmark.bench_tables(names, h100, "warm")
    assert warm["rmsnorm"].l2 == "warm" and warm["silu_and_mul"].l2 == "cold" and warm["topk_softmax"] is None
    cold = benchmark.bench_tables(names, h100, "cold")
    assert cold["rmsnorm"].l2 == "cold" and cold["silu_and_mul"].l2 == "cold"
    assert benchmark.bench_tables(names, "NVIDIA A100-SXM4-80GB", "warm") == dict.fromkeys(names)
    tuned = tmp_path / "out"  # `astra tune --out` folders come first, whatever their regime
    (tuned / "rmsnorm").mkdir(parents=True)
    (tuned / "rmsnorm" / "dispatch.json").write_text(tuned_tables.table_path("rmsnorm", "h100").read_text())
    assert benchmark.bench_tables(["rmsnorm"], h100, "warm", tuned)["rmsnorm"].l2 == "cold"
    # one tune's --out folder itself, as `astra verify` and `astra export` take it: its kernel's table
    single = benchmark.bench_tables(["rmsnorm", "silu_and_mul"], h100, "warm", tuned / "rmsnorm")
    assert single["rmsnorm"].l2 == "cold" and single["silu_and_mul"].l2 == "cold"  # the other: shipped
    assert single["rmsnorm"] == benchmark.load_table(tuned / "rmsnorm")

    report = _report([_row("rmsnorm", "128x4096", 3.0, 2.0)])
    report.l2, report.table_l2 = "warm", {"rmsnorm": "cold"}
    assert "Tuned column: the dispatch tables were tuned with rmsnorm: cold L2." in benchmark.render_markdown(report)
    other = report.model_copy(update={"table_l2": {"silu_and_mul": "warm"}, "date": "2026-11-24"})
    assert benchmark.merge([other, report]).table_l2 == {"rmsnorm": "cold", "silu_and_mul": "warm"}
    clash = report.model_copy(update={"table_l2": {"rmsnorm": "warm"}, "date": "2026-11-24"})
    with pytest.raises(suite.AstraError, match="rmsnorm tables were tuned in different L2 regimes"):
        benchmark.merge([clash, report])


def test_tune_starts_from_the_shipped_table_of_its_regime_else_the_cold_one(tmp_path, monkeypatch, capsys):
    from argparse import Namespace

    from astra_kernels.cli.commands import tune as tune_command
    from astra_kernels.suite import tuned_tables

    _ship(tmp_path, "h100", "cold", "rmsnorm", "cold")
    _ship(tmp_path, "h100", "warm", "rmsnorm", "warm")
    _ship(tmp_path, "h100", "cold", "silu_and_mul", "cold")
    monkeypatch.setattr(tuned_tables, "TUNED_DIR", tmp_path)
    h100 = "NVIDIA H100 80GB HBM3"

    def start(kernel, l2, dtype="bf16"):
        args = Namespace(start="shipped", l2=l2, variant="default", json=False, quiet=False)
        return tune_command._shipped_start(args, suite.load(kernel).spec, dtype, h100)

    assert start("rmsnorm", "warm").l2 == "warm" and start("rmsnorm", "cold").l2 == "cold"
    assert start("silu_and_mul", "warm").l2 == "cold"
    assert "tuned with cold L2" in capsys.readouterr().out
    assert start("rmsnorm", "warm", dtype="fp16") is None


def test_load_table_names_a_missing_file(tmp_path):
    with pytest.raises(suite.AstraError, match="no dispatch table at"):
        benchmark.load_table(tmp_path)
    (tmp_path / "dispatch.json").write_text(
        json.dumps({"kernel": "rmsnorm", "dtype": "bf16", "variant": "default", "entries": []}))
    assert benchmark.load_table(tmp_path).kernel == "rmsnorm"


def test_bench_shape_sets(capsys):
    folder = suite.load("silu_and_mul")
    args = cli.build_parser().parse_args(["bench", "--set", "astra,odd"])
    labels = [folder.spec.label(s) for s in bench_command.bench_shapes(folder, args)]
    assert labels[:5] == ["16x4096", "32x5120", "32x8192", "16x12288", "64x8192"] and "5x12" in labels
    args = cli.build_parser().parse_args(["bench", "--set", "decode"])
    assert [folder.spec.label(s) for s in bench_command.bench_shapes(folder, args)] == [
        "16x4096", "16x12288", "1x14336", "1x28672", "16x14336", "16x28672"]
    args = cli.build_parser().parse_args(["bench", "--set", "prefill"])
    with pytest.raises(UsageError, match="unknown shape set"):
        bench_command.bench_shapes(folder, args)
    # a kernel without an astra set simply has fewer shapes
    args = cli.build_parser().parse_args(["bench", "--set", "astra"])
    assert bench_command.bench_shapes(suite.load("topk_softmax"), args) == []


@pytest.mark.skipif(gpu_available(), reason="checks the behaviour of a machine with no GPU")
def test_bench_without_gpu_says_so(capsys):
    assert cli.main(["bench", "--kernels", "silu_and_mul"]) == 2
    out = capsys.readouterr().out
    assert "no GPU here" in out and "astra bench --from" in out


def test_bench_refuses_shapes_for_several_kernels(capsys):
    assert cli.main(["bench", "--kernels", "silu_and_mul,rmsnorm", "--shapes", "16x4096"]) == 2
    assert "exactly one kernel" in capsys.readouterr().out


def test_goals_state_what_a_same_bytes_copy_would_give():
    rows = [_row("silu_and_mul", "16x4096", 2.0, 1.6, copy_us=1.5), _row("silu_and_mul", "1x14336", 2.0, 1.7, copy_us=1.4)]
    goals = "\n".join(_report(rows).goals())
    assert "a plain copy of the same bytes would be 1.333x" in goals  # only 16x4096 is one of Astra's shapes
    assert "a plain copy of the same bytes takes 1.40x to 1.50x of it" in goals


def test_a_difference_within_the_timing_spread_is_not_slower():
    tie = _row("silu_and_mul", "2048x14336", 43.84, 43.92, baseline_spread=0.004, tuned_spread=0.02)
    slow = _row("silu_and_mul", "128x14336", 5.0, 5.2, baseline_spread=0.01, tuned_spread=0.01)
    assert not tie.slower and slow.slower
    line = _report([tie, slow]).goals()[0]
    assert "1 of 2 shapes (slower: silu_and_mul 128x14336 0.962x)" in line
    assert "1 within the timing spread of it (silu_and_mul 2048x14336 0.998x)" in line


def test_reports_of_one_gpu_merge_and_render_without_one(tmp_path, capsys):
    a = _report([_row("silu_and_mul", "16x4096", 2.0, 1.0)])
    a.commands = ["astra bench --kernels silu_and_mul"]
    b = _report([_row("rmsnorm", "16x4096", 3.0, 2.0)]).model_copy(update={"launch_floor_us": 0.8})
    b.commands = ["astra bench --kernels rmsnorm"]
    for name, report in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(report.model_dump_json())
    assert cli.main(["bench", "--from", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "bench.md").read_text()
    assert "`astra bench --kernels silu_and_mul`; `astra bench --kernels rmsnorm`" in text
    assert "| silu_and_mul | 16x4096 |" in text and "| rmsnorm | 16x4096 |" in text
    assert "launch floor (empty kernel, graph replay) 0.80 us" in text
    other = _report([]).model_copy(update={"device": "NVIDIA H100 80GB HBM3"})
    with pytest.raises(suite.AstraError, match="different GPUs"):
        benchmark.merge([a, other])


def test_pdl_columns_are_reported_apart_and_judged_against_the_plain_launch_floor():
    rows = [_row("silu_and_mul", "16x4096", 2.0, 1.9, copy_us=1.8, baseline_pdl_us=1.6, tuned_pdl_us=1.2,
                 copy_pdl_us=1.1, pdl_status="ok"),
            _row("rmsnorm", "1x4096", 2.4, 2.2, baseline_pdl_us=1.9, tuned_pdl_us=1.4, pdl_status="ok"),
            _row("rmsnorm", "128x4096", 3.0, 2.5)]
    report = _report(rows)
    report.launch_floor_pdl_us = 0.6
    goals = next(line for line in report.goals() if line.startswith("with PDL on"))
    assert "1 of 2 decode shapes within 1.3x" in goals
    assert "(1.20x to 1.40x)" in goals and "empty kernel replays at 0.60 us" in goals
    assert f"{(1.9 / 1.2 * 2.2 / 1.4) ** 0.5:.3f}x" in goals
    assert report.rows[0].speedup == pytest.approx(2.0 / 1.9)  # PDL never enters the plain speedup
    text = benchmark.render_markdown(report)
    assert "## With programmatic dependent launch" in text
    assert "| silu_and_mul | 16x4096 | 2.00 | 1.60 | 1.90 | 1.20 | 1.80 | 1.10 | 1.20x |" in text
    assert "| rmsnorm | 128x4096 |" not in text.split("## With programmatic")[1].split("## Goals")[0]


def test_inductor_compare_summarizes_a_recorded_ncu_run():
    """bench/inductor_compare.py --summarize on the H200 profile kept in docs: one row per launch,
    the tuned kernel's 52 registers against Inductor's 28, bytes per warp load and store."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(root / "bench" / "inductor_compare.py"), "--summarize",
                          str(root / "docs" / "bench" / "ncu-2026-11-25" / "rmsnorm-512x14336.ncu.csv")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 8
    tuned = [r for r in rows if "rmsnorm_t11" in r]
    inductor = [r for r in rows if "triton_red_fused" in r]
    assert len(tuned) == len(inductor) == 4
    assert all("| 512 | 512 | 52 |" in r and r.rstrip().endswith("| 448 | 512 |") for r in tuned)
    assert all("| 512 | 512 | 28 |" in r and r.rstrip().endswith("| 256 | 256 |") for r in inductor)


def test_param_effect_gives_the_figures_performance_md_cites(tmp_path):
    """bench/param_effect.py over the H100 search kept in docs: per shape the baseline, the best,
    and the best with each value of a parameter beside how many were measured (entry 12's FLAT
    figures at 2048x14336: 59.90 us with it, 62.17 without, the baseline 61.95)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "effect.json"
    run = subprocess.run([sys.executable, str(root / "bench" / "param_effect.py"),
                          str(root / "docs" / "bench" / "h100-2026-11-26-explore" / "silu_and_mul.sqlite.gz"),
                          "FLAT", "STREAM", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| 2048x14336 | 61.95 | 59.90 | 62.17 (6) | 59.90 (2) |" in run.stdout, run.stdout
    found = {(e["shape"]["T"], e["shape"]["D"]): e for e in json.loads(out.read_text())}
    entry = found[(2048, 14336)]
    assert entry["best_us"] == min(best for best, _ in entry["values"]["FLAT"].values())
    assert sum(n for _, n in entry["values"]["FLAT"].values()) == sum(n for _, n in entry["values"]["STREAM"].values())
    empty = subprocess.run([sys.executable, str(root / "bench" / "param_effect.py"),
                            str(root / "docs" / "bench" / "h100-2026-11-26-explore" / "silu_and_mul.sqlite.gz"),
                            "FLAT", "--device", "H200"], capture_output=True, text=True, timeout=120)
    assert empty.returncode == 1 and "no measurement" in empty.stdout


def _norm_code_gap():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "norm_code_gap.py"
    spec = importlib.util.spec_from_file_location("norm_code_gap", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


@pytest.mark.parametrize("kernel", ["rmsnorm", "fused_add_rmsnorm"])
def test_norm_code_gap_forms_are_the_templates_static_row_values_and_compile(kernel):
    """bench/norm_code_gap.py's three forms are the template's STATIC_ROW values: the row length at
    run time (no ROW_LEN), compiled in (ROW_LEN = H), and compiled in without bounds checks, which
    the template admits only where a CTA is exactly one row of ROW_THREADS x ITEMS vectors (SGLang's
    256 threads of two 16-byte vectors at H = 4096, not 512 of four, not two rows a CTA); every form
    offered compiles for sm_90."""
    from astra_kernels.tools.toolchain.compiler import compile_many

    _, gap = _norm_code_gap()
    folder = suite.load(kernel)
    shape = {"T": 128, "H": 4096}
    env = suite.environment(folder.spec, shape, "bf16", "default", 132, "sm_90")
    sglang = folder.template.point(  # RELOAD at its default where the template has it (fused_add_rmsnorm)
        dict(ROW_THREADS=256, ROWS=1, VEC=8, ITEMS=2, PRELOAD_W=1, REG_CAP=128, CLUSTER=1, HINT=0, STATIC_ROW=0))
    forms = gap.forms_of(folder, env, sglang)
    assert [(label, c["STATIC_ROW"]) for label, c in forms] == [("as_shipped", 0), ("const_h", 1), ("const_h_unguarded", 2)]
    assert [label for label, _ in gap.forms_of(folder, env, {**sglang, "ROW_THREADS": 512, "ITEMS": 4})] == \
        ["as_shipped", "const_h"]
    assert [label for label, _ in gap.forms_of(folder, env, {**sglang, "ROWS": 2, "ROW_THREADS": 128, "ITEMS": 4})] == \
        ["as_shipped"]
    requests = []
    for label, config in forms:
        request = suite.request(folder, "template", shape, "bf16", "default", config, arch="sm_90")
        assert request.options.defines.get("ROW_LEN") == (0 if label == "as_shipped" else 4096), label
        requests.append((request.source, request.options))
    outcomes = compile_many(requests)
    assert [o.error for o in outcomes] == [None, None, None], [o.error for o in outcomes]


def test_norm_code_gap_saved_run_gives_the_figures_performance_md_cites(tmp_path):
    """The saved H100 run in docs (entry 22): at rmsnorm 128x4096, cold, the shipped pick (SGLang's
    launch shape) 2.894 us, with the row length compiled in 2.813, unguarded 2.781, SGLang's JIT
    rmsnorm 2.794; bad input is one line on stderr."""
    import subprocess
    import sys
    from pathlib import Path

    path, _ = _norm_code_gap()
    saved = Path(__file__).resolve().parents[2] / "docs" / "bench" / "h100-2026-11-26d" / "code-gap" / "cold.json"
    run = subprocess.run([sys.executable, str(path), "--from", str(saved)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    block = run.stdout.split("rmsnorm 128x4096 (cold L2, 3 rounds)")[1].split("\nrmsnorm ")[0]
    lines = {line.strip().split("  ")[0]: line for line in block.splitlines() if line.strip()}
    assert "2.794 us" in lines["sglang_jit"]
    assert "2.894 us" in lines["as_shipped (shipped pick)"] and "0.965x of JIT's speed" in lines["as_shipped (shipped pick)"]
    assert "2.813 us" in lines["const_h (shipped pick)"]
    assert "2.781 us" in lines["const_h_unguarded (shipped pick)"] and "1.005x" in lines["const_h_unguarded (shipped pick)"]
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"results": [{}]}')
    for args, says in ((["--from", str(saved.with_name("nosuch.json"))], "cannot read"),
                       (["--from", str(malformed)], "is not a saved run of this script"),
                       (["x.json", "--shapes", "rmsnorm:4096"], "is not rmsnorm:TxH"),
                       (["x.json", "--shapes", "rmsnorm:0x4096"], "T >= 1"),
                       ([str(tmp_path / "no" / "x.json"), "--shapes", "rmsnorm:1x4096"], "cannot write"),
                       ([], "give OUT.json")):
        bad = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and says in bad.stderr, (args, bad.stderr)


def test_a_sweep_gets_a_chart_per_kernel_and_width_with_a_line_per_peer_and_the_floor(tmp_path, capsys):
    """`astra bench --set sweep`: time against tokens for each width measured at the sweep's token
    counts (log axes), a line per peer and one for the floor; a width of a shape set's few counts
    gets none. `--from` draws them again without a GPU."""
    import json
    import re

    from astra_kernels.suite.schema import SWEEP_TOKENS

    rows = [_row("rmsnorm", f"{t}x4096", 2.0 + t / 100, 1.5 + t / 120, floor=1.0 + t / 200, torch_compile_us=1.8 + t / 110,
                 mix_floor_us=0.9 + t / 210) for t in SWEEP_TOKENS]
    rows += [_row("rmsnorm", f"{t}x8192", 3.0, 2.0) for t in (1, 16, 64, 256, 1024, 4096)]  # the serving set's six
    report = _report(rows)
    charts = benchmark.sweep_charts(report)
    assert list(charts) == ["sweep-rmsnorm-4096.svg"]
    svg = charts["sweep-rmsnorm-4096.svg"]
    for line in ("tuned", "baseline (SGLang&#x27;s, ported)", "torch.compile", "floor"):
        assert f"<title>{line}</title>" in svg, line
    assert "torch eager" not in svg  # not measured: no line
    assert len(re.findall(r"<polyline", svg)) == 4 and ">10000<" in svg  # the log token axis' last decade
    (tmp_path / "bench.json").write_text(report.model_dump_json())
    assert cli.main(["bench", "--from", str(tmp_path / "bench.json"), "--out", str(tmp_path / "again"), "--json"]) == 0
    json.loads(capsys.readouterr().out)
    assert (tmp_path / "again" / "sweep-rmsnorm-4096.svg").read_text() == svg


def test_the_sweep_set_is_the_token_axis_at_the_serving_widths_and_some_in_no_set():
    from astra_kernels.suite.schema import SWEEP_TOKENS

    assert SWEEP_TOKENS[:8] == tuple(range(1, 9)) and SWEEP_TOKENS[-1] == 16384 and len(SWEEP_TOKENS) == 27
    assert all(1.3 < b / a <= 1.6 for a, b in zip(SWEEP_TOKENS[8:], SWEEP_TOKENS[9:]))
    for name in suite.names():
        if suite.folder_path(name).parent != suite.SUITE_DIR:  # the shipped kernels' widths, not a user's
            continue
        spec = suite.load(name).spec
        shapes = spec.sweep_shapes()
        widths = {tuple(s[k] for k in spec.symbols[1:]) for s in shapes}
        serving = {tuple(s[k] for k in spec.symbols[1:]) for s in spec.shapes.get("serving", [])}
        untuned = {tuple(w[k] for k in spec.symbols[1:]) for w in spec.sweep_widths}
        assert widths == serving | untuned and untuned and not untuned & {
            tuple(s[k] for k in spec.symbols[1:]) for s in spec.all_shapes()}, name  # in no set
        assert len(shapes) == len(widths) * len(SWEEP_TOKENS) and spec.shape_set("sweep") == shapes
        tuned = spec.shape_set("sweep", tuning=True)  # a tune leaves the held-out widths untuned
        assert tuned == [s for s in shapes if tuple(s[k] for k in spec.symbols[1:]) in serving], name
        folder = suite.load(name)
        suite.check_run(folder, shapes, spec.default_dtype())  # the baseline runs at every point


def test_the_sweep_counts_per_kernel_and_width_use_the_larger_of_two_percent_and_the_spread():
    """Issue 42's goal line: per kernel and width, the token counts behind the fastest peer beyond
    the larger of 2% and either spread, and the geometric mean over that peer."""
    rows = [
        _row("silu_and_mul", "1x14336", 5.0, 2.00, torch_compile_us=1.98, torch_compile_spread=0.01),  # 1% behind: level
        _row("silu_and_mul", "2x14336", 5.0, 2.10, torch_compile_us=2.00, torch_compile_spread=0.01),  # 5% behind
        _row("silu_and_mul", "4x14336", 5.0, 2.10, torch_compile_us=2.00, torch_compile_spread=0.08),  # within its spread
        _row("silu_and_mul", "8x14336", 5.0, 1.90, torch_compile_us=2.00),                             # ahead
        _row("silu_and_mul", "16x4096", 5.0, 2.0, torch_compile_us=2.0),  # one count at this width: no line
    ]
    lines = _report(rows).per_width()
    assert len(lines) == 1 and lines[0].startswith("silu_and_mul at width 14336, 4 token counts: ")
    assert "more than 2% or the spread at 1," in lines[0]
    expected = math.prod([1.98 / 2.0, 2.0 / 2.1, 2.0 / 2.1, 2.0 / 1.9]) ** 0.25
    assert f"geometric mean {expected:.3f}x" in lines[0] and "(worst 2 tokens 0.952x of torch.compile)" in lines[0]
    assert lines[0] in _report(rows).goals()


def test_every_rows_draws_are_made_ahead_in_the_order_the_rows_are_measured():
    """A sweep's large draws (inputs and float64 reference) take tens of seconds on one core: the
    benchmark hands the worker the whole list before its first row, as a tune does, so each is drawn
    on the host's other cores while the GPU times the rows before it."""
    worker = _scripted_worker()
    shapes = {"rmsnorm": [{"T": 16, "H": 4096}, {"T": 16384, "H": 8192}], "silu_and_mul": [{"T": 4, "D": 14336}]}
    report = benchmark.bench(worker, shapes, torch_modes=())
    assert [r.label for r in report.rows] == ["16x4096", "16384x8192", "4x14336"]
    first = next(i for i, (what, _) in enumerate(worker.asked) if what == "prefetch")
    rows = [i for i, (what, label) in enumerate(worker.asked) if what == "evaluate" and "baseline" in label]
    assert len(rows) == 3 and first < rows[0], worker.asked[:4]  # drawn ahead before the first row is timed
    labels = [label for label, _ in worker.asked[first][1]]
    assert list(dict.fromkeys(labels)) == ["rmsnorm 16x4096 bf16", "rmsnorm 16384x8192 bf16", "silu_and_mul 4x14336 bf16"]
    assert len(labels) > 3  # each shape's check draws and its timing's


def _scripted_worker():
    """An evaluation worker without a process: what the benchmark asks of it is recorded in `asked`."""
    from astra_kernels.tools.measuring import draws
    from astra_kernels.tools.measuring.evaluation import EvaluationResult, Timing
    from astra_kernels.tools.measuring.worker import EvaluationWorker

    from astra_kernels.jobs.torch_peers import PeerResult, measure_peer

    class Worker(EvaluationWorker):
        def __init__(self):
            self.device = {"name": "Scripted GPU", "arch": "sm_90", "multiprocessors": 132}
            self.device_index = 0
            self.asked: list = []

        def call(self, function, *args, timeout_s=None):
            if function is measure_peer:  # (kernel, shape, dtype, variant, mode, ...): no PyTorch here
                self.asked.append(("peer", f"{args[0]} {args[4]}"))
                return PeerResult(kernel=args[0], label="", mode=args[4], status="unavailable", message="scripted")
            assert function is draws.prefetch, function
            self.asked.append(("prefetch", [(problem.label, seed) for problem, seed in args[0]]))
            return 1

        def evaluate(self, request):
            self.asked.append(("evaluate", request.label))
            timing = Timing(median_us=2.0, min_us=2.0, max_us=2.0, spread=0.0, samples_us=[2.0],
                            launches_per_replay=1, input_sets=1, method="graph")
            return EvaluationResult(status="ok", timing=timing)

    return Worker()


def test_each_row_keeps_where_its_wall_time_went_and_the_report_sums_it(tmp_path):
    """A sweep's benchmark took 7-17 s a shape for topk_softmax and 2.3 for rotary_embedding, not broken
    down: each row now keeps its parts' wall seconds, and the report and bench.md sum them."""
    report = benchmark.bench(_scripted_worker(), {"rmsnorm": [{"T": 16, "H": 4096}, {"T": 4, "H": 4096}]},
                             torch_modes=())
    for row in report.rows:
        # no table for this GPU: no tuned part; no peers asked: none of theirs
        assert set(row.seconds) == {"baseline", "probes"} and all(v >= 0 for v in row.seconds.values())
    line = report.time_spent()
    assert line.startswith("wall seconds by part over 2 shapes: baseline ") and "probes" in line
    assert "Wall seconds by part over 2 shapes" in benchmark.render_markdown(report)
    older = BenchReport.model_validate_json(report.model_dump_json(exclude={"rows": {"__all__": {"seconds"}}}))
    assert older.time_spent() == "" and "Wall seconds" not in benchmark.render_markdown(older)


def _resume_folder(tmp_path, labels=("1x4096", "2x4096"), tuned=True):
    """A folder holding an earlier run's bench.json of silu_and_mul at `labels`: each row with a tuned
    column (configuration {}, as `_row` makes it) or, not `tuned`, measured where no table was."""
    out = tmp_path / "sweep"
    out.mkdir()
    report = _report([_row("silu_and_mul", label, 2.0, 1.0 if tuned else None) for label in labels])
    report.commands = ["astra bench --kernels silu_and_mul --shapes 1x4096,2x4096,3x4096"]
    (out / "bench.json").write_text(report.model_dump_json(indent=2))
    return out, (out / "bench.json").read_text()


def test_a_measuring_run_never_writes_over_an_earlier_runs_rows(tmp_path, capsys):
    """A run into a folder with a bench.json used to start it again from its first row, so a run cut
    early left fewer rows than were there: now it is refused in one line unless --resume."""
    out, before = _resume_folder(tmp_path)
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096,3x4096", "--out", str(out)]) == 2
    said = capsys.readouterr()
    assert "holds an earlier run's rows: --resume measures only the shapes it lacks" in said.err + said.out
    assert (out / "bench.json").read_text() == before
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--resume"]) == 2
    said = capsys.readouterr()
    assert "--resume needs --out DIR" in said.err + said.out
    (out / "bench.json").write_text("{not json")
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096", "--out", str(out), "--resume"]) == 2
    said = capsys.readouterr()
    assert f"--resume {out / 'bench.json'} is not the bench.json of `astra bench --out`" in said.err + said.out


def test_resume_with_nothing_left_renders_the_kept_rows_without_a_gpu(tmp_path, capsys):
    out, before = _resume_folder(tmp_path)
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096", "--out", str(out),
                     "--resume"]) == 0
    said = capsys.readouterr().out
    assert "--resume: 2 row(s) of" in said and "kept as measured, 0 shape(s) to measure" in said
    kept = BenchReport.model_validate_json((out / "bench.json").read_text())
    assert [r.label for r in kept.rows] == ["1x4096", "2x4096"] and (out / "bench.md").is_file()


def _scripted_cli(monkeypatch, out, tables=None, device="NVIDIA H200"):
    """`astra bench` as the CLI runs it, on a scripted worker and benchmark: what it asks for is in
    `asked`, bench.json as each checkpoint left it in `written`."""
    from astra_kernels.tools.measuring import worker as worker_module
    from astra_kernels.tools.toolchain import driver

    asked, written = [], []

    class Worker:
        def __init__(self, **_):
            self.device = {"name": device, "arch": "sm_90", "multiprocessors": 132}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def bench(worker, kernels, checkpoint=None, torch_modes=("eager", "compile"), input_layout="arena", pdl=False,
              **_):
        asked.append({k: [suite.load(k).spec.label(s) for s in v] for k, v in kernels.items()})
        report = _report([_row("silu_and_mul", "3x4096", 2.0, 1.5)])
        report.settings = benchmark.run_settings(torch_modes, input_layout, pdl)
        checkpoint(report)
        written.append(BenchReport.model_validate_json((out / "bench.json").read_text()))
        return report

    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(worker_module, "EvaluationWorker", Worker)
    monkeypatch.setattr(benchmark, "bench", bench)
    monkeypatch.setattr(benchmark, "bench_tables", lambda names, *a: {n: (tables or {}).get(n) for n in names})
    return asked, written


def test_resume_measures_only_the_shapes_it_lacks_and_keeps_both(tmp_path, capsys, monkeypatch):
    """What the worker is asked, and what bench.json holds after every row (the checkpoint) and at the
    end: the earlier rows and the new ones. A folder measured on another GPU is refused."""
    out, _ = _resume_folder(tmp_path, tuned=False)  # as this run, which has no table
    asked, written = _scripted_cli(monkeypatch, out)
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096,3x4096", "--out", str(out),
                     "--resume"]) == 0
    assert asked == [{"silu_and_mul": ["3x4096"]}]
    assert [r.label for r in written[0].rows] == ["1x4096", "2x4096", "3x4096"]  # the checkpoint keeps all
    final = BenchReport.model_validate_json((out / "bench.json").read_text())
    assert [r.label for r in final.rows] == ["1x4096", "2x4096", "3x4096"]
    assert "kept as measured, 1 shape(s) to measure" in capsys.readouterr().out
    assert not list(out.glob(".*.tmp")) and not (out / ".astra.lock").exists()

    _scripted_cli(monkeypatch, out, device="NVIDIA H100 80GB HBM3")
    before = (out / "bench.json").read_text()
    assert cli.main(["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,4x4096", "--out", str(out),
                     "--resume"]) == 2
    said = capsys.readouterr()
    assert "was measured on NVIDIA H200 with cold L2 in bf16, not on NVIDIA H100" in said.err + said.out
    assert (out / "bench.json").read_text() == before


def test_resume_refuses_rows_measured_otherwise_or_of_another_pick_and_remeasures_failed_ones(tmp_path, capsys,
                                                                                               monkeypatch):
    """The kept rows and the new ones must be one benchmark: the same --torch, --layout and --pdl, and
    the configurations this run's table picks at the kept shapes (a table re-tuned between two calls
    would mix two tables' rows in one summary). A kept row whose baseline or tuned kernel failed is
    measured again."""
    from astra_kernels.jobs.benchmark import shipped_table

    out, _ = _resume_folder(tmp_path)
    earlier = BenchReport.model_validate_json((out / "bench.json").read_text())
    earlier.settings = benchmark.run_settings(("compile",), "arena", False)
    (out / "bench.json").write_text(earlier.model_dump_json())
    asked, _ = _scripted_cli(monkeypatch, out)
    argv = ["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096,3x4096", "--out", str(out), "--resume"]
    assert cli.main(argv) == 2  # --torch eager,compile by default
    said = capsys.readouterr()
    assert "was measured with torch compile, layout arena, pdl off; this run asks for torch compile,eager" in said.out + said.err
    assert benchmark.run_settings(("compile", "eager"), "arena", False) == benchmark.run_settings(("eager", "compile"),
                                                                                                 "arena", False)
    assert asked == []

    table = shipped_table("silu_and_mul", "NVIDIA H200")
    asked, _ = _scripted_cli(monkeypatch, out, tables={"silu_and_mul": table})
    assert cli.main([*argv, "--torch", "compile"]) == 2  # the kept rows ran {} (the baseline), the table picks a template
    said = capsys.readouterr()
    assert "2 of the kept silu_and_mul rows (1x4096, 2x4096) ran another tuned column than this run would" in said.out + said.err
    assert asked == []

    for row in earlier.rows:
        row.tuned_config = table.pick(row.shape, 132, "sm_90").config
    earlier.rows[0].tuned_status = "incorrect: out differs"  # would come out the same: kept
    earlier.rows[1].tuned_status = "timeout: the worker's limit"  # may go otherwise: measured again
    (out / "bench.json").write_text(earlier.model_dump_json())
    assert cli.main([*argv, "--torch", "compile"]) == 0
    assert asked == [{"silu_and_mul": ["2x4096", "3x4096"]}]  # the timed-out row again, and the missing one


def test_resume_refuses_kept_rows_without_the_tuned_column_this_run_has_or_of_the_other_regime(tmp_path, capsys,
                                                                                               monkeypatch):
    from astra_kernels.jobs.benchmark import shipped_table

    out, _ = _resume_folder(tmp_path)
    earlier = BenchReport.model_validate_json((out / "bench.json").read_text())
    for row in earlier.rows:
        row.tuned_status, row.tuned_us = "", None  # measured with no table
    (out / "bench.json").write_text(earlier.model_dump_json())
    table = shipped_table("silu_and_mul", "NVIDIA H200")
    asked, _ = _scripted_cli(monkeypatch, out, tables={"silu_and_mul": table})
    argv = ["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096,3x4096", "--out", str(out), "--resume",
            "--torch", "compile"]
    assert cli.main(argv) == 2
    said = capsys.readouterr()
    assert "2 of the kept silu_and_mul rows (1x4096, 2x4096) ran another tuned column than this run would" in said.out + said.err
    for row in earlier.rows:
        row.tuned_status, row.tuned_us, row.tuned_config = "ok", 1.0, table.pick(row.shape, 132, "sm_90").config
    earlier.table_l2 = {"silu_and_mul": "warm"}
    (out / "bench.json").write_text(earlier.model_dump_json())
    assert cli.main(argv) == 2
    said = capsys.readouterr()
    assert "the kept silu_and_mul rows ran a table tuned with warm L2; this run's is tuned with cold L2" in said.out + said.err
    assert asked == []


def test_a_held_folder_or_a_stop_mid_write_leaves_bench_json_as_it_was(tmp_path, capsys, monkeypatch):
    """Another run holding the folder: refused before anything is read or measured. A stop (a time
    limit's signal) while a checkpoint is written: the file keeps the earlier rows, and the stop's
    line says how to go on."""
    from astra_kernels.jobs import outputs

    out, before = _resume_folder(tmp_path, tuned=False)
    asked, _ = _scripted_cli(monkeypatch, out)
    argv = ["bench", "--kernels", "silu_and_mul", "--shapes", "1x4096,2x4096,3x4096", "--out", str(out), "--resume"]
    with outputs.held(out):
        assert cli.main(argv) == 1  # as astra tune's FolderBusyError
    said = capsys.readouterr()
    assert "is writing to" in said.out + said.err and asked == [] and (out / "bench.json").read_text() == before

    def stopped(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "replace", stopped)
    assert cli.main(argv) == 130
    said = capsys.readouterr()
    assert "bench.json, every row measured (the same command with --resume goes on)" in said.out + said.err
    assert (out / "bench.json").read_text() == before and not list(out.glob(".*.tmp"))


def test_from_refuses_to_write_over_a_bench_json_it_does_not_render(tmp_path, capsys):
    out, before = _resume_folder(tmp_path)
    other = tmp_path / "other.json"
    other.write_text(_report([_row("rmsnorm", "16x4096", 3.0, 2.0)]).model_dump_json())
    assert cli.main(["bench", "--from", str(other), "--out", str(out)]) == 2
    said = capsys.readouterr()
    assert "holds rows that are not among the --from files" in said.out + said.err
    assert (out / "bench.json").read_text() == before
    assert cli.main(["bench", "--from", str(other), str(out / "bench.json"), "--out", str(out)]) == 0  # merged into it
    merged = BenchReport.model_validate_json((out / "bench.json").read_text())
    assert {r.kernel for r in merged.rows} == {"silu_and_mul", "rmsnorm"}
    assert cli.main(["bench", "--from", str(other), "--out", str(tmp_path / "new"), "--resume"]) == 2
    kept = (out / "bench.json").read_text()
    assert cli.main(["bench", "--from", str(out / "bench.json"), "--out", str(out), "--kernels", "rmsnorm"]) == 2
    said = capsys.readouterr()
    assert "--kernels would drop the other kernels' rows from" in said.out + said.err
    assert (out / "bench.json").read_text() == kept


def test_a_file_written_whole_is_left_as_it_was_by_a_stop_mid_write(tmp_path, monkeypatch):
    from astra_kernels.jobs import outputs

    target = tmp_path / "bench.json"
    target.write_text("the earlier calls' rows")

    def stopped(*_):
        raise KeyboardInterrupt  # a time limit's signal, between the write and the rename

    monkeypatch.setattr(outputs.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_whole(target, "half")
    assert target.read_text() == "the earlier calls' rows" and [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    monkeypatch.undo()
    outputs.write_whole(target, "all rows")
    assert target.read_text() == "all rows"


def test_the_torch_compile_peers_are_built_ahead_of_the_first_row(monkeypatch):
    """With --torch compile on this host's GPU, every shape's peer is built by peer_builds.py before
    the first row is timed (the worker's own compile then loads it); a build ahead that fails to
    start only costs the time: the rows are measured all the same."""
    from astra_kernels.jobs import peer_builds

    built: list = []

    def build_ahead(items, device_index=0, **kw):
        built.append((list(items), device_index, [what for what, _ in worker.asked if what != "prefetch"]))
        return peer_builds.BuiltAhead(built=len(items), seconds=0.5)

    monkeypatch.setattr(peer_builds, "build_ahead", build_ahead)
    monkeypatch.setattr(benchmark.importlib.util, "find_spec", lambda name: object())  # PyTorch "installed"
    shapes = {"rmsnorm": [{"T": 16, "H": 4096}, {"T": 4, "H": 4096}], "topk_softmax": [{"T": 8, "E": 64, "K": 8}]}
    worker, lines = _scripted_worker(), []
    report = benchmark.bench(worker, shapes, torch_modes=("eager", "compile"), progress=lines.append)
    items, device_index, asked_before = built[0]
    assert items == [("rmsnorm", {"T": 16, "H": 4096}, "bf16", "default"), ("rmsnorm", {"T": 4, "H": 4096}, "bf16", "default"),
                     ("topk_softmax", {"T": 8, "E": 64, "K": 8}, "bf16", "default")]
    assert device_index == 0 and "peer" not in asked_before and len(report.rows) == 3
    assert "torch.compile peers built ahead: 3 shape(s)" in "\n".join(lines)
    assert report.ahead_seconds["torch_compile_build_ahead"] >= 0 and "before the rows: " in report.time_spent()

    built.clear()  # eager only, or a worker of another host: nothing built here
    benchmark.bench(_scripted_worker(), shapes, torch_modes=("eager",))
    assert built == [] and not benchmark.builds_ahead(object())

    def cannot_start(items, device_index=0, **kw):
        raise OSError("no process can be started")

    monkeypatch.setattr(peer_builds, "build_ahead", cannot_start)
    lines.clear()
    report = benchmark.bench(_scripted_worker(), shapes, torch_modes=("compile",), progress=lines.append)
    assert len(report.rows) == 3 and "torch.compile peers not built ahead (OSError" in "\n".join(lines)
