"""Hostile text from files and recordings never becomes code, markup or a place to write (issue 38,
items 1-4): a results store's device name, a hand-edited report.json, an `--out` path with a newline
and a command line reach the generated launcher.py, the exported .cu, its README and the Markdown
reports only escaped; LangGraph Studio's server takes only paths under its working root, a known
replay and a loopback model server; the docs say that a kernel folder is code.

The planted strings are built so that the unescaped files of before were valid and ran them: a
device name that closes launcher.py's docstring, opens a line of host code in the .cu, or raw HTML
in the Markdown."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.jobs import benchmark, tuning
from astra_kernels.jobs.exporting import cuda_file as export
from astra_kernels.suite import tuned_tables
from astra_kernels.tools.errors import UsageError
from astra_kernels.tools.measuring.results import ResultsStore
from astra_kernels.tools.search.runner import Budget, StoredEvaluator
from support.scripted_gpu import FOLDER, SHAPES, ScriptedWorker

ROOT = Path(__file__).resolve().parents[2]
# Closes the docstring, runs a line, reopens one; then raw HTML and a table cell break for the Markdown.
PLANTED_DEVICE = 'X"""\nimport os; open("PWNED","w")\n"""<img src=x onerror=alert(1)>|cell'
# A newline then host code: live C++ after a `// Tuned on:` line; a trailing backslash splices the next line.
HOST_CODE = '\n#include "/etc/passwd"\nstatic int pwned = system("touch PWNED");\n// \\'


class _PlantedWorker(ScriptedWorker):
    device = {**ScriptedWorker.device, "name": PLANTED_DEVICE}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> Path:
    """`astra tune --replay STORE` of a store recorded by a GPU whose name is PLANTED_DEVICE."""
    root = tmp_path_factory.mktemp("planted")
    worker = _PlantedWorker()
    with ResultsStore(root / "gpu.sqlite") as store:
        tuning.tune(tuning.TuneRequest(FOLDER, SHAPES, "bf16", sample=40, seed=2, strategy="random",
                                       budget=Budget(evaluations=6)), worker, StoredEvaluator(worker, store))
    code = cli.main(["tune", "silu_and_mul", "--replay", str(root / "gpu.sqlite"), "--shapes", "16x4096,64x8192",
                     "--strategy", "exhaustive", "--sample", "40", "--seed", "2", "--budget", "1000",
                     "--out", str(root / "out")])
    assert code == 0
    return root / "out"


def test_a_recordings_device_name_cannot_run_code_when_the_launcher_is_imported(replayed, tmp_path, monkeypatch):
    text = (replayed / "launcher.py").read_text()
    tree = ast.parse(text)
    assert [type(node).__name__ for node in tree.body[:1]] == ["Expr"]  # the docstring, then the imports
    assert not any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) for node in tree.body), \
        "a call at the launcher's top level"
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("planted_launcher", replayed / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # what its docstring tells the user to do
    assert not (tmp_path / "PWNED").exists()
    assert callable(module.load) and module.TABLE.kernel == "silu_and_mul"
    # The name is still there to read, on one line, its newlines written as \n.
    assert 'X"""\\nimport os; open("PWNED","w")\\n"""' in module.__doc__.splitlines()[0]


def test_a_recordings_device_name_is_inert_text_in_the_markdown_report(replayed):
    report = tuning.TuneReport.model_validate_json((replayed / "report.json").read_text())
    assert report.device == PLANTED_DEVICE  # the record keeps the name as it was recorded
    text = (replayed / "report.md").read_text()
    assert "<img" not in text and "&lt;img" in text
    heading = text.splitlines()[0]
    assert heading.startswith("# silu_and_mul: ") and "\\|cell" in heading
    assert not any(line.startswith(("import os", '"""')) for line in text.splitlines())
    bench = benchmark.BenchReport(device=PLANTED_DEVICE, arch="sm_90\n# owned", date="2026-11-27", dtype="bf16",
                                  commands=["astra bench `x`\n# owned"], torch_version="<i>2</i>")
    markdown = benchmark.render_markdown(bench)
    assert not re.search(r"<(img|i)\b", markdown) and "``astra bench `x`\\n# owned``" in markdown, markdown
    assert not any(line.startswith(("# owned", "import os")) for line in markdown.splitlines())


