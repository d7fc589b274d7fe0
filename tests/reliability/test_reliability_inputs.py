"""Bad input: malformed kernel folders, templates and expressions (a person's or a model's), each
a clear error that names the file and the line, never a traceback, a hang or a guess.

Broken kernel folders are copies of rmsnorm's under a temporary directory that stands in for the
suite (this process only), each with one defect."""

from __future__ import annotations

import importlib
import json
import shutil
import time
import uuid

import pytest

from support.agent_fakes import FakeGPU, ScriptedChatModel, decision
from astra_kernels import cli
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.templating.expressions import Expression, ExpressionError
from astra_kernels.tools.templating.template import TemplateError, parse_template

RMSNORM = suite.SUITE_DIR / "rmsnorm"


@pytest.fixture
def make_folder(tmp_path, monkeypatch):
    """make_folder(file=new text or None to delete, ...) -> the name of a copy of rmsnorm's folder
    with those changes; `{name}` in a text is the folder's name."""
    package = importlib.import_module("astra_kernels.kernels_sglang")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setattr(suite, "SUITE_DIR", tmp_path)

    def make(**changes) -> str:
        name = f"kernel_{uuid.uuid4().hex[:8]}"
        folder = tmp_path / name
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        for file in suite.FILES:
            shutil.copyfile(RMSNORM / file, folder / file)
        spec = folder / "spec.py"
        spec.write_text(spec.read_text().replace('name="rmsnorm"', f'name="{name}"'))
        for file, text in changes.items():
            target = folder / file.replace("_", ".", 1)  # spec_py -> spec.py
            if text is None:
                target.unlink()
            elif isinstance(text, bytes):
                target.write_bytes(text)
            else:
                target.write_text(text.replace("{name}", name))
        return name

    yield make
    suite.load.cache_clear()


def _spec_text() -> str:
    return (RMSNORM / "spec.py").read_text()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_copy_of_a_good_folder_loads(make_folder):
    """The control: what the other cases break loads when nothing is broken."""
    name = make_folder()
    assert suite.load(name).spec.name == name and suite.load(name).template.parameters


SPEC = _spec_text()
BROKEN_FOLDERS = {
    "spec.py does not parse": (
        {"spec_py": SPEC.replace("_SERVING = [", "_SERVING = = [", 1)}, "spec.py", "_SERVING =", "invalid syntax"),
    "spec.py raises as it runs": (
        {"spec_py": SPEC.replace("_SERVING = [", "_SERVING = undefined_name + [", 1)}, "spec.py", "_SERVING =",
        "NameError"),
    "spec.py imports what does not exist": (
        {"spec_py": SPEC.replace("schema import", "schema import NoSuchThing,", 1)}, "spec.py",
        "schema import", "ImportError"),
    "a shape lacks a symbol": (
        {"spec_py": SPEC.replace('_ODD = [{"T": t, "H": h}', '_ODD = [{"T": t}', 1)}, "spec.py", "SPEC = ",
        "must set exactly"),
    "an argument uses an unknown symbol": (
        {"spec_py": SPEC.replace('shape=["H"]', 'shape=["HIDDEN"]', 1)}, "spec.py", "SPEC = ",
        "unknown symbol(s) ['HIDDEN']"),
    "no SPEC": ({"spec_py": SPEC.replace("SPEC = ", "SPECIFICATION = ", 1)}, "spec.py", None, "defines no SPEC"),
    "SPEC names another kernel": ({"spec_py": SPEC}, "spec.py", None, "SPEC.name is 'rmsnorm'"),
    "reference.py lacks make_inputs": (
        {"reference_py": (RMSNORM / "reference.py").read_text().replace("def make_inputs(", "def make_input(")},
        "reference.py", None, "defines no make_inputs()"),
    "reference.py does not parse": ({"reference_py": "def reference(:\n"}, "reference.py", "def reference(:",
                                    "invalid syntax"),
    "no reference.py": ({"reference_py": None}, "reference.py", None, "missing; a kernel folder holds"),
    "no baseline.cu": ({"baseline_cu": None}, "baseline.cu", None, "missing; a kernel folder holds"),
    "no template.cu": ({"template_cu": None}, "template.cu", None, "missing; a kernel folder holds"),
    "baseline.cu is not text": ({"baseline_cu": b"\xff\xfe\x00binary\x89PNG"}, "baseline.cu", None, "not UTF-8"),
    "template.cu has a directive typo": (
        {"template_cu": (RMSNORM / "template.cu").read_text().replace("//@ param ROWS:", "//@ parm ROWS:", 1)},
        "template.cu", "//@ parm ROWS:", "unknown directive 'parm'"),
    "baseline.cu declares a parameter": (
        {"baseline_cu": "//@ param X: 1, 2\n" + (RMSNORM / "baseline.cu").read_text()}, "baseline.cu", None,
        "declares parameters"),
}


