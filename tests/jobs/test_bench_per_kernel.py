"""bench/bench_per_kernel.py over the H100 runs shipped in docs/bench/h100-2026-11-26b/: the
per-kernel figures docs/benchmarks.md's H100 table quotes, and one line for a file that is not a run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "bench" / "h100-2026-11-26b"


def run(capsys, monkeypatch, *paths) -> tuple[int, str]:
    spec = importlib.util.spec_from_file_location("bench_per_kernel", ROOT / "bench" / "bench_per_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["bench_per_kernel.py", *map(str, paths)])
    code = module.main()
    return code, capsys.readouterr().out


def test_the_h100_tables_figures(capsys, monkeypatch):
    code, out = run(capsys, monkeypatch, RUNS / "cold-astra" / "bench.json", RUNS / "warm-serving" / "bench.json")
    assert code == 0
    assert "| cold | silu_and_mul | 5 | 5 of 5 | 1.079x | 1.084x | 1.137x | 1.775x |" in out
    assert "| cold | fused_add_rmsnorm | 8 | 8 of 8 | 1.070x | 1.234x | 1.046x (5 shapes) | 1.122x |" in out
    assert "| cold | merge_attn_states | 5 | 5 of 5 | 1.028x | 1.133x | — | 1.028x |" in out
    assert "| warm | fused_add_rmsnorm | 14 | 11 of 14 | 0.993x | 1.140x | 0.993x | 1.109x |" in out


def test_a_file_that_is_not_a_run_is_one_line(capsys, monkeypatch, tmp_path):
    (tmp_path / "x.json").write_text("{}")
    code, out = run(capsys, monkeypatch, tmp_path / "x.json")
    assert code == 2 and out.startswith("error: ") and out.count("\n") == 1 and "x.json" in out


def test_by_set_splits_a_run_into_its_shape_sets(capsys, monkeypatch):
    """--by-set: the 2026-11-27 H100 run of both norms over astra and serving as one row per kernel and
    set (docs/benchmarks.md's table for the row length compiled in); a shape of both sets (rmsnorm
    1024x4096) counts in each, so the sets' shapes add up to more than the run's 17."""
    runs = ROOT / "docs" / "bench" / "h100-2026-11-27"
    code, out = run(capsys, monkeypatch, "--by-set", runs / "cold-norms" / "bench.json")
    assert code == 0
    assert "| cold | rmsnorm | astra | 8 | 8 of 8 | 1.079x | 1.279x | 1.062x (7 shapes) | 1.196x |" in out
    assert "| cold | fused_add_rmsnorm | serving | 14 | 13 of 14 | 1.047x | 1.147x | 1.048x | 1.157x |" in out
    assert out.count("| cold | rmsnorm |") == 2
