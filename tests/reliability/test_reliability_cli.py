"""Bad input on the command line, and runs that end without measuring anything: each a one-line
error naming the problem and a non-zero exit, never a traceback, and never an exit 0 that
reports nothing (issue 16's rows, each tried as a user would type it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.jobs import benchmark
from astra_kernels.suite import recordings

ROOT = Path(__file__).resolve().parents[2]

MALFORMED_SHAPES = ["16x", "0x0", "abc", "16x4096x2", "16x4096,,", "-5x4096", ""]
# Every command that takes shapes, as a user would start it on a machine without a GPU (a replay
# where the command measures, so the shape is the first thing that can go wrong).
SHAPE_COMMANDS = {
    "tune": ["tune", "rmsnorm", "--replay", "recorded", "--out", "OUT"],
    "space": ["space", "rmsnorm"],
    "check": ["check", "rmsnorm"],
    "optimize": ["optimize", "rmsnorm", "--replay", "recorded", "--out", "OUT"],
    "export": ["export", "--gpu-kind", "h200", "--kernel", "rmsnorm", "--out", "OUT"],
    "bench": ["bench", "--kernels", "rmsnorm", "--out", "OUT"],
}


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.parametrize("shape", MALFORMED_SHAPES)
@pytest.mark.parametrize("command", list(SHAPE_COMMANDS))
def test_a_malformed_shape_is_one_line_and_exit_2(command, shape, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in SHAPE_COMMANDS[command]] + [f"--shapes={shape}"]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert line.startswith("error: ") and repr(shape) in line and "TxH" in line, line
    assert not (tmp_path / "out").exists(), "a refused input writes nothing"


def test_verify_reads_its_shapes_the_same_way(tmp_path, capsys):
    out = tmp_path / "tuned"
    assert cli.main(["tune", "rmsnorm", "--replay", "recorded", "--shapes", "128x4096", "--sample", "2",
                     "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--shapes", "16x"]) == 2
    assert "'16x' is not a rmsnorm shape" in _one_error_line(capsys.readouterr().out)


@pytest.mark.parametrize("argv, says", [
    (["tune", "rmsnorm", "--variant", "zz"], "rmsnorm has no variant 'zz'; it has default"),
    (["tune", "rmsnorm", "--dtype", "fp64"], "rmsnorm does not run in fp64; it runs in"),
    (["tune", "per_token_group_quant_fp8", "--shapes", "1x100"],
     "per_token_group_quant_fp8 does not run at 1x100: the op is defined on whole groups of 128"),
    (["optimize", "per_token_group_quant_fp8", "--shapes", "1x100"], "does not run at 1x100"),
    (["space", "rmsnorm", "--shape", "16x4096", "--variant", "zz"], "no variant 'zz'"),
    (["tune", "rmsnorm", "--set", "nosuch"], "rmsnorm has no shape set 'nosuch'; it has"),
    (["tune", "rmsnorm", "--start", "/nonexistent/dispatch.json"], "--start: no dispatch table at /nonexistent"),
    (["tune", "rmsnorm", "--start", f"{ROOT}/pyproject.toml"], "pyproject.toml: not a dispatch table"),
    (["tune", "rmsnorm", "--start", f"{ROOT}/kernels_sglang/tuned/h200/silu_and_mul.json"],
     "is a table of silu_and_mul in bf16 (default), not of rmsnorm in bf16 (default)"),
    (["tune", "silu_and_mul", "--variant", "gelu", "--start", f"{ROOT}/kernels_sglang/tuned/h200/silu_and_mul.json"],
     "not of silu_and_mul in bf16 (gelu)"),
    (["tune", "rmsnorm", "--start", f"{ROOT}/tests"], "no dispatch table at"),
    (["tune", "rmsnorm", "--start", " "], "--start needs a table: shipped, a dispatch.json"),
    (["tune", "rmsnorm", "--start", f"{ROOT}/pyproject.toml", "--ray"], "pyproject.toml: not a dispatch table"),
])
def test_what_the_kernel_does_not_run_at_is_named_before_any_work(argv, says, tmp_path, capsys):
    assert cli.main([*argv, "--replay", "recorded", "--out", str(tmp_path)] if argv[0] != "space" else argv) == 2
    assert says in _one_error_line(capsys.readouterr().out)


@pytest.mark.parametrize("argv", [
    ["tune", "rmsnorm", "--budget", "-3"], ["tune", "rmsnorm", "--budget", "0"],
    ["tune", "rmsnorm", "--seconds", "-1"], ["tune", "rmsnorm", "--seconds", "nan"],
    ["tune", "rmsnorm", "--search-rounds", "0"], ["tune", "rmsnorm", "--at-least", "-1"],
    ["tune", "rmsnorm", "--sample", "0"], ["optimize", "rmsnorm", "--rounds", "-2"],
    ["optimize", "rmsnorm", "--wall-seconds", "0"], ["space", "rmsnorm", "--shape", "16x4096", "--sample", "-4"],
    ["check", "rmsnorm", "--samples", "x"], ["export", "--sms", "0"],
])
def test_a_number_no_run_can_take_is_refused_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(argv)
    assert raised.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"argument {argv[-2]}" in line and repr(argv[-1]) in line, line


@pytest.mark.parametrize("argv, says", [
    (["optimize", "rmsnorm", "--candidates", "2"], "--candidates is now --best-of"),
    (["optimize", "rmsnorm", "--retries=1"], "--retries is now --fixes"),
    (["eval-agent", "rmsnorm", "--candidates", "2", "--retries", "0"], "--candidates is now --best-of; --retries is now --fixes"),
    (["tune", "rmsnorm", "--rounds", "2"], "--rounds is now --search-rounds"),
])
def test_a_renamed_flag_is_refused_naming_its_new_name(argv, says, capsys):
    """The flags renamed on 2026-11-29 (one meaning per name) are refused, as any unknown one,
    with the new name in the same line; an unknown flag gets no such hint."""
    with pytest.raises(SystemExit) as raised:
        cli.main(argv)
    assert raised.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "unrecognized arguments" in line and f"({says})" in line, line
    with pytest.raises(SystemExit):
        cli.main(["tune", "rmsnorm", "--bogus"])
    assert "is now" not in _one_error_line(capsys.readouterr().err)


def test_space_takes_shapes_spelled_as_every_other_command(capsys):
    assert cli.main(["space", "rmsnorm", "--shapes", "16x4096", "--sample", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 2


@pytest.mark.parametrize("argv", [
    ["tune", "rmsnorm", "--shapes", "1x4095"],  # a shape the recording never measured
    ["tune", "silu_and_mul", "--shapes", "16x4096", "--replay", "RMSNORM"],  # another kernel's recording
])
def test_a_replay_that_measures_nothing_says_so_and_fails(argv, tmp_path, capsys):
    argv = [a.replace("RMSNORM", str(recordings.resolve("recorded", "rmsnorm"))) for a in argv]
    replay = [] if "--replay" in argv else ["--replay", "recorded"]
    assert cli.main([*argv, *replay, "--sample", "3", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "nothing was measured" in out and "holds no evaluation there" in out and argv[3] in out, out


def test_an_optimize_run_that_measures_nothing_fails(tmp_path, capsys):
    assert cli.main(["optimize", "rmsnorm", "--shapes", "1x4095", "--replay", "recorded", "--out", str(tmp_path)]) == 1
    assert "nothing was measured" in capsys.readouterr().out


def test_resuming_an_unknown_thread_leaves_no_files(tmp_path, capsys):
    out = tmp_path / "fresh"
    assert cli.main(["optimize", "rmsnorm", "--resume", "nosuch", "--replay", "recorded", "--out", str(out)]) == 2
    assert "no checkpoints at" in _one_error_line(capsys.readouterr().out)
    assert not out.exists(), list(out.rglob("*"))


def test_an_unknown_model_provider_is_named_with_the_known_ones(tmp_path, capsys):
    assert cli.main(["optimize", "rmsnorm", "--model", "nosuch:xyz", "--replay", "recorded",
                     "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "unknown model provider 'nosuch'" in out and "openai" in out and "anthropic" in out, out
    assert "--resume" not in out, "no resume hint for a run that stopped before its first checkpoint"
    assert not any(tmp_path.iterdir()), "a typo in --model writes nothing (it left a copy of the recording)"


def _bench_report(rows, date):
    return benchmark.BenchReport(device="NVIDIA H200", arch="sm_90", date=date, dtype="bf16", rows=[
        benchmark.BenchRow(kernel=k, label=label, shape={"T": 1, "H": 1}, dtype="bf16", variant="default",
                           bytes_moved=1, baseline_us=base, tuned_us=tuned, baseline_status="ok", tuned_status="ok")
        for k, label, base, tuned in rows])


def test_bench_from_keeps_one_row_per_shape_the_newest_runs(tmp_path, capsys):
    old = _bench_report([("rmsnorm", "16x4096", 3.0, 2.0), ("silu_and_mul", "16x4096", 2.0, 1.0)], "2026-11-01")
    new = _bench_report([("rmsnorm", "16x4096", 3.0, 2.5)], "2026-11-20")
    for name, report in (("new.json", new), ("old.json", old)):
        (tmp_path / name).write_text(report.model_dump_json())
    assert cli.main(["bench", "--from", str(tmp_path / "new.json"), str(tmp_path / "old.json"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "measured in more than one file" in out and "rmsnorm 16x4096" in out
    merged = json.loads(out[out.index("{"):])
    rows = [(r["kernel"], r["label"], r["tuned_us"]) for r in merged["rows"]]
    assert sorted(rows) == [("rmsnorm", "16x4096", 2.5), ("silu_and_mul", "16x4096", 1.0)], rows


def test_bench_from_takes_kernels_and_names_the_ones_it_lacks(tmp_path, capsys):
    both = _bench_report([("rmsnorm", "16x4096", 3.0, 2.0), ("silu_and_mul", "16x4096", 2.0, 1.0)], "2026-11-01")
    (tmp_path / "a.json").write_text(both.model_dump_json())
    assert cli.main(["bench", "--from", str(tmp_path / "a.json"), "--kernels", "rmsnorm", "--json"]) == 0
    assert [r["kernel"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["rmsnorm"]
    assert cli.main(["bench", "--from", str(tmp_path / "a.json"), "--kernels", "nosuch"]) == 2
    assert "nosuch: not in" in _one_error_line(capsys.readouterr().out)


@pytest.mark.parametrize("content", [None, "{not json", '{"device": 1}'])
def test_bench_from_a_file_that_is_not_a_report_is_one_line(content, tmp_path, capsys):
    path = tmp_path / "bench.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["bench", "--from", str(path)]) == 2
    assert str(path) in _one_error_line(capsys.readouterr().out)