@pytest.mark.parametrize("case", list(BROKEN_FOLDERS))
def test_a_broken_kernel_folder_is_an_error_naming_the_file_and_line(make_folder, case):
    changes, file, line_of, says = BROKEN_FOLDERS[case]
    name = make_folder(**changes)
    with pytest.raises(AstraError) as raised:
        suite.load(name)
    message = str(raised.value)
    assert f"{name}/{file}" in message and says in message, message
    if line_of is not None:
        text = (suite.SUITE_DIR / name / file).read_text()
        assert f"{file}:{_line_of(text, line_of)}" in message, message


def test_the_cli_says_what_is_wrong_with_a_folder_instead_of_a_traceback(make_folder, capsys):
    name = make_folder(spec_py=SPEC.replace("_SERVING = [", "_SERVING = = [", 1))
    assert cli.main(["space", name, "--shape", "16x4096"]) == 1
    out = capsys.readouterr().out
    assert "error:" in out and f"{name}/spec.py:" in out.replace("\n", "") and "Traceback" not in out


GOOD = """//@ kernel: k
//@ param VEC: 1, 2, 4
//@ derive N = D // VEC
//@ grid: T
//@ block: min(N, 256)
extern "C" __global__ void k(float* x) {}
"""
SYMBOLS = {"T", "D", "ELEM_BYTES", "SMS", "SM"}
ENV = {"T": 16, "D": 4096, "ELEM_BYTES": 2, "SMS": 132, "SM": 90}

BAD_TEMPLATES = {
    "param without a colon": ("//@ param VEC: 1, 2, 4", "//@ param VEC 1, 2, 4", "malformed param directive"),
    "param named by a number": ("//@ param VEC: 1, 2, 4", "//@ param 2VEC: 1, 2", "malformed param directive"),
    "derive without =": ("//@ derive N = D // VEC", "//@ derive N D // VEC", "malformed derive directive"),
    "require with nothing": ("//@ block: min(N, 256)", "//@ block: min(N, 256)\n//@ require", "malformed require"),
    "grid without a colon": ("//@ grid: T", "//@ grid T", "malformed grid directive"),
    "unbalanced parentheses": ("//@ block: min(N, 256)", "//@ block: min(N, 256", "cannot parse"),
    "an unknown parameter in an expression": ("//@ grid: T", "//@ grid: T * ROWS", "undefined name(s) ROWS"),
    "a function that is not allowed": ("//@ grid: T", "//@ grid: open(T)", "not an allowed function"),
    "an attribute": ("//@ grid: T", "//@ grid: T.bit_length()", "not an allowed function"),
    "a string": ("//@ grid: T", "//@ grid: 'T'", "only numbers are allowed"),
    "an exponent bomb": ("//@ derive N = D // VEC", "//@ derive N = 10 ** 10 ** 10", "beyond 64"),
    "a shift bomb": ("//@ derive N = D // VEC", "//@ derive N = 1 << (1 << 40)", "beyond 64"),
    "nesting too deep to parse": ("//@ grid: T", "//@ grid: " + "+" * 5000 + "T", "nested too deeply"),
    "a sum too long to walk": ("//@ grid: T", "//@ grid: " + "+".join(["T"] * 3000), "nested too deeply"),
    "a default off the list": ("//@ grid: T", "//@ grid: T\n//@ default: VEC=3", "not among"),
    "a directive given twice": ("//@ grid: T", "//@ grid: T\n//@ grid: T", "already given on line 4"),
}