def _hostile_tuning_folder(tmp_path: Path) -> Path:
    """A tuning output folder whose report.json was edited: device, arch and date carry host code."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    shutil.copy(tuned_tables.TUNED_DIR / "h200" / "silu_and_mul.json", folder / "dispatch.json")
    (folder / "report.json").write_text(json.dumps(
        {"device": "NVIDIA H200" + HOST_CODE, "arch": "sm_90 */" + HOST_CODE, "date": "2026-11-27" + HOST_CODE}))
    return folder


def test_an_edited_report_and_an_out_path_with_a_newline_reach_the_export_only_as_comment_text(tmp_path):
    folder = _hostile_tuning_folder(tmp_path)
    out = tmp_path / ("out" + HOST_CODE.replace("/", "_"))  # a folder name may hold newlines
    command = shlex.join(["astra", "export", str(folder), "--out", str(out)])
    assert "\n" in command
    export.export(export.resolve_source(folder), out, command=command)
    cu = (out / "silu_and_mul.cu").read_text().splitlines()
    header = cu[:cu.index(next(line for line in cu if line.startswith("#define DTYPE")))]
    code = [line for line in header if line.strip() and not line.startswith("//")]
    assert not code, f"lines of code in the .cu's header comment: {code}"
    assert not any(line.rstrip().endswith("\\") for line in header), "a comment line that splices the next"
    assert not any("pwned" in line for line in cu if not line.startswith("//"))
    tuned_on = next(line for line in header if line.startswith("// Tuned on:"))
    assert 'NVIDIA H200\\n#include "/etc/passwd"' in tuned_on  # still there to read, on its line
    readme = (out / "README.md").read_text().splitlines()
    assert not any(line.startswith(("#include", "static int", "// ")) for line in readme), readme
    ast.parse((out / "silu_and_mul_launch.py").read_text())


def test_a_define_takes_only_an_identifier_and_an_integer():
    from astra_kernels.jobs.generated_files import define_line

    assert define_line("THREADS", 128) == "#define THREADS 128"
    for name, value in [("THREADS 1\n#include <x>", 1), ("1X", 1), ("VEC", "8; system(0)"), ("VEC", True)]:
        with pytest.raises(UsageError, match="#define"):
            define_line(name, value)


@pytest.mark.parametrize("field, value", [
    ("out", "/etc/astra"), ("out", "../outside"), ("results", "sub/../../outside.sqlite"),
    ("replay", "/tmp/elsewhere.sqlite"), ("replay", "recorded:../../x"),
    ("base_url", "http://attacker.example/v1"), ("evaluator", {"device": "x"}), ("session", {"x": 1}),
])
def test_studios_server_refuses_a_context_outside_its_working_root(tmp_path, monkeypatch, field, value):
    """The graph `langgraph dev` serves (langgraph.json) takes the context as a client's JSON: a web
    page in the user's browser can send one, so a path may not leave the server's working folder and
    the model server (which gets the API key) must be this machine, unless the user allows a host."""
    from astra_kernels.graph.studio import graph

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASTRA_STUDIO_MODEL_HOSTS", raising=False)
    with pytest.raises(UsageError, match=f"^Studio context: {field} ") as raised:
        graph.invoke({"kernel": "silu_and_mul"}, context={field: value})
    assert "\n" not in str(raised.value)


def test_studios_server_takes_paths_under_its_root_and_allowed_hosts(tmp_path, monkeypatch):
    from astra_kernels.graph import RunContext
    from astra_kernels.nodes.context import StudioContext

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASTRA_STUDIO_MODEL_HOSTS", raising=False)
    StudioContext(out="out/studio/x", results=str(tmp_path / "r.sqlite"), replay="recorded:h200-2026-11-24",
                  base_url="http://127.0.0.1:8000/v1")
    StudioContext(replay="recorded", base_url="http://localhost:11434/v1")
    with pytest.raises(UsageError, match="base_url"):
        StudioContext(base_url="https://api.example.com/v1")
    monkeypatch.setenv("ASTRA_STUDIO_MODEL_HOSTS", "api.example.com")
    StudioContext(base_url="https://api.example.com/v1")
    RunContext(out="/anywhere", base_url="http://anyhost/v1")  # Python's own use keeps its freedom


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_docs_say_that_loading_a_kernel_folder_runs_its_python():
    readme = _section((ROOT / "README.md").read_text(), "## Your own kernel")
    security = _section((ROOT / "docs" / "reliability.md").read_text(), "## Security")
    for text in (readme, security):
        assert "runs its `spec.py` and `reference.py`" in " ".join(text.split())
    studio = (ROOT / "docs" / "studio.md").read_text()
    assert "ASTRA_STUDIO_MODEL_HOSTS" in studio and "access-control-allow-origin" in studio


def test_a_wheels_version_string_reaches_the_imported_spec_only_as_text(tmp_path):
    """`astra import-sglang --from WHEEL` reads SGLang's version from the wheel's METADATA into the
    spec.py and the wrapper .cu it writes: a version that closes a string must stay text."""
    from astra_kernels.jobs import importing

    version = '1"""+__import__("os").system("touch PWNED")+"""\n#include "/etc/passwd"'
    sources = importing.Sources(jit=tmp_path, sglang_version=version, sglang_licence=None, tvm_ffi_include=tmp_path,
                                tvm_ffi_version="0", tvm_ffi_licences=[], origin="test")
    recipe = importing.RECIPES["rmsnorm"]
    files = importing._folder_files(recipe, sources, {"default": [{"T": 16, "H": 4096}]})
    tree = ast.parse(files["spec.py"])
    assert not any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "__import__" for n in ast.walk(tree))
    assert not [line for line in files["baseline.cu"].splitlines() if line.startswith('#include "/etc')]


def test_a_source_path_reaches_the_new_kernels_spec_and_cu_only_as_text(tmp_path):
    """`astra new NAME --from PATH` writes the path into spec.py's docstring and the .cu's first
    comment: a path whose name closes the docstring or starts a line must stay text."""
    folder = tmp_path / 'k"""\nimport os; open("PWNED","w")\n"""\n#include "x'
    folder.mkdir()
    source = folder / "scale_add.cu"
    shutil.copyfile(ROOT / "tests" / "support" / "cuda" / "scale_add.cu", source)
    assert cli.main(["new", "scale_add", "--from", str(source), "--dir", str(tmp_path / "kernels")]) == 0
    written = tmp_path / "kernels" / "scale_add"
    tree = ast.parse((written / "spec.py").read_text())
    assert isinstance(tree.body[0], ast.Expr) and not any(isinstance(n, ast.Import) for n in tree.body)
    assert not [line for line in (written / "baseline.cu").read_text().splitlines() if line.startswith('#include "x')]


def test_a_kernel_argument_that_is_no_identifier_is_refused_by_name(tmp_path, capsys):
    source = tmp_path / "odd.cu"
    source.write_text('extern "C" __global__ void odd(const float* x, float* y"), int n) {}\n')
    assert cli.main(["new", "odd", "--from", str(source), "--dir", str(tmp_path / "kernels")]) == 2
    assert "its name must be a C identifier" in capsys.readouterr().out
    assert not (tmp_path / "kernels" / "odd").exists()
