"""`astra new` without a GPU: a folder from a .cu file or a skeleton, what `astra check` says about it
until it is filled in, and then a folder the tools take like a shipped one."""

from __future__ import annotations

import sys

import pytest

from astra_kernels import cli
from astra_kernels.jobs import new_kernel
from astra_kernels import suite
from astra_kernels.tools.toolchain.driver import gpu_available

from support import filled_kernel, kernel_path


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    yield from kernel_path.on_kernel_path(monkeypatch, tmp_path)


def test_the_signature_is_read_into_the_spec(on_path):
    folder = filled_kernel.made(on_path)
    spec = suite.load("scale_add").spec
    assert [(a.name, a.role, a.dtype) for a in spec.args] == [
        ("x", "in", "T"), ("y", "in", "T"), ("out", "out", "T"), ("alpha", "scalar", "fp32"), ("n", "scalar", "int32")]
    assert spec.symbols == ["N"] and spec.dtypes == ["fp32"] and spec.bytes_moved == "3 * N * ELEM_BYTES"
    assert filled_kernel.SOURCE.read_text() in (folder / "baseline.cu").read_text()  # the file as given
    todo = new_kernel.unfinished(folder)
    assert any(line.startswith("reference.py:") and "compute out in float64" in line for line in todo)
    assert any(line.startswith("baseline.cu:3: //@ grid") for line in todo)


def test_a_new_folder_is_listed_with_its_own_shape_set(on_path, capsys):
    """Its set is "mine", neither astra nor serving: `astra kernels` lists it, its example shape from that set."""
    import json

    filled_kernel.made(on_path)
    capsys.readouterr()
    assert cli.main(["kernels", "--json"]) == 0
    listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)}
    assert listed["scale_add"]["example_shape"] == "4096" and listed["scale_add"]["shapes"] == {"mine": ["4096"]}


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU path; the GPU test runs the filled-in folder")
def test_check_lists_what_is_left_and_compiles_what_it_can(on_path, capsys):
    filled_kernel.made(on_path)
    assert cli.main(["check", "scale_add"]) == 1
    out = capsys.readouterr().out
    assert "scale_add is not finished: 13 lines marked ASTRA-TODO" in out and "compiled 1 binaries (0 failed)" in out
    assert "reference.py:27" in out


def test_a_filled_in_folder_is_a_kernel_like_the_shipped_ones(on_path, capsys):
    filled_kernel.filled(on_path)
    folder = suite.load("scale_add")
    assert folder.template.names == ["THREADS"] and folder.spec.shapes["mine"] == filled_kernel.SHAPES
    assert cli.main(["space", "scale_add", "--shapes", "4096"]) == 0
    assert "| space | 3 |" in capsys.readouterr().out  # THREADS: 128, 256, 512, none cut
    if not gpu_available():  # compiles the baseline and the template's three configurations
        assert cli.main(["check", "scale_add", "--samples", "3"]) == 0
        assert "compiled 4 binaries of scale_add (0 failed)" in capsys.readouterr().out


def test_a_parameter_named_like_a_shape_symbol_is_refused_naming_it(on_path, capsys):
    """A parameter copied from another kernel whose name is this kernel's shape symbol would replace
    the symbol at every shape (the grid of `ceil_div(N, THREADS)` becomes one CTA): check and space
    refuse the folder in one line naming the line and the name."""
    folder = filled_kernel.filled(on_path)
    template = folder / "template.cu"
    template.write_text(template.read_text().replace("//@ kernel:", "//@ param N: 1, 2\n//@ kernel:", 1))
    for command in (["check", "scale_add"], ["space", "scale_add", "--shapes", "4096"]):
        assert cli.main(command) != 0
        out = capsys.readouterr().out
        assert "template.cu:" in out and "parameter N has the name of a value the kernel's spec gives" in out, out
        assert "Traceback" not in out


@pytest.mark.parametrize(("wrong", "said"), [
    ('return {"out": inputs["x"].astype(np.float64) * scale + inputs["y"]', "NameError: name 'scale' is not defined"),
    ('return {"output": inputs["x"].astype(np.float64)', "case has no expected output for 'out'"),
])
def test_a_reference_that_fails_on_the_cpu_fails_check_without_a_gpu(on_path, capsys, wrong, said):
    """The reference is NumPy: check runs it here at the smallest shape of each set, in every dtype and
    variant, so a NameError or a misspelt output key is one line per run before anything compiles."""
    folder = filled_kernel.filled(on_path)
    reference = folder / "reference.py"
    text = reference.read_text()
    start = text.index('return {"out": inputs["x"]')
    end = text.index("}", start)
    reference.write_text(text[:start] + wrong + text[end:])
    assert cli.main(["check", "scale_add"]) == 1
    out = capsys.readouterr().out
    assert "reference.py at 4096 (mine set, fp32, default)" in out and said in out, out
    assert "reference fails on this machine's CPU" in out and "binaries" not in out and "Traceback" not in out


PEER = """import torch


def forward(tensors, scalars, variant):
    return {"out": tensors["x"] * scalars["alpha"] + tensors["y"]SLIP}
"""


