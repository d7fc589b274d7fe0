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
