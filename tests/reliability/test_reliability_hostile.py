"""Issue 38's careless and hostile inputs to the command line (items 9, 10, 12, 14-17): each ends in
one line naming the problem, or in the output the docs promise; never a traceback, never an exit
0 that did nothing, never a hint that does not work when followed."""

from __future__ import annotations

import json
import shutil

import pytest

from astra_kernels import cli
from astra_kernels import suite

RMSNORM = suite.SUITE_DIR / "rmsnorm"


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _kernel_folder(root, name: str):
    folder = root / name
    folder.mkdir(parents=True)
    for file in suite.FILES:
        shutil.copyfile(RMSNORM / file, folder / file)
    spec = folder / "spec.py"
    spec.write_text(spec.read_text().replace('name="rmsnorm"', f'name="{name}"'))
    return folder


# --- 9: a kernel folder whose Python exits -----------------------------------------------------

@pytest.mark.parametrize("file, line", [("spec.py", "import sys; sys.exit(0)"),
                                        ("reference.py", "raise SystemExit(3)"),
                                        ("spec.py", "raise GeneratorExit()")])
def test_a_folder_whose_python_exits_is_a_broken_folder_naming_the_file(file, line, kernels_path, capsys):
    folder = _kernel_folder(kernels_path, "my_exit")
    path = folder / file
    path.write_text(path.read_text() + "\n" + line + "\n")
    at = f"my_exit/{file}:{len(path.read_text().splitlines())}: "
    with pytest.raises(suite.KernelFolderError, match=at):
        suite.load("my_exit")
    assert cli.main(["kernels"]) == 1
    out = capsys.readouterr().out
    assert "kernel folder my_exit does not load" in out and at in out and "rmsnorm" in out, out
    assert cli.main(["tune", "my_exit", "--replay", "recorded", "--out", str(kernels_path / "out")]) == 1
    assert at in _one_error_line(capsys.readouterr().out)


# --- 10 and 14: resuming `astra optimize` --------------------------------------------------------

@pytest.fixture
def stopping_agent(monkeypatch):
    """`astra optimize` whose fresh run stops as if Ctrl-C came right after the load step (its
    checkpoint written), and whose resumed run ends at once with the thread's state: what is
    checked here is what the command line makes of a thread, not the search (minutes of compiling).
    Yields the resumed runs' (thread, payload) calls."""
    from astra_kernels.graph import threads

    real, resumed = threads.run_thread, []

    def run_thread(app, payload, *, config, **kwargs):
        if payload is None:
            resumed.append((config["configurable"]["thread_id"], kwargs["context"]))
            return app.get_state(config).values
        real(app, payload, config=config, context=kwargs["context"], interrupt_after=["load"])
        raise KeyboardInterrupt()

    monkeypatch.setattr(threads, "run_thread", run_thread)
    yield resumed


def _stopped_run(kernel: str, out, capsys, *extra: str) -> str:
    """Start `astra optimize KERNEL --replay recorded` (stopped after its load step); the printed
    resume command."""
    assert cli.main(["optimize", kernel, "--replay", "recorded", "--shapes", "128x4096", "--thread", f"t-{kernel}",
                     "--out", str(out), *extra]) == 130
    said = capsys.readouterr().out
    hints = [line for line in said.splitlines() if line.startswith("resume with `")]
    assert len(hints) == 1, said
    return hints[0].removeprefix("resume with `").removesuffix("`")


def test_the_printed_resume_command_resumes_as_printed(stopping_agent, tmp_path, capsys):
    import shlex

    out = tmp_path / "agent dir"  # a space: the command is quoted as a shell reads it
    hint = _stopped_run("rmsnorm", out, capsys, "--rounds", "2", "--tune-seconds", "1.5", "--approve")
    words = shlex.split(hint)
    assert words[:3] == ["astra", "optimize", "rmsnorm"], hint
    for given in (["--replay", "recorded"], ["--rounds", "2"], ["--tune-seconds", "1.5"], ["--approve"],
                  ["--resume", "t-rmsnorm"], ["--out", str(out)]):
        assert shlex.join(given) in hint, hint
    assert "--shapes" not in hint and "--thread" not in hint, "the thread holds its shapes and its name"
    code = cli.main(words[1:])
    said = capsys.readouterr().out
    assert code != 2 and "no GPU" not in said, said  # the old hint, without --replay, exited 2 here
    (thread, context), = stopping_agent
    assert thread == "t-rmsnorm" and context.rounds == 2 and context.tune_seconds == 1.5 and context.approve


def test_resuming_another_kernels_thread_is_refused_naming_both(stopping_agent, tmp_path, capsys):
    out = tmp_path / "agent"
    _stopped_run("silu_and_mul", out, capsys)
    assert cli.main(["optimize", "rmsnorm", "--resume", "t-silu_and_mul", "--replay", "recorded",
                     "--checkpoints", str(out / "checkpoints.sqlite"), "--out", str(tmp_path / "rmsnorm")]) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert "is a run of silu_and_mul, not of rmsnorm" in line and "t-silu_and_mul" in line, line
    assert not stopping_agent, "nothing of the other kernel's thread was run"


