"""Issue 38's careless and hostile inputs to the command line (items 9, 10, 12, 14-17): each ends in
one line naming the problem, or in the output the docs promise; never a traceback, never an exit
0 that did nothing, never a hint that does not work when followed."""

from __future__ import annotations

import json
import shutil

import pytest

from astra_kernels import cli
from astra_kernels.kernels_sglang import suite

RMSNORM = suite.SUITE_DIR / "rmsnorm"


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.fixture
def kernels_path(tmp_path, monkeypatch):
    """An empty user directory on ASTRA_KERNELS_PATH; the loaded kernels forgotten before and after."""
    root = tmp_path / "mine"
    root.mkdir()
    monkeypatch.setenv(suite.KERNELS_PATH, str(root))
    suite.load.cache_clear()
    yield root
    suite.load.cache_clear()


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
