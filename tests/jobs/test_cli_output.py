"""What `astra` prints when stdout is not a terminal (a pipe, a log, CI) is whole: no line
hard-wrapped at 80 columns (or at $COLUMNS), tables as Markdown with every cell whole, not cut to
`sil…`. Each command runs as a child process with stdout a pipe, as `astra kernels | cat` would,
and stdin not a terminal either (rich takes a width from any standard stream that is one)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from astra_kernels import suite
from rich.table import Table

from astra_kernels.cli.output import markdown_table

ROOT = Path(__file__).resolve().parents[2]
LONG_KERNEL = "nosuch_kernel_with_a_very_long_name_" + "that_goes_on_" * 8


def astra(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    """`astra ARGS | cat`: the command in a fresh interpreter (-P: the installed package, not
    whatever the working directory holds), stdout a pipe, no COLUMNS unless given, and nothing
    that would make rich treat the pipe as a terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-P", "-m", "astra_kernels.cli", *args], check=False, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=env, timeout=300)


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("columns", [None, "40"])
def test_piped_kernels_is_a_whole_markdown_table(columns):
    proc = astra("kernels", columns=columns)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "…" not in out
    lines = out.splitlines()
    header = lines.index("| kernel | computes | dtypes / variants | shape (--shapes) | shape sets | template space |")
    assert set(lines[header + 1]) <= set("|-:") and lines[header + 1].startswith("|---|")
    rows = _table_lines(out)[2:]
    assert len(rows) == len(suite.names())  # one line per kernel: no cell wrapped onto a line of its own
    for name, row in zip(suite.names(), rows):
        spec = suite.load(name).spec
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0] == name
        assert cells[3] == f"{'x'.join(spec.symbols)}<br>e.g. {spec.label(spec.default_shapes()[0])}"
        assert spec.summary.replace("|", "\\|") == cells[1]  # the whole summary, markup and all
        assert row.endswith(" |") and row.count(" | ") == 5


def test_kernels_json_names_the_shape_symbols_in_the_order_shapes_are_read():
    proc = astra("kernels", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {k["name"]: k for k in json.loads(proc.stdout)}
    assert sorted(listed) == sorted(suite.names())
    for name, entry in listed.items():
        spec = suite.load(name).spec
        assert entry["symbols"] == spec.symbols
        assert entry["shape_format"] == "x".join(spec.symbols)
        shape = spec.parse_shape(entry["example_shape"])  # what `--shapes` would make of it
        assert spec.label(shape) == entry["example_shape"] and shape in spec.all_shapes()


def test_piped_doctor_shows_every_value_whole():
    """The CUDA header path was the first casualty: `…/nvidia/cu13/incl…` at 80 columns."""
    report = json.loads(astra("doctor", "--json").stdout)
    proc = astra("doctor")
    assert "…" not in proc.stdout, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["| what | this machine |", "|---|---|"]
    assert lines[2:] == [f"| {key} | {value} |" for key, value in report.items()]


@pytest.mark.parametrize("columns", [None, "40"])
def test_an_error_longer_than_the_console_stays_on_one_line(tmp_path, columns):
    missing = tmp_path / ("a_folder_with_a_long_name_" * 4) / "missing.sqlite"
    assert len(str(missing)) > 80
    proc = astra("tune", "rmsnorm", "--replay", str(missing), columns=columns)
    assert proc.returncode == 2
    assert f"error: no results store at {missing} to replay" in proc.stdout.splitlines(), proc.stdout
    proc = astra("check", LONG_KERNEL, columns=columns)
    assert proc.returncode == 1
    line, = (line for line in proc.stdout.splitlines() if line.startswith("error:"))
    assert f"unknown kernel '{LONG_KERNEL}'" in line and f"{suite.names()[-1]} (a kernel folder" in line, proc.stdout
    assert line.endswith("ASTRA_KERNELS_PATH)"), proc.stdout  # whole, to its last word


def test_a_piped_space_report_keeps_each_reason_in_its_cell():
    proc = astra("space", "rmsnorm", "--shape", "16x4096", "--sample", "20", "--arch", "sm_90", columns="40")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("rmsnorm 16x4096 bf16 default on sm_90: 20 -> ")
    stages = [line.split(" | ")[0].lstrip("| ") for line in _table_lines(proc.stdout)[2:]]
    assert stages == ["space", "constraint", "compile", "hardware"] and "…" not in proc.stdout


def test_markdown_table_strips_markup_and_keeps_cells_on_their_line():
    table = Table(title="[bold]a title[/bold]", caption="a caption")
    table.add_column("name")
    table.add_column("us", justify="right")
    table.add_row("[green]ok[/green] \\[literal]", "1.50")
    table.add_row("a | b\nsecond line", "")
    assert markdown_table(table) == [
        "a title",
        "| name | us |",
        "|---|---:|",
        "| ok [literal] | 1.50 |",
        "| a \\| b<br>second line |  |",
        "a caption",
    ]


def _console_constructions(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Console"]


def test_the_commands_and_the_bench_scripts_share_one_console():
    """A script with its own Console() wraps and cuts again when piped; there is one, in cli/output.py."""
    sources = [*sorted((ROOT / "astra_kernels" / "cli").rglob("*.py")), *sorted((ROOT / "bench").glob("*.py"))]
    own = [hit for path in sources if path.name != "output.py" for hit in _console_constructions(path)]
    assert not own, f"these build their own rich Console; use astra_kernels.cli.output: {own}"


def _on_a_terminal(argv: list[str], timeout: float = 300) -> str:
    """Run `astra ARGV` with a pseudo-terminal as its stdout (what a user sees), return all it wrote."""
    import os
    import pty
    import select
    import subprocess
    import sys

    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    process = subprocess.Popen([sys.executable, "-P", "-m", "astra_kernels.cli", *argv], stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower, env={**env, "COLUMNS": "160", "TERM": "xterm"})
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            process.kill()
            raise AssertionError("no output for too long:\n" + b"".join(chunks).decode(errors="replace"))
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(30)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_long_work_on_a_terminal_shows_a_bar_saying_what_is_done(tmp_path):
    """astra space compiles a template's configurations (over a minute on a cold cache): a terminal
    gets a bar naming the work and counting it, gone once the table is printed."""
    import re

    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", _on_a_terminal(["space", "rmsnorm", "--shape", "16x4096",
                                                                  "--sample", "40", "--seed", "3"]))
    assert "rmsnorm 16x4096: compiling the configurations for sm_" in shown, shown
    assert re.search(r"\b(\d+)/\1\b", shown), shown  # the count of compiles, done/total, to the last
    assert "hardware" in shown  # then the table


