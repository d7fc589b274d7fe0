"""A user's own kernel folders beside the shipped suite (ASTRA_KERNELS_PATH, `--kernels-dir`): found,
loaded and compiled from outside the package; a name defined twice is an error naming both
folders; a broken folder fails alone; a path that is not a directory is one line."""

from __future__ import annotations

import json
import shutil

import pytest

from astra_kernels.cli import main
from astra_kernels import suite

RMSNORM = suite.SUITE_DIR / "rmsnorm"


def _kernel_folder(root, name: str, spec_name: str | None = None):
    """A copy of rmsnorm's folder named `name` under `root` (its SPEC named `spec_name`)."""
    folder = root / name
    folder.mkdir(parents=True)
    for file in suite.FILES:
        shutil.copyfile(RMSNORM / file, folder / file)
    spec = folder / "spec.py"
    spec.write_text(spec.read_text().replace('name="rmsnorm"', f'name="{spec_name or name}"'))
    return folder


def test_a_folder_on_the_path_is_a_kernel_beside_the_suite(kernels_path):
    _kernel_folder(kernels_path, "my_norm")
    assert "my_norm" in suite.names() and "rmsnorm" in suite.names()
    folder = suite.load("my_norm")
    assert folder.path == kernels_path / "my_norm" and not suite.is_shipped("my_norm") and suite.is_shipped("rmsnorm")
    assert folder.reference.__name__ == "astra_user_kernels.my_norm.reference"
    problem = suite.problem(folder, {"T": 4, "H": 4096}, "bf16")
    case = suite.make_case("my_norm", (("T", 4), ("H", 4096)), "bf16", "default", 1)
    assert problem.label.startswith("my_norm 4x4096") and case.expected["out"].shape == (4, 4096)


def test_the_cli_finds_kernels_in_kernels_dir_and_compiles_them(tmp_path, monkeypatch, capsys):
    """`--kernels-dir` on a command: listed by `astra kernels`, compiled by `astra check` (every
    baseline and template configuration at a shape, NVRTC, no GPU needed); the path is as it was after."""
    monkeypatch.delenv(suite.KERNELS_PATH, raising=False)
    root = tmp_path / "kernels"
    _kernel_folder(root, "my_norm")
    assert main(["kernels", "--kernels-dir", str(root), "--json"]) == 0
    listed = {k["name"] for k in json.loads(capsys.readouterr().out)}
    assert "my_norm" in listed and "rmsnorm" in listed
    assert main(["check", "my_norm", "--kernels-dir", str(root), "--shapes", "4x4096", "--samples", "2",
                 "--dtype", "bf16", "--variant", "default"]) == 0
    out = capsys.readouterr().out
    if "No GPU here" in out:  # CI: NVRTC compiles each binary; on a GPU the checks run too
        assert "compiled 3 binaries of my_norm (0 failed)" in out
    assert "my_norm" not in suite.names()  # --kernels-dir lasted as long as the command
    assert main(["space", "my_norm", "--shapes", "4x4096"]) == 1
    assert "unknown kernel 'my_norm'" in capsys.readouterr().out


def test_a_shipped_name_is_never_overridden(kernels_path, capsys):
    _kernel_folder(kernels_path, "rmsnorm")
    with pytest.raises(suite.KernelFolderError, match="defined by two folders") as raised:
        suite.load("rmsnorm")
    assert str(RMSNORM) in str(raised.value) and str(kernels_path / "rmsnorm") in str(raised.value)
    assert "never overridden" in str(raised.value)
    assert suite.load("silu_and_mul").name == "silu_and_mul"  # the others still load
    assert main(["kernels", "--json"]) == 1
    listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)}
    assert "defined by two folders" in listed["rmsnorm"]["error"] and "summary" in listed["silu_and_mul"]


def test_two_user_folders_of_one_name_name_both(tmp_path, kernels_path, monkeypatch):
    other = tmp_path / "theirs"
    _kernel_folder(kernels_path, "my_norm")
    _kernel_folder(other, "my_norm")
    monkeypatch.setenv(suite.KERNELS_PATH, f"{kernels_path}{__import__('os').pathsep}{other}")
    with pytest.raises(suite.KernelFolderError, match="give one of them another name"):
        suite.load("my_norm")


