"""Template expressions translated to C++ give exactly what the Python evaluator gives: every
expression of every kernel's template and baseline, plus the corners where C++ and Python integers
differ (floor division and modulo of negatives, chained comparisons, short-circuits, errors), each
evaluated by a compiled C++ program over many environments and compared with tools/templating/expressions.py."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from astra_kernels import suite
from astra_kernels.tools.templating.expressions import Expression, ExpressionError
from astra_kernels.tools.templating.expressions_cpp import HELPERS, TranslationError, to_cpp

COMPILER = shutil.which("g++") or shutil.which("clang++") or shutil.which("nvcc")

CORNERS = [
    "a // b", "a % b", "-a // b", "a % -b", "ceil_div(a, b)", "ceil_div(-a, b)", "a ** 3", "2 ** b",
    "a << 3", "a >> 2", "-a >> 1", "a & b | 5", "min(a, b, 7)", "max(a, -b)", "abs(a - b)", "gcd(a, b)",
    "gcd(a, b, 12)", "pow2_divisor(a, 16)", "pow2_divisor(a * b, b)", "is_pow2(a)", "next_pow2(a)", "log2(a)",
    "int(a)", "a < b <= 10", "1 if a > b else -1", "a and b", "a or b", "not a", "a == b or a // (b - b) == 0",
    "b != 0 and a // b > 1", "a >= b >= 0 > -1", "True + a", "+a",
]


def _environments(names: list[str], count: int, seed: int = 3) -> list[dict[str, int]]:
    rng = random.Random(seed)
    envs = []
    for i in range(count):
        env = {}
        for name in names:
            env[name] = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 100, 128, 1000, 4096, 4097, 16384,
                                    -1, -3, -8, rng.randint(-50, 5000)]) if i % 3 else rng.randint(1, 20000)
        envs.append(env)
    return envs


def _python(expression: Expression, env: dict[str, int]) -> str:
    """The evaluator's value, or "error" where the translation promises one: Python raises, or
    gives a float (a negative power), or a value past 64 bits."""
    try:
        value = expression(env)
    except (ExpressionError, ValueError, ZeroDivisionError, OverflowError):
        return "error"
    if isinstance(value, float) or not -(2 ** 63) <= value < 2 ** 63:
        return "error"
    return str(int(value))


def _run(expressions: list[Expression], envs: list[dict[str, int]], tmp_path) -> list[list[str]]:
    """Each expression at each environment, evaluated by one compiled C++ program."""
    names = sorted(set().union(*(e.names for e in expressions)) | {"a"})
    body = []
    for index, env in enumerate(envs):
        body.append("    {")
        body += [f"        const ax_int v_{n} = {env.get(n, 0)}LL; (void)v_{n};" for n in names]
        for e in expressions:
            body += ["        { int err = 0; const ax_int r = " + to_cpp(e, lambda n: f"v_{n}") + ";",
                     '          if (err) printf("error\\n"); else printf("%lld\\n", r); }']
        body.append("    }")
    program = "#include <cstdio>\n" + HELPERS + "\nint main() {\n" + "\n".join(body) + "\n    return 0;\n}\n"
    source = tmp_path / "expressions.cpp"
    source.write_text(program)
    binary = tmp_path / "expressions"
    flags = ["-x", "cu"] if COMPILER.endswith("nvcc") else ["-std=c++17", "-O1"]
    subprocess.run([COMPILER, *flags, str(source), "-o", str(binary)], check=True, capture_output=True, timeout=300)
    lines = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=60).stdout.split()
    per_env = len(expressions)
    return [lines[i * per_env:(i + 1) * per_env] for i in range(len(envs))]


@pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (g++, clang++ or nvcc) on this machine")
def test_corner_cases_match_python(tmp_path):
    expressions = [Expression(text) for text in CORNERS]
    envs = _environments(["a", "b"], 60)
    results = _run(expressions, envs, tmp_path)
    for env, got in zip(envs, results):
        for expression, value in zip(expressions, got):
            assert value == _python(expression, env), f"{expression.text} at {env}: C++ {value}"


@pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (g++, clang++ or nvcc) on this machine")
def test_every_suite_expression_matches_python(tmp_path):
    """The expressions the export translates: derived values, constraints, geometry and flags."""
    expressions = []
    for name in suite.names():
        folder = suite.load(name)
        for template in (folder.template, folder.baseline):
            expressions += [d.expression for d in template.derived]
            expressions += [c.expression for c in template.constraints]
            expressions += [*template.grid, *template.block]
            expressions += [e for e in (template.shared, template.fast_math, template.max_registers) if e]
    names = sorted(set().union(*(e.names for e in expressions)))
    envs = _environments(names, 40)
    for env in envs:  # the shapes of the suite are positive; keep some parameter-like values small
        for key in ("ELEM_BYTES",):
            env[key] = random.Random(env.get("T", 1)).choice([1, 2, 4])
    results = _run(expressions, envs, tmp_path)
    checked = 0
    for env, got in zip(envs, results):
        for expression, value in zip(expressions, got):
            assert value == _python(expression, env), f"{expression.text} at {env}: C++ {value}"
            checked += value != "error"
    assert checked > len(expressions) * 10  # most evaluations produce values, not errors


def test_refuses_what_has_no_exact_integer_translation():
    with pytest.raises(TranslationError, match="true division"):
        to_cpp(Expression("a / 2"), lambda n: n)
    with pytest.raises(TranslationError, match="float"):
        to_cpp(Expression("a * 0.5"), lambda n: n)