# --- 12: paths that are files or cannot be written; input that ends -----------------------------

SHIPPED_TABLE = suite.SUITE_DIR / "tuned" / "h200" / "silu_and_mul.json"


@pytest.fixture
def a_file(tmp_path):
    """A regular file where a folder is wanted: the tests run as root, which ignores permission
    bits, so "cannot be written" is a path under a file."""
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


@pytest.mark.parametrize("argv, code", [
    (["new", "mykern", "--dir", "FILE"], 1),
    (["new", "mykern", "--dir", "FILE/sub"], 1),
    (["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", "FILE"], 1),
    (["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", "FILE/sub"], 1),
    (["import-sglang", "FILE"], 2),
    (["import-sglang", "FILE/sub"], 2),
    (["tune", "silu_and_mul", "--replay", "recorded", "--shapes", "16x4096", "--sample", "2", "--out", "FILE/sub"], 1),
    (["optimize", "rmsnorm", "--replay", "recorded", "--shapes", "128x4096", "--out", "FILE/sub"], 1),
])
def test_a_path_that_is_a_file_or_under_one_is_one_line_naming_it(argv, code, a_file, capsys):
    assert cli.main([a.replace("FILE", str(a_file)) for a in argv]) == code
    line = _one_error_line(capsys.readouterr().out)
    assert line.startswith("error: ") and f"{a_file} is a file" in line or "a file is there" in line, line


