"""The template format: parsing, its errors (with lines), constraints and geometry."""

from __future__ import annotations

import pytest

from astra_kernels.tools.templating.expressions import Expression, ExpressionError
from astra_kernels.tools.templating.template import Exclusion, Instance, TemplateError, parse_template
from astra_kernels.tools.toolchain.nvrtc import CompileOptions

GOOD = """\
#include "common.cuh"
//@ kernel: k
//@ param THREADS: 64, 128, 256   -- threads per CTA
//@ param VEC: 1, 2, 4, 8
//@ derive NVEC = D // VEC
//@ require VEC * ELEM_BYTES <= 16 -- a load is at most 16 bytes
//@ require D % VEC == 0 -- whole vectors
//@ grid: ceil_div(T, 2), min(NVEC, 4)
//@ block: THREADS
//@ shared: THREADS * 4
//@ fast_math: THREADS > 64
//@ max_registers: 128
//@ default: THREADS=128 VEC=4
extern "C" __global__ void k() {}
"""
SYMBOLS = {"T", "D", "ELEM_BYTES", "SMS"}


def test_parse_and_instantiate():
    t = parse_template(GOOD, "good.cu", SYMBOLS)
    assert t.kernel == "k" and t.names == ["THREADS", "VEC"] and t.size() == 12
    assert t.parameters[0].description == "threads per CTA"
    assert t.default == {"THREADS": 128, "VEC": 4}
    inst = t.instantiate({"THREADS": 256, "VEC": 8}, {"T": 5, "D": 4096, "ELEM_BYTES": 2, "SMS": 132})
    assert isinstance(inst, Instance)
    assert inst.grid == (3, 4) and inst.block == (256,) and inst.shared_bytes == 1024
    assert inst.fast_math and inst.max_registers == 128
    assert inst.defines == {"THREADS": 256, "VEC": 8, "NVEC": 512}


def test_constraints_exclude_with_reason_and_line():
    t = parse_template(GOOD, "good.cu", SYMBOLS)
    env = {"T": 1, "D": 4097, "ELEM_BYTES": 2, "SMS": 132}
    excl = t.instantiate({"THREADS": 64, "VEC": 2}, env)
    assert isinstance(excl, Exclusion) and excl.reason == "whole vectors" and excl.line == 7
    wide = t.instantiate({"THREADS": 64, "VEC": 8}, {**env, "D": 4096, "ELEM_BYTES": 4})
    assert isinstance(wide, Exclusion) and "16 bytes" in wide.reason


def test_instantiate_all_gives_instantiates_results_at_every_shape_of_a_sweep():
    """instantiate_all keeps the constraints' verdicts per the values they read (D, ELEM_BYTES: not
    the tokens), so a token sweep screens the space once per width; what depends on the tokens (the
    grid, an empty one excluded) is made at each shape, and a width or dtype of its own is screened
    afresh."""
    t = parse_template(GOOD.replace("//@ grid: ceil_div(T, 2), min(NVEC, 4)", "//@ grid: T - 2, min(NVEC, 4)"),
                       "good.cu", SYMBOLS)
    assert t.screened_names() == ("D", "ELEM_BYTES")
    configs = list(t.all_configs())
    for T, D, elem in [(1, 4096, 2), (8, 4096, 2), (2, 4096, 2), (64, 4097, 2), (64, 4096, 4), (3, 4096, 2)]:
        env = {"T": T, "D": D, "ELEM_BYTES": elem, "SMS": 132}
        assert t.instantiate_all(configs, env) == [t.instantiate(c, env) for c in configs]
    assert len(t._verdicts) == 3  # one screening per (D, ELEM_BYTES)
    empty = t.instantiate_all(configs, {"T": 2, "D": 4096, "ELEM_BYTES": 2, "SMS": 132})
    assert any(isinstance(r, Exclusion) and "empty dimension" in r.reason for r in empty)
    with pytest.raises(TemplateError, match="lacks"):
        t.instantiate_all([{"THREADS": 64}], {"T": 2, "D": 4096, "ELEM_BYTES": 2, "SMS": 132})


def test_sampling_is_seeded_and_whole_when_small():
    t = parse_template(GOOD, "good.cu", SYMBOLS)
    assert len(t.sample_configs(100)) == 12
    assert t.sample_configs(5, seed=3) == t.sample_configs(5, seed=3)
    assert len({tuple(c.items()) for c in t.sample_configs(5, seed=3)}) == 5


