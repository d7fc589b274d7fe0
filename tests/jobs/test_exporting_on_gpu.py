"""Exported kernels on a real GPU, on torch CUDA tensors: the Python callable (DLPack, torch's
current stream, CUDA-graph capture, a pick the file lacks compiled on demand), the nvcc-built
shared library of the standalone .cu launched through ctypes, and the README's SGLang drop-ins,
each output checked against the kernel's float64 reference with the suite's tolerances and each
input checked unchanged. Tables: the ones shipped for the H200, every other shipped table (each
GPU kind's, each L2 regime's) at its tuned shapes, and silu_and_mul's with a rewrite and a model's
template holding some of its shapes (the agent's kind of result)."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import numpy as np
import pytest

from astra_kernels.jobs.exporting import cuda_file as export, guide as export_guide
from astra_kernels.jobs import torch_tensors as peers
from astra_kernels import suite
from astra_kernels.suite import tuned_tables
from astra_kernels.runtime import export_format
from astra_kernels.runtime.exported_kernel import load_callable
from astra_kernels.tools.measuring.correctness import compare, unchanged
from support.mixed_table import mixed_silu_and_mul_table

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

NVCC = shutil.which("nvcc")
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CASES = {  # covered shapes (tuned, odd) and, for merge_attn_states, a head size the export never saw
    "rmsnorm": [{"T": 16, "H": 4096}, {"T": 7, "H": 4100}, {"T": 300, "H": 8192}],
    "fused_add_rmsnorm": [{"T": 16, "H": 4096}, {"T": 2048, "H": 8192}, {"T": 3, "H": 20000},  # baseline; 80 KB shared
                          {"T": 5175, "H": 4096},  # the H200 table's two-pass pick (RELOAD)
                          {"T": 1, "H": 5120}],  # an untuned width: 1x8192's pick with the row's bounds kept
    "silu_and_mul": [{"T": 16, "D": 4096}, {"T": 3, "D": 1002}, {"T": 64, "D": 8192}],
    "merge_attn_states": [{"N": 512, "HD": 40, "D": 128}, {"N": 5, "HD": 8, "D": 128}, {"N": 64, "HD": 8, "D": 88}],
    "rotary_embedding": [{"N": 16, "HQ": 32, "HK": 8, "D": 128, "R": 128, "P": 4096},  # tuned; then odd
                         {"N": 37, "HQ": 5, "HK": 1, "D": 128, "R": 64, "P": 4096},
                         {"N": 33, "HQ": 7, "HK": 3, "D": 72, "R": 72, "P": 1000}],
}
UNCOVERED = {("merge_attn_states", "64x8x88")}


@pytest.fixture(scope="module", autouse=True)
def _cuda_torch():
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA: the exported callable is tested on torch CUDA tensors")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for kernel in CASES:
        out[kernel] = root / kernel
        export.export(export.resolve_source(None, "h200", kernel), out[kernel], command="test_gpu_export")
    return out


class Case:
    """Seeded inputs on the GPU (outputs poisoned with NaN), the reference, and the checks."""

    def __init__(self, kernel: str, shape: dict[str, int], seed: int = 5):
        self.folder = suite.load(kernel)
        self.shape = shape
        self.problem = suite.problem(self.folder, shape, "bf16")
        self.inputs = self.folder.reference.make_inputs(np.random.default_rng(seed), shape, "bf16", "default")
        self.expected = self.folder.reference.reference(self.inputs, shape, "bf16", "default")
        self.tensors = {}
        for p in self.problem.buffers:
            if p.role == "out":
                self.tensors[p.name] = torch.full(p.shape, float("nan"), dtype=TORCH_DTYPES[p.dtype], device="cuda")
            else:
                self.tensors[p.name] = peers.to_torch(self.inputs[p.name], "cuda")
        given = {a.name for a in export_format.caller_scalars(self.folder.spec)}
        self.scalars = {p.name: p.value for p in self.problem.params if not p.is_buffer and p.name in given}
        self.label = f"{kernel} {self.folder.spec.label(shape)}"

    @property
    def ordered(self) -> list:
        return [self.tensors[p.name] for p in self.problem.buffers]

    def poison(self) -> None:
        for p in self.problem.buffers:
            if p.role == "out":
                self.tensors[p.name].fill_(float("nan"))

    def check(self, how: str) -> None:
        torch.cuda.synchronize()
        for p in self.problem.buffers:
            got = peers.to_numpy(self.tensors[p.name])
            if p.role == "in":
                result = unchanged(p.name, self.inputs[p.name], got)
            else:
                result = compare(p.name, got, self.expected[p.name], self.problem.tolerance(p.dtype))
            assert result.passed, f"{self.label} ({how}): {result.name}: {result.detail}"


@pytest.mark.parametrize(("kernel", "shape"), [(k, s) for k, shapes in CASES.items() for s in shapes],
                         ids=[f"{k}-{suite.load(k).spec.label(s)}" for k, shapes in CASES.items() for s in shapes])
def test_callable_matches_the_reference(folders, kernel, shape):
    case = Case(kernel, shape)
    launch = load_callable(folders[kernel])(*case.ordered, **case.scalars)
    case.check(f"{launch.kernel or 'compiled on demand'}, {launch.picked_by}")
    assert launch.from_file == ((kernel, case.folder.spec.label(shape)) not in UNCOVERED), launch


SHIPPED = [(kind, l2, kernel) for kind in tuned_tables.gpu_kinds() for l2 in tuned_tables.REGIMES
           for kernel in tuned_tables.shipped_kernels(kind, l2) if kernel in CASES and (kind, l2) != ("h200", "cold")]


@pytest.mark.parametrize(("kind", "l2", "kernel"), SHIPPED, ids=["-".join(s) for s in SHIPPED])
def test_every_other_shipped_table_exports_and_runs_correctly_at_its_tuned_shapes(tmp_path, kind, l2, kernel):
    """`astra export --gpu-kind KIND --l2 L2`: every tuned shape of up to 2048 tokens (the larger
    ones, where the regimes meet, take seconds each for the float64 reference) from the file."""
    source = export.resolve_source(None, kind, kernel, l2)
    export.export(source, tmp_path / kernel, command="test_gpu_export")
    fn = load_callable(tmp_path / kernel)
    shapes = [e.shape for e in source.table.entries if next(iter(e.shape.values())) <= 2048]
    assert shapes
    for shape in shapes:
        case = Case(kernel, shape)
        launch = fn(*case.ordered, **case.scalars)
        case.check(f"{kind} {l2} table: {launch.kernel}, {launch.picked_by}")
        assert launch.from_file, launch


def test_callable_runs_on_the_current_stream_and_in_cuda_graphs(folders):
    """Launched on torch's current stream: a side stream's capture records it, and replaying the
    graph recomputes the poisoned output."""
    case = Case("rmsnorm", {"T": 128, "H": 4096})
    fn = load_callable(folders["rmsnorm"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*case.ordered, **case.scalars)
    side.synchronize()
    case.check("side stream")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*case.ordered, **case.scalars)
    case.poison()
    graph.replay()
    case.check("CUDA-graph replay")


@pytest.fixture(scope="module")
def libraries(folders, tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed here: the standalone .cu is not built into a library")
    root = tmp_path_factory.mktemp("libs")
    return {kernel: _library(folder, kernel, root) for kernel, folder in folders.items()}


_BUILT: dict[str, ctypes.CDLL] = {}


def _library(folder, kernel: str, root) -> ctypes.CDLL:
    """The export's .cu built by nvcc as its header says into lib<kernel>.so (once per folder)."""
    if str(folder) in _BUILT:
        return _BUILT[str(folder)]
    groups = [export_format.Group(**g) for g in json.loads((folder / "export.json").read_text())["groups"]]
    objects = []
    for args, name in export.object_builds(kernel, groups, "sm_90"):
        build = subprocess.run([NVCC, *args], cwd=folder, capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, f"nvcc {' '.join(args)}:\n{build.stderr[-3000:]}"
        objects.append(str(folder / name))
    lib = root / f"lib{kernel}.so"
    link = subprocess.run([NVCC, "-shared", *objects, "-o", str(lib)], capture_output=True, text=True, timeout=600)
    assert link.returncode == 0, f"linking lib{kernel}.so:\n{link.stderr[-3000:]}"
    _BUILT[str(folder)] = ctypes.CDLL(str(lib))
    return _BUILT[str(folder)]


def _c_launch(lib, kernel: str, case: Case) -> int:
    """Call <kernel>_launch with the tensors' pointers, the scalars and torch's current stream."""
    launch = getattr(lib, f"{kernel}_launch")
    argtypes, values = [], []
    for arg in case.folder.spec.args:
        if arg.role == "scalar":
            ctype = ctypes.c_float if arg.dtype == "fp32" else ctypes.c_int
            value = next(p.value for p in case.problem.params if p.name == arg.name)
            argtypes.append(ctype)
            values.append(ctype(value))
        else:
            argtypes.append(ctypes.c_void_p)
            values.append(ctypes.c_void_p(case.tensors[arg.name].data_ptr()))
    for symbol in export_format.shape_params(case.folder.spec):  # sizes only a tensor gives (rotary's P)
        argtypes.append(ctypes.c_int)
        values.append(ctypes.c_int(case.shape[symbol]))
    launch.argtypes = [*argtypes, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    return launch(*values, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


@pytest.mark.parametrize(("kernel", "shape"), [(k, s) for k, shapes in CASES.items() for s in shapes],
                         ids=[f"{k}-{suite.load(k).spec.label(s)}" for k, shapes in CASES.items() for s in shapes])
def test_standalone_library_matches_the_reference(libraries, kernel, shape):
    case = Case(kernel, shape, seed=9)
    status = _c_launch(libraries[kernel], kernel, case)
    last_error = getattr(libraries[kernel], f"{kernel}_last_error")
    last_error.restype = ctypes.c_char_p
    if (kernel, case.folder.spec.label(shape)) in UNCOVERED:
        assert status == 801, f"{case.label}: expected cudaErrorNotSupported, got {status}"  # cudaErrorNotSupported
        assert b"--shapes" in last_error(), last_error()
        return
    assert status == 0, f"{case.label}: {kernel}_launch returned {status}: {last_error().decode()}"
    case.check("nvcc-built library through ctypes")


def test_standalone_library_does_nothing_on_an_empty_batch(libraries):
    case = Case("rmsnorm", {"T": 1, "H": 4096})
    launch = libraries["rmsnorm"].rmsnorm_launch
    launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    out = case.tensors["out"]
    assert launch(case.tensors["x"].data_ptr(), case.tensors["w"].data_ptr(), out.data_ptr(), 1e-6, 0, 4096, None) == 0
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing was written


@pytest.mark.parametrize("via", ["op", "callable"])
@pytest.mark.parametrize("kernel", list(CASES))
def test_guide_drop_in_runs_the_exported_kernel(folders, kernel, via):
    """The README's replacement for the sgl_kernel op, called as SGLang calls that op, with `_tuned`
    the PyTorch op the README loads, or the Python callable it names where nvcc cannot build that."""
    from astra_kernels.runtime import torch_op

    swap = export_guide.swap_in(kernel, "default")

    def original(*args, **kwargs):
        raise AssertionError(f"the drop-in for {swap.op} fell back to sgl_kernel on a covered call")

    tuned = torch_op.load(folders[kernel]) if via == "op" else load_callable(folders[kernel])
    namespace = {"torch": torch, "_tuned": tuned, "_original": original}
    exec(swap.wrapper.replace("{torch_dtype}", "torch.bfloat16"), namespace)
    drop_in = namespace[swap.op]
    case = Case(kernel, CASES[kernel][0], seed=13)
    t = case.tensors
    if kernel == "rmsnorm":
        t["out"].copy_(drop_in(t["x"], t["w"], 1e-6))
    elif kernel == "fused_add_rmsnorm":
        assert drop_in(t["x"], t["residual"], t["w"], 1e-6) is None
    elif kernel == "silu_and_mul":
        t["out"].copy_(drop_in(t["x"]))
    elif kernel == "rotary_embedding":
        assert drop_in(t["positions"], t["q"], t["k"], case.shape["D"], t["cos_sin_cache"], True) is None
    else:
        v, s = drop_in(t["va"], t["sa"], t["vb"], t["sb"])
        t["v"].copy_(v)
        t["s"].copy_(s)
    case.check(f"the README's drop-in for sgl_kernel.{swap.op}")


MIXED_SHAPES = [  # the rewrite's, the model template's (one and two CTAs per token), the suite's, odd ones
    {"T": 16, "D": 4096}, {"T": 32, "D": 5120}, {"T": 16, "D": 12288}, {"T": 64, "D": 8192},
    {"T": 2048, "D": 14336}, {"T": 3, "D": 1002}, {"T": 16, "D": 4095}, {"T": 5, "D": 12},
]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """silu_and_mul's table with a rewrite and a model's template holding four shapes
    (tests/support/mixed_table.py): the agent's kind of result, exported and built."""
    root = tmp_path_factory.mktemp("mixed")
    (root / "dispatch.json").write_text(mixed_silu_and_mul_table().model_dump_json())
    export.export(export.resolve_source(root / "dispatch.json"), root / "out", command="test_gpu_export")
    return root / "out"


@pytest.mark.parametrize("shape", MIXED_SHAPES, ids=[suite.load("silu_and_mul").spec.label(s) for s in MIXED_SHAPES])
def test_a_table_with_rewrites_runs_each_source_correctly(mixed, tmp_path, shape):
    """The callable and the nvcc-built library of the mixed table, against the float64 reference:
    at each shape the source the front holds there runs (named in the pick), and is right."""
    case = Case("silu_and_mul", shape, seed=21)
    launch = load_callable(mixed)(*case.ordered, **case.scalars)
    case.check(f"callable, {launch.kernel}, {launch.picked_by}")
    assert launch.from_file, launch
    if NVCC is None:
        pytest.skip("nvcc is not installed here: the standalone .cu is not built into a library")
    lib = _library(mixed, "silu_and_mul", tmp_path)
    case.poison()
    status = _c_launch(lib, "silu_and_mul", case)
    assert status == 0, f"{case.label}: silu_and_mul_launch returned {status}"
    case.check(f"nvcc-built library, {launch.picked_by}")