def test_compile_progress_counts_every_configuration_once():
    from astra_kernels.tools.toolchain.compiler import compile_many
    from astra_kernels.tools.toolchain.nvrtc import CompileOptions

    source = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= N; }'
    seen = []
    outcomes = compile_many([(source, CompileOptions(defines={"N": n})) for n in range(1, 6)],
                            progress=lambda done, total: seen.append((done, total)), cache=False)
    assert len(outcomes) == 5 and seen[-1] == (5, 5) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_reader_that_leaves_early_is_no_traceback():
    """`astra kernels --json | head -1`: the reader may close the pipe before astra writes; that
    ends the command quietly (exit 141, as a shell reports SIGPIPE), never with a traceback."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-P", "-m", "astra_kernels.cli", "kernels", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # gone before the first byte
    errors = process.stderr.read().decode()
    assert process.wait(120) == 141 and "Traceback" not in errors and "BrokenPipe" not in errors, errors


def test_help_and_a_misspelled_option_piped(capsys):
    """Piped --help keeps each option's text on whole lines; a misspelled option is named with
    the command it was given to."""
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-P", "-m", "astra_kernels.cli", "tune", "--help"], capture_output=True,
                           text=True, env={k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}).stdout
    replay = next(line for line in shown.splitlines() if line.strip().startswith("--replay"))
    assert "copied to the run's store first" in replay, shown
    wrong = subprocess.run([sys.executable, "-P", "-m", "astra_kernels.cli", "tune", "rmsnorm", "--sampel", "3"],
                           capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stderr.startswith("astra tune: error: unrecognized arguments: --sampel"), \
        wrong.stderr


def test_tune_json_stays_json_when_the_run_goes_wrong(tmp_path):
    """`astra tune --json | program`: a run that measured nothing still prints its report as the
    whole of stdout (exit 1), and says what went wrong on stderr."""
    # 3x4096 is in no shape set of the H100 recording (the newest, a sweep's, has it)
    done = astra("tune", "rmsnorm", "--replay", "recorded:h100-2026-11-27", "--shapes", "3x4096", "--budget", "2", "--json",
                 "--out", str(tmp_path))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout)["shapes"][0]["label"] == "3x4096"
    assert "nothing was measured" in done.stderr and "3x4096 (unrecorded)" in done.stderr
