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
def test_doctor_says_there_is_no_gpu(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    assert "none" in json.loads(capsys.readouterr().out)["gpu"]


def test_space_reports_each_stage(capsys):
    assert cli.main(["space", "silu_and_mul", "--shape", "16x4096", "--sample", "30", "--arch", "sm_90", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == 30
    assert report["after_constraints"] >= report["after_compile"] >= len(report["candidates"])
    assert {p["stage"] for p in report["pruned"]} <= {"constraint", "compile", "hardware"}