@pytest.mark.parametrize("case", list(BAD_TEMPLATES))
def test_a_bad_template_line_is_named_with_its_line(case):
    old, new, says = BAD_TEMPLATES[case]
    text = GOOD.replace(old, new, 1)
    bad_line = next(i for i, (a, b) in enumerate(zip(GOOD.splitlines() + [""] * 3, text.splitlines()), 1) if a != b)
    started = time.perf_counter()
    with pytest.raises(TemplateError) as raised:
        template = parse_template(text, "bad.cu", SYMBOLS)
        template.instantiate(template.default, ENV)  # some faults only show when evaluated
    message = str(raised.value)
    assert says in message, message
    assert message.startswith(f"bad.cu:{bad_line}:") or message.startswith(f"bad.cu:{bad_line + 1}:"), message
    assert time.perf_counter() - started < 2  # refused, not computed


INSTANTIATE_FAULTS = {
    "division by zero in the grid": ("//@ grid: T", "//@ grid: T // (VEC - 1)", "division by zero"),
    "an infinite block": ("//@ block: min(N, 256)", "//@ block: 1e308 * 10", "OverflowError"),
    "a complex size": ("//@ block: min(N, 256)", "//@ block: (0 - N) ** 0.5", "TypeError"),
    "a negative shift": ("//@ grid: T", "//@ grid: T << (VEC - 2)", "negative shift"),
    "min of nothing": ("//@ grid: T", "//@ grid: min()", "TypeError"),
}


@pytest.mark.parametrize("case", list(INSTANTIATE_FAULTS))
def test_an_expression_that_fails_for_a_configuration_names_its_directive_line(case):
    """Parsed fine, fails for VEC=1 at this shape: the error names the grid or block line (it said
    line 0 before), and it is a TemplateError the tuner records, not an exception that stops it."""
    old, new, says = INSTANTIATE_FAULTS[case]
    text = GOOD.replace(old, new, 1)
    template = parse_template(text, "bad.cu", SYMBOLS)
    line = _line_of(text, new.split(":")[0] + ":")
    with pytest.raises(TemplateError, match=f"^bad.cu:{line}: .*{says}"):
        template.instantiate({"VEC": 1}, ENV)


def test_expressions_refuse_bombs_quickly():
    started = time.perf_counter()
    for text in ("2 ** 2 ** 2 ** 2 ** 2 ** 2", "10 ** 10 ** 10", "1 << 100000"):
        with pytest.raises(ExpressionError, match="beyond 64"):
            Expression(text)({})
    assert Expression("2 ** 64")({}) == 1 << 64  # the bound still allows every real size
    assert time.perf_counter() - started < 1


def test_a_model_template_with_a_bomb_is_a_failed_attempt_and_the_run_goes_on(tmp_path):
    """The templater parses the model's template in the agent's process: an exponent bomb in it is
    recorded as an invalid candidate with the line, and the run continues to its report."""
    bomb = (suite.SUITE_DIR / "silu_and_mul" / "template.cu").read_text().replace(
        "//@ kernel:", "//@ derive HUGE = 10 ** 10 ** 10\n//@ kernel:", 1)
    model = ScriptedChatModel(answers=["ready", decision("templatize"), f"A template.\n```cuda\n{bomb}```",
                                       decision("stop")])
    ctx = RunContext(chat_model=model, evaluator=FakeGPU(), results=str(tmp_path / "r.sqlite"), fixes=0)
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit(ctx)}
    started = time.perf_counter()
    result = build_graph().compile().invoke({"kernel": "silu_and_mul", "shapes": [{"T": 16, "D": 4096}]},
                                            config=config, context=ctx)
    assert time.perf_counter() - started < 60
    failed = result["history"][0]
    assert failed["verdict"] == "invalid" and "beyond 64" in failed["message"]
    assert failed["message"].startswith("candidate.cu:")
    assert result["report"]["stop_reason"]


def test_one_broken_folder_does_not_hide_the_rest_of_the_suite(make_folder, capsys):
    """`astra kernels` lists every folder that loads and names the one that does not, with its
    file and line, and exits 1; the JSON view gives the broken one as an error entry."""
    good = make_folder()
    bad = make_folder(spec_py=SPEC.replace("_SERVING = [", "_SERVING = = [", 1))
    assert cli.main(["kernels"]) == 1
    out = capsys.readouterr().out
    assert f"| {good} |" in out and f"kernel folder {bad} does not load" in out and f"{bad}/spec.py" in out, out
    assert cli.main(["kernels", "--json"]) == 1
    listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)}
    assert listed[good]["symbols"] == ["T", "H"] and "invalid syntax" in listed[bad]["error"]
