"""The reliability suite's figures for docs/reliability.md: faults injected and survived, bad
inputs tried, data lost.

    python bench/reliability.py [TEST_FILE ...] [--json out.json] [-k EXPR] [--gpu]

Runs the fault suite (tests/reliability/: test_reliability_*.py and the kernel-fault tests,
test_kernel_faults.py and test_kernel_faults_on_gpu.py) under pytest in this process and counts, per theme, the cases
run and how they ended. Each case injects one fault or one bad input and asserts that the run
goes on (or stops with an error naming the problem), that the fault is recorded with its reason,
and that nothing measured before it is lost, so "survived" is a passed case and "data lost" is
what a failed case of the data-loss themes would show. GPU cases (marked `gpu`) skip without a
GPU; `--gpu` runs only them, for the lead's section of the document.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What each file injects; a file not named here is listed under its own name.
THEMES = {
    "test_reliability_chat.py": "chat-model faults mid-run",
    "test_reliability_kill.py": "SIGKILL mid-tuning and mid-graph, then resume",
    "test_reliability_store.py": "results-store faults: concurrent writers, kills, torn and damaged files",
    "test_reliability_inputs.py": "malformed kernel folders, templates and expressions",
    "test_reliability_security.py": "security: no eval or shell, strict checkpoints, planted keys",
    "test_reliability_injection.py": "security: hostile text from recordings and files, Studio's context",
    "test_reliability_cli.py": "bad input on the command line, and runs that measure nothing",
    "test_reliability_signals.py": "Ctrl-C, SIGTERM and SIGKILL while compiling: fast exit, no process left",
    "test_reliability_data.py": "output folders: failed runs, concurrent runs, re-imports, exports; values no run honours",
    "test_kernel_faults.py": "kernel faults, CPU side: compile timeout, guard bands, refusals",
    "test_kernel_faults_on_gpu.py": "kernel faults on the GPU",
}
# Themes whose cases each assert that no committed measurement was lost.
DATA_THEMES = {"test_reliability_chat.py", "test_reliability_kill.py", "test_reliability_store.py",
               "test_reliability_data.py"}


class _Outcomes:
    """A pytest plugin keeping each case's outcome: failed if any phase failed, skipped if its
    setup skipped, else passed."""

    def __init__(self):
        self.cases: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.cases[report.nodeid] = "failed"
        elif report.skipped:
            self.cases.setdefault(report.nodeid, "skipped")
        elif report.when == "call":
            self.cases.setdefault(report.nodeid, "passed")


def suite_files() -> list[str]:
    tests = ROOT / "tests" / "reliability"
    return [str(p) for p in sorted(tests.glob("test_reliability_*.py"))] + [
        str(tests / name) for name in ("test_kernel_faults.py", "test_kernel_faults_on_gpu.py") if (tests / name).is_file()]


def _gpu() -> str:
    from astra_kernels.tools.toolchain.driver import local_arch

    arch = local_arch(0)
    return f"GPU {arch}" if arch else "no GPU"


def run(files: list[str], keyword: str | None, gpu: bool, command: str) -> dict:
    args = ["-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT), "-m", "gpu" if gpu else "not gpu", *files]
    if keyword:
        args += ["-k", keyword]
    outcomes = _Outcomes()
    code = pytest.main(args, plugins=[outcomes])
    themes: dict[str, Counter] = defaultdict(Counter)
    for nodeid, outcome in outcomes.cases.items():
        themes[nodeid.split("::")[0].rsplit("/", 1)[-1]][outcome] += 1
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPU cores, {_gpu()}, "
                   f"Python {platform.python_version()})",
        "pytest_exit_code": int(code),
        "themes": {name: dict(counts) for name, counts in sorted(themes.items())},
        "cases": outcomes.cases,
    }


def render(figures: dict) -> str:
    lines = [f"`{figures['command']}`, {figures['date']}, {figures['machine']}:", "",
             "| theme | file | cases | survived | failed | skipped |", "|---|---|---|---|---|---|"]
    total = Counter()
    for name, counts in figures["themes"].items():
        total.update(counts)
        lines.append(f"| {THEMES.get(name, name)} | `tests/reliability/{name}` | {sum(counts.values())} | "
                     f"{counts.get('passed', 0)} | {counts.get('failed', 0)} | {counts.get('skipped', 0)} |")
    lines.append(f"| all | | {sum(total.values())} | {total.get('passed', 0)} | {total.get('failed', 0)} | "
                 f"{total.get('skipped', 0)} |")
    data = [n for n in figures["themes"] if n in DATA_THEMES]
    checked = sum(figures["themes"][n].get("passed", 0) for n in data)
    broken = sum(figures["themes"][n].get("failed", 0) for n in data)
    lines += ["", f"Data lost: {'none' if not broken else 'SEE THE FAILED CASES'}: {checked} passing cases of the "
                  f"{len(data)} data themes (chat faults, kills, store faults) each assert that the measurements, "
                  f"checkpoints or files there before the fault are all still there, unchanged; {broken} failed."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files (default: the fault suite)")
    parser.add_argument("--json", help="also write the figures and every case's outcome here")
    parser.add_argument("-k", dest="keyword", help="only the cases pytest -k selects")
    parser.add_argument("--gpu", action="store_true", help="only the cases marked gpu (they need one)")
    args = parser.parse_args()
    command = " ".join(["python bench/reliability.py", *sys.argv[1:]])
    figures = run(args.files or suite_files(), args.keyword, args.gpu, command)
    print(render(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures["pytest_exit_code"]


if __name__ == "__main__":
    sys.exit(main())