def test_a_broken_user_folder_fails_alone_and_names_its_file(kernels_path, capsys):
    _kernel_folder(kernels_path, "my_norm")
    broken = _kernel_folder(kernels_path, "my_broken")
    (broken / "reference.py").write_text("import numpy as np\n\ndef make_inputs(rng, shape, dtype, variant):\n"
                                         "    return undefined_name\n")
    spec = broken / "spec.py"
    spec.write_text(spec.read_text().replace("_SERVING = [", "_SERVING = = [", 1))
    with pytest.raises(suite.KernelFolderError, match=r"my_broken/spec.py:\d+: invalid syntax"):
        suite.load("my_broken")
    assert suite.load("my_norm").name == "my_norm"
    assert main(["kernels"]) == 1
    out = capsys.readouterr().out
    assert "kernel folder my_broken does not load" in out and "my_norm" in out


@pytest.mark.parametrize("old_import, error", [
    ("from astra_kernels.kernels_sglang.schema import KernelSpec",
     r"my_norm/spec.py:\d+: imports astra_kernels.kernels_sglang.schema, which moved to astra_kernels.suite.schema "
     r"on 2026-11-28 .*change the import"),
    ("from astra_kernels.kernels_sglang import suite",
     r"my_norm/spec.py:\d+: imports astra_kernels.kernels_sglang.suite, which moved to astra_kernels.suite on"),
    ("from astra_kernels.kernels_sglang import nosuch",  # not a moved module: the import's own error
     r"my_norm/spec.py:\d+: ImportError: cannot import name 'nosuch'"),
])
def test_a_folder_written_before_the_suite_code_moved_is_refused_naming_the_new_import(kernels_path, old_import, error):
    """Folders written before 2026-11-28 import the schema from astra_kernels.kernels_sglang, which
    holds only data now: the error names the old module, the new one and the line, no shim."""
    spec = _kernel_folder(kernels_path, "my_norm") / "spec.py"
    spec.write_text(f"{old_import}\n{spec.read_text()}")
    with pytest.raises(suite.KernelFolderError, match=error):
        suite.load("my_norm")


def test_a_path_that_is_not_a_directory_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(suite.KERNELS_PATH, str(tmp_path / "missing"))
    suite.load.cache_clear()
    assert main(["kernels"]) == 2
    assert "names " + str(tmp_path / "missing") + ", which is not a directory" in capsys.readouterr().out
    monkeypatch.delenv(suite.KERNELS_PATH)
    assert main(["kernels", "--kernels-dir", str(tmp_path / "missing")]) == 2
    assert "--kernels-dir " + str(tmp_path / "missing") + ": not a directory" in capsys.readouterr().out


def test_a_seed_naming_a_parameter_the_template_lacks_is_refused_when_the_folder_loads(kernels_path):
    """A misspelt seed would be left out at every shape without a word; the folder says so instead."""
    folder = _kernel_folder(kernels_path, "my_norm")
    spec = folder / "spec.py"
    spec.write_text(spec.read_text().replace('"PRELOAD_W": "1"', '"PRELOADW": "1"', 1))
    with pytest.raises(suite.KernelFolderError, match=r"my_norm/spec.py: seed .* sets PRELOADW, which "
                                                      r"my_norm/template.cu does not declare"):
        suite.load("my_norm")


def test_seeds_on_a_template_without_parameters_are_no_error(kernels_path):
    """A folder whose template is a fixed kernel (what `astra import-sglang` writes: SGLang's own,
    its spec a copy of the port's, seeds included in folders written before it cleared them) loads:
    there is no space to seed."""
    folder = _kernel_folder(kernels_path, "my_fixed")
    shutil.copyfile(RMSNORM / "baseline.cu", folder / "template.cu")
    loaded = suite.load("my_fixed")
    assert loaded.spec.seeds and not loaded.template.parameters