@pytest.mark.parametrize("bad,line,needle", [
    ("//@ param VEC:", 4, "has no values"),
    ("//@ param VEC: 1, two", 4, "integers"),
    ("//@ param VEC: 1, 1", 4, "repeats"),
    ("//@ param THREADS: 1", 4, "already defined on line 3"),
    ("//@ require VEC <= WIDTH", 4, "undefined name(s) WIDTH"),
    ("//@ require VEC <=", 4, "cannot parse"),
    ("//@ require __import__('os') == 1", 4, "not an allowed function"),
    ("//@ require VEC.real == 1", 4, "not allowed"),
    ("//@ launch: 1", 4, "unknown directive"),
    ("//@ grid: 1, 2", 4, "already given on line"),
    ("//@ param T: 1, 2", 4, "parameter T has the name of a value the kernel's spec gives"),  # it would replace T
    ("//@ derive SMS = 2 * VEC", 4, "derived value SMS has the name of a value the kernel's spec gives"),
])
def test_errors_name_the_line(bad, line, needle):
    lines = GOOD.splitlines()
    lines.insert(3, bad)
    with pytest.raises(TemplateError) as info:
        parse_template("\n".join(lines), "bad.cu", SYMBOLS)
    assert f"bad.cu:{line}" in str(info.value) or "bad.cu" in str(info.value)
    assert needle in str(info.value)


def test_missing_required_directives_and_bad_defaults():
    with pytest.raises(TemplateError, match="missing the `//@ grid:`"):
        parse_template(GOOD.replace("//@ grid: ceil_div(T, 2), min(NVEC, 4)\n", ""), "x.cu", SYMBOLS)
    with pytest.raises(TemplateError, match="not among"):
        parse_template(GOOD.replace("VEC=4", "VEC=3"), "x.cu", SYMBOLS)
    with pytest.raises(TemplateError, match="not a parameter"):
        parse_template(GOOD.replace("VEC=4", "VEC=4 UNROLL=2"), "x.cu", SYMBOLS)
    with pytest.raises(TemplateError, match="default lacks"):
        parse_template(GOOD.replace("THREADS=128 VEC=4", "VEC=4"), "x.cu", SYMBOLS)


def test_unknown_symbol_only_when_environment_lacks_it():
    with pytest.raises(TemplateError, match="undefined name"):
        parse_template(GOOD, "good.cu", {"T", "D"})  # no ELEM_BYTES


def test_expressions_are_safe_and_complete():
    assert Expression("ceil_div(7, 2) + pow2_divisor(96, 8) + gcd(12, 18)")({}) == 4 + 8 + 6
    assert Expression("1 < x <= 3 and not x == 2")({"x": 3}) is True
    assert Expression("a if a > b else b")({"a": 2, "b": 5}) == 5
    assert Expression("next_pow2(5) + log2(64) + is_pow2(6)")({}) == 8 + 6 + 0
    for text in ("open('x')", "x.__class__", "[1, 2]", "'text'", "lambda: 1", "x[0]"):
        with pytest.raises(ExpressionError):
            Expression(text)
    with pytest.raises(ExpressionError, match="unknown name"):
        Expression("y + 1")({})
    with pytest.raises(ExpressionError, match="division by zero"):
        Expression("1 // z")({"z": 0})


BUILT = """//@ kernel: k
//@ grid: 1
//@ block: 32
"""


def test_build_directives_reach_the_compile_options(tmp_path):
    (tmp_path / "vendored" / "include").mkdir(parents=True)
    (tmp_path / "mine").mkdir()
    source = BUILT + ("//@ compiler: nvcc\n//@ std: c++20\n//@ include: ../vendored/include\n"
                      "//@ flag: --expt-relaxed-constexpr\n//@ flag: -DSGL_CUDA_ARCH=900 -- SGLang's own macro\n")
    template = parse_template(source, "mine/baseline.cu", set(), tmp_path / "mine")
    options = template.instantiate({}, {}).compile_options(CompileOptions(extra=["-DKEEP=1"]))
    assert options.compiler == "nvcc" and options.std == "c++20"
    assert options.include_dirs == [str((tmp_path / "vendored" / "include").resolve())]
    assert options.extra == ["-DKEEP=1", "--expt-relaxed-constexpr", "-DSGL_CUDA_ARCH=900"]
    plain = parse_template(BUILT, "t.cu").instantiate({}, {}).compile_options(CompileOptions())
    assert (plain.compiler, plain.std, plain.include_dirs, plain.extra) == ("nvrtc", "c++17", [], [])