@pytest.mark.skipif(gpu_available(), reason="the no-GPU path: on a GPU check goes on to run the kernels")
def test_a_peer_that_disagrees_with_the_reference_fails_check_and_one_that_agrees_passes(on_path, capsys):
    """peer.py (FORMAT.md, "The PyTorch peer") runs on the CPU beside the reference in check: a peer
    that is wrong would be the bar every benchmark of the kernel is timed against."""
    pytest.importorskip("torch")
    folder = filled_kernel.filled(on_path)
    (folder / "peer.py").write_text(PEER.replace("SLIP", " + 1"))
    assert cli.main(["check", "scale_add", "--samples", "1"]) == 1
    out = capsys.readouterr().out
    assert "peer.py at 4096 (mine set, fp32, default): out:" in out and "disagrees with its reference" in out, out
    (folder / "peer.py").write_text(PEER.replace("SLIP", ""))
    for module in [m for m in sys.modules if m.endswith("scale_add.peer")]:  # a new process would read it anew
        del sys.modules[module]
    assert cli.main(["check", "scale_add", "--samples", "1"]) == 0
    assert "peer.py" not in capsys.readouterr().out


def test_a_skeleton_without_a_file(on_path, capsys):
    assert cli.main(["new", "my_copy", "--dir", str(on_path)]) == 0
    folder = suite.load("my_copy")
    assert folder.spec.dtypes == ["bf16", "fp16", "fp32"] and [a.name for a in folder.spec.args] == ["x", "out", "n"]
    assert "#include \"common.cuh\"" in folder.baseline.source


@pytest.mark.parametrize("source, error", [
    ('template <int N> __global__ void k(float* x) {}', "is a C++ template"),
    ("__device__ float f(float x) { return x; }", "no `__global__ void NAME(...)` kernel"),
    ('extern "C" __global__ void k(Params p) {}', "type 'Params' is none the suite launches"),
])
def test_a_file_it_cannot_read_is_named(tmp_path, capsys, source, error):
    (tmp_path / "k.cu").write_text(source)
    assert cli.main(["new", "k", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "out")]) == 2
    text = "".join(capsys.readouterr())
    assert error in text and "Traceback" not in text and not (tmp_path / "out" / "k").exists()


def test_a_name_taken_or_not_an_identifier_is_refused(tmp_path, capsys):
    assert cli.main(["new", "rmsnorm", "--dir", str(tmp_path)]) == 2
    assert "exists already" in "".join(capsys.readouterr())
    assert cli.main(["new", "my-kernel", "--dir", str(tmp_path)]) == 2
    assert "must be an ASCII identifier" in "".join(capsys.readouterr())


def test_a_plain_global_gets_extern_c(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void twice(const float* x, float* y, int n) { y[0] = 2 * x[0]; }\n")
    files = new_kernel.scaffold("twice", (tmp_path / "k.cu").read_text(), "k.cu")
    assert 'extern "C" __global__ void twice(' in files["baseline.cu"]


def test_a_table_of_your_own_kernel_exports_with_its_pytorch_op_guide(on_path, tmp_path):
    """No SGLang op is known for scale_add: its export guide shows it as the PyTorch op its
    scale_add_torch.cpp registers, and no swap-in."""
    import json

    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

    filled_kernel.filled(on_path)
    table = DispatchTable(kernel="scale_add", dtype="fp32", variant="default", entries=[
        DispatchEntry(shape={"N": 4096}, config={"THREADS": 128}, median_us=2.0),
        DispatchEntry(shape={"N": 1 << 20}, config={"THREADS": 512}, median_us=9.0)])
    (tmp_path / "table.json").write_text(table.model_dump_json())
    out = tmp_path / "export"
    assert cli.main(["export", str(tmp_path / "table.json"), "--out", str(out)]) == 0
    readme = (out / "README.md").read_text()
    assert "scale_add = load('/path/to/this/export/folder')  # torch.ops.astra.scale_add_fp32" in readme
    assert "`scale_add_fp32(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()`" in readme
    assert (out / "scale_add_torch.cpp").is_file()
    assert "Swap it into an SGLang deployment" not in readme
    manifest = json.loads((out / "export.json").read_text())
    assert {tuple(sorted(b["config"].items())) for b in manifest["binaries"]} >= {(("THREADS", 128),), (("THREADS", 512),)}


def test_failed_compiles_are_said_once_per_error_naming_the_file_and_configuration():
    """A template's mistake fails every configuration alike: one block per distinct error, with the
    file, the first configuration, dtype, variant and shape it failed at, and how many more."""
    from astra_kernels.jobs.checking import CheckRow, compile_failures

    def row(which, vec):
        return CheckRow(kernel="k", which=which, config={"VEC": vec} if vec else {}, shape="4x4096", dtype="bf16",
                        variant="default", status="pending")
    undefined = 'compilation failed at line 71: identifier "nope" is undefined\n  return nope[i];\n         ^\n1 error detected'
    other = "kernel.cu(9): error: expected a \";\"\n1 error detected"
    said = compile_failures([(row("template", 4), undefined), (row("template", 8), undefined),
                             (row("template", 2), None), (row("baseline", 0), other)])
    assert said == [
        'template.cu at VEC=4, bf16 default, 4x4096 and 1 more binaries:\n'
        '  compilation failed at line 71: identifier "nope" is undefined\n    return nope[i];\n           ^\n'
        '  1 error detected',
        'baseline.cu at (no parameters), bf16 default, 4x4096:\n  kernel.cu(9): error: expected a ";"\n'
        '  1 error detected']


@pytest.mark.skipif(gpu_available(), reason="describes a machine without a GPU")
def test_tune_without_a_gpu_offers_a_replay_only_for_a_kernel_that_has_a_recording(on_path, capsys):
    assert cli.main(["new", "my_copy", "--dir", str(on_path)]) == 0
    capsys.readouterr()
    assert cli.main(["tune", "my_copy"]) == 2
    out = capsys.readouterr().out
    assert "no GPU here" in out and "astra check my_copy" in out and "--replay" not in out