def test_checkpoints_that_are_a_directory_are_one_line(tmp_path, capsys):
    assert cli.main(["optimize", "rmsnorm", "--replay", "recorded", "--shapes", "128x4096",
                     "--checkpoints", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys.readouterr().out)
    assert f"checkpoints {tmp_path}: a directory, not a checkpoint file" in line, line


CUDA = 'extern "C" __global__ void one(float* x) { x[threadIdx.x] = 1.0f; }\n'


def test_a_compile_cache_that_cannot_be_written_is_a_warning_not_a_traceback(a_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(a_file / "cache"))
    source = tmp_path / "one.cu"
    source.write_text(CUDA)
    assert cli.main(["compile", str(source)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err and "registers" in captured.out, captured
    warning = _one_error_line(captured.err)
    assert warning.startswith("warning: the compile cache") and str(a_file) in warning and "ASTRA_CACHE_DIR" in warning


def test_tune_under_a_home_that_cannot_be_written_compiles_without_the_cache(a_file, tmp_path, monkeypatch, capsys):
    for name in ("ASTRA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(a_file))  # its cache under a file; the replay compiles what its recording holds
    assert cli.main(["tune", "silu_and_mul", "--replay", "recorded", "--shapes", "16x4096", "--budget", "4",
                     "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "warning: the compile cache" in captured.err and (tmp_path / "out" / "dispatch.json").is_file(), captured


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_export_of_a_folder_whose_report_is_malformed_is_one_line(content, tmp_path, capsys):
    folder = tmp_path / "tuned"
    folder.mkdir()
    shutil.copyfile(SHIPPED_TABLE, folder / "dispatch.json")
    (folder / "report.json").write_text(content)
    assert cli.main(["export", str(folder), "--out", str(tmp_path / "export")]) == 1
    line = _one_error_line(capsys.readouterr().out)
    assert f"{folder / 'report.json'} is not a tuning report" in line, line


def test_approve_with_stdin_closed_is_one_line(tmp_path, monkeypatch, capsys):
    """`astra optimize --approve < /dev/null`: the question meets the end of input (EOFError)."""
    import io

    from astra_kernels.graph import threads

    def run_thread(app, payload, *, config, answer, **kwargs):
        return {"accepted": answer({"question": "accept candidate 1?"})}

    monkeypatch.setattr(threads, "run_thread", run_thread)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["optimize", "rmsnorm", "--replay", "recorded", "--shapes", "128x4096", "--approve",
                     "--out", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert "Traceback" not in out and "EOFError" not in out, out
    assert "stdin is closed" in out and "--resume" in out, out


# --- 15: a tune piped to a log says something as it goes -----------------------------------------

def test_tune_to_a_log_prints_a_line_as_each_shape_is_searched(tmp_path, capsys):
    """Not a terminal (capsys): no bar, so a line per shape as its search ends, before the report
    (which comes only when every shape, the cross-measurement and the checks are done)."""
    # a recording that measured most of the space (the newest, a sweep's, holds six configurations a shape)
    assert cli.main(["tune", "silu_and_mul", "--replay", "recorded:h200-2026-11-26", "--shapes", "16x4096,64x8192", "--sample", "30",
                     "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("# silu_and_mul"))
    searched = [line for line in lines[:heading] if ": measured " in line]
    assert [line.split(":")[0] for line in searched] == ["silu_and_mul 16x4096", "silu_and_mul 64x8192"], lines[:heading]
    assert "baseline 4.35 us" in searched[1], searched


# --- 16: what a replay's report says -------------------------------------------------------------

@pytest.fixture(scope="module")
def replayed_tune(tmp_path_factory):
    """`astra tune silu_and_mul --replay recorded:h200-2026-11-26` at one shape of the recording's
    fifteen, over a sample of its space (the whole space is minutes of compiling on a fresh cache)."""
    out = tmp_path_factory.mktemp("replayed") / "out"
    assert cli.main(["tune", "silu_and_mul", "--replay", "recorded:h200-2026-11-26", "--shapes", "16x4096", "--sample", "150",
                     "--out", str(out)]) == 0
    return out


def test_a_replays_report_is_dated_by_its_recording_not_today(replayed_tune):
    heading = (replayed_tune / "report.md").read_text().splitlines()[0]
    assert heading == "# silu_and_mul: replayed from a recording of NVIDIA H200 (sm_90), 2026-11-26", heading
    assert json.loads((replayed_tune / "report.json").read_text())["recorded"] == "2026-11-26"


def test_a_replays_evaluation_counts_agree_between_the_table_and_its_rounds(replayed_tune):
    """The table counts what was measured; the rounds counted the replay's refusals too (71 against
    several hundred)."""
    text = (replayed_tune / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 16x4096 |"))
    in_table = int(row.split("|")[7].split("(")[0])
    rounds = [line for line in text.splitlines() if line.startswith("- 16x4096 ") and " evaluated, best " in line]
    in_rounds = sum(int(line.split(" evaluated, best ")[0].rsplit(" ", 1)[1]) for line in rounds)
    report = json.loads((replayed_tune / "report.json").read_text())
    proposed = len(report["shapes"][0]["search"]["trials"])
    assert rounds and in_table == in_rounds, (in_table, rounds)
    # A replay proposes only what its recording holds (the rest is never compiled), so here every
    # proposal was measured; a cluster's replay (RecordedWorker) still refuses some.
    assert in_table == proposed


def test_report_of_a_tune_folder_covers_the_runs_shapes_only(replayed_tune, tmp_path, capsys):
    assert cli.main(["report", str(replayed_tune), "--out", str(tmp_path / "report"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    shapes = [s["label"] for g in summary["groups"] for s in g["shapes"]]
    assert shapes == ["16x4096"], shapes  # its store, a copy of the recording, holds fifteen


# --- 17: what the output says, and where it goes ------------------------------------------------

ROOT = suite.SUITE_DIR.parent


def test_check_shows_compiler_output_as_written_not_as_markup(kernels_path, capsys):
    """`y[i] = x[i]` in a compile error showed as `y = x`: rich read `[i]` as a style."""
    folder = _kernel_folder(kernels_path, "my_bad")
    baseline = folder / "baseline.cu"
    baseline.write_text(baseline.read_text() + "\n__device__ float bad(const float* x, int i) { return x[i] + nope[i]; }\n")
    assert cli.main(["check", "my_bad", "--shapes", "4x4096", "--samples", "1"]) == 1
    out = capsys.readouterr().out
    assert "nope[i]" in out and "x[i]" in out, out


def test_a_kernel_name_that_is_not_ascii_is_named_as_such(tmp_path, capsys):
    assert cli.main(["new", "ядро", "--dir", str(tmp_path)]) == 2
    assert "must be an ASCII identifier" in _one_error_line(capsys.readouterr().out)
    assert not any(tmp_path.iterdir())


def _with_stdout_closed(*args: str):
    """`astra ARGS | head -0`: stdout a pipe whose reader has gone before the command writes."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-P", "-m", "astra_kernels.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=120)
    finally:
        os.close(write)


BENCH = ROOT / "docs" / "bench" / "h100-2026-11-26b" / "cold-astra" / "bench.json"


def test_output_to_a_pipe_whose_reader_left_ends_quietly_and_writes_its_files_first(tmp_path):
    done = _with_stdout_closed("bench", "--from", str(BENCH), "--out", str(tmp_path / "bench"))
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr  # rich's own: exit 1, silent
    assert sorted(p.name for p in (tmp_path / "bench").iterdir()) == ["bench.json", "bench.md", "bench.svg"]
    done = _with_stdout_closed("kernels")
    assert done.returncode == 141 and not done.stderr.strip(), done.stderr


def test_an_sglang_shape_not_taken_names_the_sizes_that_are():
    wrapper = (ROOT / "astra_kernels" / "jobs" / "generated" / "sglang" / "rmsnorm.cu.in").read_text()
    reason = next(line for line in wrapper.splitlines() if line.startswith("//@ require H ==")).split(" -- ")[1]
    assert "64, 128 and 256" in reason and "multiples of 512 from 8192 to 16384" in reason, reason


def test_the_compile_cache_variable_is_documented():
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "ASTRA_CACHE_DIR" in text and "XDG_CACHE_HOME" in text
