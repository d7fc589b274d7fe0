"""The `astra` command line on a machine without a GPU: what it prints and how it fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.tools.toolchain.driver import gpu_available

SCALE = str(Path(__file__).parents[1] / "support" / "cuda" / "scale_bf16.cu")


def test_compile_reports_resources_as_json(capsys):
    code = cli.main(["compile", SCALE, "-D", "SCALE_THREADS=128", "-D", "SCALE_BIAS=1.0f", "--json", "--no-cache"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["arch"].startswith("sm_") and report["kernels"]["scale_bf16"]["registers"] > 0


def test_compile_error_exits_1_with_the_line(capsys):
    assert cli.main(["compile", SCALE, "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "SCALE_THREADS" in out or "SCALE_BIAS" in out
    assert "line" in out


def test_missing_file_and_bad_define():
    assert cli.main(["compile", "no/such/file.cu"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["compile", SCALE, "-D", "1BAD=2"])


def test_unknown_arch_is_an_error_not_a_crash(capsys):
    assert cli.main(["compile", SCALE, "--arch", "sm_1", "-D", "SCALE_THREADS=1", "-D", "SCALE_BIAS=1"]) == 1
    assert "sm_1" in capsys.readouterr().out


def test_kernels_lists_the_suite(capsys):
    assert cli.main(["kernels", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    silu = next(k for k in listed if k["name"] == "silu_and_mul")
    assert "16x4096" in silu["shapes"]["astra"] and silu["template_space"] > 100


def test_check_unknown_kernel(capsys):
    assert cli.main(["check", "silu_and_mull"]) == 1
    assert "unknown kernel" in capsys.readouterr().out


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_check_without_gpu_compiles_and_says_so(capsys):
    assert cli.main(["check", "silu_and_mul", "--set", "odd", "--dtype", "fp16", "--variant", "gelu"]) == 0
    out = capsys.readouterr().out
    assert "no GPU here" in out and "0 failed" in out


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_check_of_a_table_compiles_every_configuration_it_runs_and_refuses_what_is_no_table(tmp_path, capsys):
    from astra_kernels.suite import tuned_tables

    table = str(tuned_tables.table_path("silu_and_mul", "h200"))
    assert cli.main(["check", "silu_and_mul", "--table", table, "--shapes", "3x1002", "--dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "no GPU here" in out and "0 failed" in out
    (tmp_path / "bad.json").write_text("{}")
    for argv, words in [(["silu_and_mul", "--table", str(tmp_path / "none.json")], "no dispatch table at"),
                        (["silu_and_mul", "--table", str(tmp_path / "bad.json")], "not a dispatch table"),
                        (["rmsnorm", "--table", table], "is a table of silu_and_mul, not of rmsnorm"),
                        (["rmsnorm", "--table", "shipped"], "takes the tables of the GPU it runs on")]:
        assert cli.main(["check", *argv]) == 2
        out = capsys.readouterr().out
        assert words in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_doctor_says_there_is_no_gpu(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    assert "none" in json.loads(capsys.readouterr().out)["gpu"]


def test_space_reports_each_stage(capsys):
    assert cli.main(["space", "silu_and_mul", "--shape", "16x4096", "--sample", "30", "--arch", "sm_90", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == 30
    assert report["after_constraints"] >= report["after_compile"] >= len(report["candidates"])
    assert {p["stage"] for p in report["pruned"]} <= {"constraint", "compile", "hardware"}


KERNEL_WITH_HEADERS = '''#include "scale.cuh"
#include "common.cuh"
extern "C" __global__ void scaled(float* x) { x[threadIdx.x] *= SCALE; }
'''


def test_compile_finds_the_sources_own_headers_the_suites_and_include_folders(tmp_path, capsys):
    """A kernel folder's file includes what lies beside it and the suite's common.cuh; -I adds a
    folder. The header's text keys the cache: an edited header is compiled, not answered from it."""
    (tmp_path / "k").mkdir()
    (tmp_path / "inc").mkdir()
    source = tmp_path / "k" / "kernel.cu"
    source.write_text(KERNEL_WITH_HEADERS)
    (tmp_path / "k" / "scale.cuh").write_text('#include "deeper.cuh"\n')
    (tmp_path / "inc" / "deeper.cuh").write_text("#define SCALE 2.0f\n")
    argv = ["compile", str(source), "-I", str(tmp_path / "inc"), "-D", "DTYPE=float", "-D", "ELEM_BYTES=4", "--json"]
    assert cli.main(argv) == 0, capsys.readouterr().out
    assert json.loads(capsys.readouterr().out)["kernels"]["scaled"]["registers"] > 0
    assert cli.main(argv) == 0 and json.loads(capsys.readouterr().out)["cached"]
    (tmp_path / "inc" / "deeper.cuh").write_text("#define SCALE 3.0f\n")
    assert cli.main(argv) == 0 and not json.loads(capsys.readouterr().out)["cached"]
    assert cli.main(argv[:2] + argv[4:]) == 1  # without -I, deeper.cuh is not found: NVRTC says so
    assert "deeper.cuh" in capsys.readouterr().out


