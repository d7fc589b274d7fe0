"""Each kernel's PyTorch peer against its float64 reference, judged as the evaluation judges our
kernels (the suite's compare and tolerances, inputs unchanged, in-place arguments updated): on CPU
for every dtype and variant of the spec at three small shapes, two of them odd; traced whole by
torch.compile(fullgraph=True, dynamic=False); and, where a GPU is visible, eager and compiled on
it, since that is where the benchmark times them."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from astra_kernels.jobs import torch_tensors as peers
from astra_kernels import suite
from astra_kernels.tools.measuring.correctness import compare, unchanged
from astra_kernels.tools.toolchain.dtypes import numpy_dtype

SEED = 7


SMALL_BYTES = 1 << 20


def _shapes(name: str) -> list[dict[str, int]]:
    """The smallest shape of the main sets, the smallest odd shape, and the largest odd shape of at
    most SMALL_BYTES (more rows, so more of the planted ties, infinities and outliers)."""
    folder = suite.load(name)
    spec = folder.spec

    def size(shape):
        return suite.problem(folder, shape, spec.dtypes[0]).set_bytes

    main = [shape for set_name, shapes in spec.shapes.items() if set_name != "odd" for shape in shapes]
    odd = sorted((shape for shape in spec.shapes.get("odd", []) if size(shape) <= SMALL_BYTES), key=size)
    return [min(main, key=size)] + odd[:1] + odd[1:][-1:]


def _cases(every_shape: bool) -> list:
    cases = []
    for name in suite.names():
        spec = suite.load(name).spec
        shapes = _shapes(name)
        for dtype in spec.dtypes:
            for variant in spec.variants:
                for shape in shapes if every_shape else shapes[-1:]:
                    cases.append(pytest.param(name, shape, dtype, variant,
                                              id=f"{name}-{spec.label(shape)}-{dtype}-{variant}"))
    return cases


def _check_peer(name, shape, dtype, variant, device="cpu", forward=None):
    """Run the peer on one seeded draw and assert what the evaluation asserts of a kernel."""
    folder = suite.load(name)
    problem = suite.problem(folder, shape, dtype, variant)
    inputs = folder.reference.make_inputs(np.random.default_rng(SEED), shape, dtype, variant)
    expected = folder.reference.reference(inputs, shape, dtype, variant)
    tensors, scalars = peers.arguments(problem, inputs, device)
    outputs = (forward or suite.load_peer(name).forward)(tensors, scalars, variant)
    returned = {p.name for p in problem.buffers if p.role == "out"}  # and any `inout`, out of place
    assert returned <= set(outputs) <= returned | {p.name for p in problem.buffers if p.role == "inout"}
    got = peers.results(problem, tensors, outputs)
    for p in problem.buffers:
        if p.role == "in":
            check = unchanged(p.name, inputs[p.name], peers.to_numpy(tensors[p.name]))
        else:
            assert got[p.name].dtype == numpy_dtype(p.dtype) and got[p.name].shape == p.shape, p.name
            if p.role == "inout":  # so matching the reference below means it was updated (or returned)
                assert not np.array_equal(expected[p.name], inputs[p.name].astype(np.float64)), p.name
            check = compare(p.name, got[p.name], expected[p.name], problem.tolerance(p.dtype))
        assert check.passed, f"{problem.label}: {check.name}: {check.detail}"


@pytest.mark.parametrize(("name", "shape", "dtype", "variant"), _cases(every_shape=True))
def test_peer_matches_reference(name, shape, dtype, variant):
    _check_peer(name, shape, dtype, variant)


@pytest.mark.parametrize(("name", "shape", "dtype", "variant"), _cases(every_shape=False))
def test_peer_traces_whole_under_torch_compile(name, shape, dtype, variant):
    """fullgraph=True fails on any graph break; aot_eager runs the captured, functionalised graph
    (in-place updates of the inputs included) without the cost of code generation."""
    torch._dynamo.reset()
    compiled = torch.compile(suite.load_peer(name).forward, fullgraph=True, dynamic=False, backend="aot_eager")
    _check_peer(name, shape, dtype, variant, forward=compiled)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "compile"])
@pytest.mark.parametrize(("name", "shape", "dtype", "variant"), _cases(every_shape=False))
def test_peer_on_gpu(name, shape, dtype, variant, mode):
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    forward = suite.load_peer(name).forward
    if mode == "compile":
        torch._dynamo.reset()
        forward = torch.compile(forward, fullgraph=True, dynamic=False)
    _check_peer(name, shape, dtype, variant, device="cuda", forward=forward)


def test_conversions_keep_every_bit():
    import ml_dtypes

    rng = np.random.default_rng(0)
    for dtype in ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "int32", "int64"):
        array = rng.standard_normal((3, 5)).astype(numpy_dtype(dtype))
        tensor = peers.to_torch(array)
        back = peers.to_numpy(tensor)
        assert back.dtype == array.dtype and np.array_equal(back.view(np.uint8), array.view(np.uint8)), dtype
        tensor.zero_()
        assert array.any(), "to_torch shares memory with the array"
    bf16 = peers.to_torch(np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16))
    assert bf16.dtype == torch.bfloat16 and bf16.tolist() == [1.5, -2.0]


def test_run_peer_returns_out_and_inout_arguments():
    folder = suite.load("fused_add_rmsnorm")
    shape = {"T": 3, "H": 20}
    inputs = folder.reference.make_inputs(np.random.default_rng(SEED), shape, "bf16", "default")
    got = peers.run_peer("fused_add_rmsnorm", inputs, shape, "bf16")
    assert set(got) == {"x", "residual"}
    with pytest.raises(suite.UnknownKernelError, match="rmsnorm"):
        suite.load_peer("rms_norm")


@pytest.mark.gpu
def test_an_exported_kernel_is_checked_and_timed_by_the_peers_harness(tmp_path):
    """bench/harness_parity.py's measurement: the kernel a user exports, through its callable on
    torch tensors, under the peers' checks and graph-replay timing."""
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    from astra_kernels.jobs.exporting.cuda_file import export, resolve_source
    from astra_kernels.jobs.torch_peers import measure_exported
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

    shape = {"T": 16, "D": 4096}
    config = {"THREADS": 128, "VEC": 8, "CHUNKS": 4, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 1, "FLAT": 0, "STREAM": 1, "STATIC_D": 0}
    table = DispatchTable(kernel="silu_and_mul", dtype="bf16", variant="default", general=config,
                          entries=[DispatchEntry(shape=shape, config=config)])
    (tmp_path / "dispatch.json").write_text(table.model_dump_json())
    export(resolve_source(tmp_path / "dispatch.json"), tmp_path / "export", shapes=[shape])
    result = measure_exported(None, str(tmp_path / "export"), shape)
    assert result.status == "ok", result.message
    assert result.mode == "exported" and [c.name for c in result.checks] == ["x unchanged", "out"]
    assert all(c.passed for c in result.checks) and result.median_us > 0


def test_a_peers_cold_replays_are_preceded_by_the_same_l2_eviction_as_ours():
    """The eviction queued before each of a peer's cold replays reads twice the L2 it is given into
    a one-element sink (on CPU here: the call itself is what a GPU run would fail on)."""
    from astra_kernels.jobs.torch_peers import _l2_eviction

    evict = _l2_eviction("cpu", l2_bytes=1 << 12)
    assert evict().shape == () and float(evict()) == 0.0