@pytest.mark.parametrize("line", ["//@ include: ../x", "//@ compiler: nvcc", "//@ std: c++20",
                                  "//@ flag: --use_fast_math"])
def test_a_candidate_gives_no_build_directive(line):
    """A candidate (a model's text) has no kernel folder: how it is built is never its to say."""
    with pytest.raises(TemplateError, match="is for a kernel folder's own"):
        parse_template(BUILT + line + "\n", "candidate.cu")


@pytest.mark.parametrize("line, needle", [
    ("//@ flag: -ccbin=python3", "is not a flag a template may add"),
    ("//@ flag: -Xcompiler=-fplugin=x", "is not a flag a template may add"),
    ("//@ flag: --run", "is not a flag a template may add"),
    ("//@ compiler: clang", "compiler must be nvrtc or nvcc"),
    ("//@ std: gnu++20", "std must be"),
])
def test_build_directives_a_kernel_folder_may_not_give(tmp_path, line, needle):
    with pytest.raises(TemplateError, match=needle):
        parse_template(BUILT + line + "\n", "mine/baseline.cu", set(), tmp_path)


def test_an_include_outside_the_kernels_directory_is_refused(tmp_path):
    (tmp_path / "kernels" / "mine").mkdir(parents=True)
    with pytest.raises(TemplateError, match="outside"):
        parse_template(BUILT + "//@ include: /usr/include\n", "mine/baseline.cu", set(), tmp_path / "kernels" / "mine")
    with pytest.raises(TemplateError, match="outside"):
        parse_template(BUILT + "//@ include: ../../\n", "mine/baseline.cu", set(), tmp_path / "kernels" / "mine")


def test_the_work_a_thread_does_is_evaluated_at_each_shape_and_left_out_of_the_code():
    """`//@ work:` is read by the dispatch only: the Instance carries its value; the code compiled and
    keyed blanks its line, so the line numbers stay and a template that gains one keeps its keys."""
    source = GOOD.replace("//@ max_registers: 128\n",
                          "//@ max_registers: 128\n//@ work: ceil_div(NVEC, THREADS)   -- vectors a thread loads\n")
    t = parse_template(source, "good.cu", SYMBOLS)
    env = {"T": 5, "D": 4096, "ELEM_BYTES": 2, "SMS": 132}
    assert t.instantiate({"THREADS": 256, "VEC": 8}, env).work == 2
    assert t.instantiate({"THREADS": 64, "VEC": 2}, env).work == 32
    assert parse_template(GOOD, "good.cu", SYMBOLS).instantiate({"THREADS": 256, "VEC": 8}, env).work is None
    assert t.code == source.replace("//@ work: ceil_div(NVEC, THREADS)   -- vectors a thread loads", "")
    assert t.code.count("\n") == source.count("\n") and parse_template(GOOD, "good.cu", SYMBOLS).code == GOOD
    crlf = parse_template(source.replace("\n", "\r\n"), "good.cu", SYMBOLS)
    assert crlf.code == t.code.replace("\n", "\r\n")
    with pytest.raises(TemplateError, match=r"good.cu:13: .*undefined name\(s\) ROWS"):
        parse_template(source.replace("ceil_div(NVEC, THREADS)", "ROWS"), "good.cu", SYMBOLS)
    with pytest.raises(TemplateError, match="work is already given on line 13"):
        parse_template(source.replace("//@ default", "//@ work: 1\n//@ default"), "good.cu", SYMBOLS)


def test_the_launch_parameters_are_those_the_geometry_reads_through_derived_values_too():
    assert parse_template(GOOD, "good.cu", SYMBOLS).launch_parameters() == {"THREADS", "VEC"}  # grid reads NVEC = D // VEC
    assert parse_template(GOOD.replace("min(NVEC, 4)", "4").replace("//@ shared: THREADS * 4\n", ""), "good.cu",
                          SYMBOLS).launch_parameters() == {"THREADS"}