def test_compile_of_a_suite_template_finds_common_cuh_and_says_how_to_fill_it(capsys):
    baseline = Path(__file__).parents[2] / "kernels_sglang" / "rmsnorm" / "baseline.cu"
    assert cli.main(["compile", str(baseline), "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "cannot open source file" not in out and "is a template" in out and "astra check" in out, out


def test_the_default_output_folders_are_ignored_by_git():
    """`astra tune`/`optimize` write out/KERNEL and `astra export` export/KERNEL by default: run
    from a checkout, neither may show up as files to commit."""
    import shutil
    import subprocess

    root = Path(__file__).parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["out/rmsnorm/report.md", "out/rmsnorm-agent/best.cu", "export/rmsnorm/rmsnorm.cu"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=root, capture_output=True, text=True).stdout.split()
    assert ignored == paths


def test_set_takes_several_sets_each_shape_once():
    from argparse import Namespace

    from astra_kernels.cli.arguments import shapes_from
    from astra_kernels import suite
    from astra_kernels.tools.errors import UsageError

    folder = suite.load("rmsnorm")
    both = shapes_from(folder, Namespace(shapes=None, set="astra,serving"))
    astra, serving = folder.spec.shapes["astra"], folder.spec.shapes["serving"]
    assert both[:len(astra)] == astra and all(s in both for s in serving)
    assert len(both) == len(astra) + len([s for s in serving if s not in astra])  # each shape once
    assert shapes_from(folder, Namespace(shapes=None, set="astra, serving")) == both
    with pytest.raises(UsageError, match="rmsnorm has no shape set 'nosuch'"):
        shapes_from(folder, Namespace(shapes=None, set="astra,nosuch"))


def test_several_kernels_each_take_the_sets_they_have():
    """`astra tune K1 ... K7 --set sweep,astra,serving` (the whole suite's tables at once): topk_softmax
    has no astra set, so it takes sweep and serving; a name no kernel has is refused, and so is a
    kernel that has none of the names, so a misspelt set is never skipped in silence."""
    from argparse import Namespace

    from astra_kernels.cli.arguments import sets_named_somewhere, shapes_from
    from astra_kernels import suite
    from astra_kernels.tools.errors import UsageError

    topk, rmsnorm = suite.load("topk_softmax"), suite.load("rmsnorm")
    args = Namespace(shapes=None, set="sweep,astra,serving")
    sets_named_somewhere([topk, rmsnorm], args)
    assert shapes_from(topk, args, tuning=True, several=True) == shapes_from(
        topk, Namespace(shapes=None, set="sweep,serving"), tuning=True)
    assert shapes_from(rmsnorm, args, tuning=True, several=True) == shapes_from(rmsnorm, args, tuning=True)
    with pytest.raises(UsageError, match="topk_softmax has no shape set 'astra'"):
        shapes_from(topk, args, tuning=True)  # one kernel: every name must be its own
    with pytest.raises(UsageError, match="no kernel given has a shape set 'serveing'"):
        sets_named_somewhere([topk, rmsnorm], Namespace(shapes=None, set="sweep,serveing"))
    with pytest.raises(UsageError, match="topk_softmax has none of the shape sets 'astra'"):
        shapes_from(topk, Namespace(shapes=None, set="astra"), several=True)
    assert cli.main(["tune", "topk_softmax", "rmsnorm", "--set", "sweep,serveing", "--replay", "recorded"]) == 2


def test_shapes_take_the_sweeps_token_counts_at_a_width():
    """`sweep@WIDTH`: a model's own width along the token axis (the sweep's 27 counts), among
    other shapes, each shape once; a width that is not one (too few or too many sizes, none) is a
    one-line UsageError saying how to write it."""
    from astra_kernels import suite
    from astra_kernels.suite.schema import SWEEP_TOKENS
    from astra_kernels.tools.errors import UsageError

    rmsnorm, topk = suite.load("rmsnorm").spec, suite.load("topk_softmax").spec
    assert rmsnorm.parse_shapes("sweep@5120") == [{"T": t, "H": 5120} for t in SWEEP_TOKENS]
    assert topk.parse_shapes("1x64x8,Sweep@64x8") == [{"T": t, "E": 64, "K": 8} for t in SWEEP_TOKENS]
    assert rmsnorm.parse_shapes("16x4096,16x4096") == [{"T": 16, "H": 4096}]
    for bad, spec in (("sweep@", rmsnorm), ("sweep@5120x3", rmsnorm), ("sweep@x5120", rmsnorm), ("sweep@64", topk)):
        with pytest.raises(UsageError, match=f"is not a {spec.name} sweep; write sweep@{'x'.join(spec.symbols[1:])} "):
            spec.parse_shapes(bad)
