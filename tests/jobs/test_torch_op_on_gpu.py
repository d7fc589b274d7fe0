"""The exported kernels as PyTorch custom ops on a GPU (runtime/torch_op.py): the same outputs as
the Python callable (whose kernels tests/jobs/test_exporting_on_gpu.py holds to the float64
reference) at the tuned and the odd shapes, inside a CUDA graph, under torch.compile with
fullgraph=True (no graph break), and a one-line error naming the argument for bad input."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.suite import tuned_tables

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

KERNELS = ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "merge_attn_states", "rotary_embedding", "topk_softmax",
           "per_token_group_quant_fp8")


class _Built(dict):
    """kernel -> (its PyTorch op, its Python callable), each exported and built on first use, so a test
    run narrowed with -k builds only the kernels it calls (an op's first build takes 15-60 s)."""

    def __init__(self, folder_for):
        super().__init__()
        self.folder_for = folder_for
        self.kind = (tuned_tables.device_key(torch.cuda.get_device_name()) or "H200").lower()

    def __missing__(self, kernel):
        from astra_kernels.jobs.exporting import cuda_file
        from astra_kernels.runtime import torch_op
        from astra_kernels.runtime.exported_kernel import load_callable

        out = self.folder_for(kernel)
        # a kernel tuned for the H200 only (rotary_embedding, topk_softmax, per_token_group_quant_fp8): its
        # table runs anywhere (the pick reads the GPU)
        table_kind = self.kind if kernel in tuned_tables.shipped_kernels(self.kind, "cold") else "h200"
        cuda_file.export(cuda_file.resolve_source(None, table_kind, kernel), out)
        self[kernel] = (torch_op.load(out), load_callable(out))
        return self[kernel]


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA device")
    return _Built(tmp_path_factory.mktemp)


def shapes(kernel):
    """Three of Astra's shapes (the serving set's first three where Astra's paper has none) and every odd shape."""
    spec = suite.load(kernel).spec
    return (spec.shapes.get("astra") or spec.shapes.get("serving", []))[:3] + spec.shapes.get("odd", [])


def same_bits(a, b) -> bool:
    """Bit for bit, whatever the dtype: torch.equal has no fp8 kernel, and NaN != NaN."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def call_both(kernel, ops, shape, seed=0):
    from astra_kernels.jobs.torch_tensors import op_arguments

    op, callable_ = ops[kernel]
    tensors, scalars = op_arguments(kernel, "bf16", shape, seed=seed)
    copies = [t.clone() for t in tensors]
    op(*tensors, **scalars)
    callable_(*copies, **scalars)
    torch.cuda.synchronize()
    return tensors, copies


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_op_writes_what_the_python_callable_writes(ops, kernel):
    for shape in shapes(kernel):
        mine, theirs = call_both(kernel, ops, shape)
        for a, b in zip(mine, theirs):
            assert same_bits(a, b), (kernel, shape)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_op_is_captured_into_a_cuda_graph_and_traced_whole_by_torch_compile(ops, kernel):
    from astra_kernels.jobs.torch_tensors import op_arguments

    op, _ = ops[kernel]
    shape = shapes(kernel)[0]
    eager, scalars = op_arguments(kernel, "bf16", shape, seed=1)
    op(*eager, **scalars)
    graphed, _ = op_arguments(kernel, "bf16", shape, seed=1)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op(*[t.clone() for t in graphed], **scalars)  # warm, outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        op(*graphed, **scalars)
    graph.replay()
    compiled_args, _ = op_arguments(kernel, "bf16", shape, seed=1)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *t: op(*t, **scalars), fullgraph=True)  # a graph break raises
    compiled(*compiled_args)
    torch.cuda.synchronize()
    for a, b, c in zip(eager, graphed, compiled_args):
        assert same_bits(a, b) and same_bits(a, c), kernel


def test_bad_input_is_one_line_naming_the_argument(ops):
    from astra_kernels.jobs.torch_tensors import op_arguments

    op, _ = ops["rmsnorm"]
    (x, w, out), scalars = op_arguments("rmsnorm", "bf16", {"T": 16, "H": 4096})
    misaligned = torch.empty(16 * 4096 + 8, dtype=torch.bfloat16, device="cuda")[1:1 + 16 * 4096].view(16, 4096)
    cases = [((x.float(), w, out), "argument x is Float"), ((x.cpu(), w, out), "argument x is on cpu"),
             ((x, w[:2048], out), "argument w has shape"), ((x.t().contiguous().t(), w, out), "argument x is not contiguous"),
             ((misaligned, w, out), "argument x is not 16-byte aligned"), ((x, w, out[:, :1]), "argument out")]
    for tensors, words in cases:
        with pytest.raises(RuntimeError) as caught:
            op(*tensors, **scalars)
        first = str(caught.value).splitlines()[0]
        assert words in first and first.startswith("rmsnorm: "), first


def test_a_size_given_as_a_scalar_is_checked_against_the_tensors(ops):
    """rotary_embedding's head counts and head size come from its scalars (q holds HQ * D only as a
    product): a count that does not fit q, or is not positive, is one line naming it."""
    from astra_kernels.jobs.torch_tensors import op_arguments

    op, callable_ = ops["rotary_embedding"]
    tensors, scalars = op_arguments("rotary_embedding", "bf16", {"N": 16, "HQ": 32, "HK": 8, "D": 128, "R": 128,
                                                                 "P": 4096})
    assert set(scalars) == {"num_q_heads", "num_k_heads", "head_dim"}
    for wrong, words in (({"num_q_heads": 16}, "argument q has shape"), ({"head_dim": 0}, "head_dim = 0 must be")):
        with pytest.raises(RuntimeError) as caught:
            op(*tensors, **{**scalars, **wrong})
        first = str(caught.value).splitlines()[0]
        assert words in first and first.startswith("rotary_embedding: "), first
    with pytest.raises(Exception, match="argument q has shape"):
        callable_(*tensors, **{**scalars, "num_q_heads": 16})


def qkv_views(shape, seed=2):
    """positions, q and k as SGLang passes them (column slices of one QKV output, v after them), the
    cache, and the whole buffer: rows (HQ + 2 HK) * D elements apart."""
    from astra_kernels.jobs.torch_tensors import op_arguments

    (positions, q, k, cache), scalars = op_arguments("rotary_embedding", "bf16", shape, seed=seed)
    n, wq, wk = q.shape[0], q.shape[1], k.shape[1]
    qkv = torch.randn(n, wq + 2 * wk, device="cuda").to(torch.bfloat16)
    qkv[:, :wq], qkv[:, wq:wq + wk] = q, k
    return positions, qkv[:, :wq], qkv[:, wq:wq + wk], cache, qkv, scalars


@pytest.mark.parametrize("shape", [dict(N=n, HQ=32, HK=8, D=128, R=128, P=4096) for n in (1, 16, 256)]
                         + [dict(N=37, HQ=5, HK=1, D=128, R=64, P=4096), dict(N=100, HQ=8, HK=4, D=256, R=256, P=4096)])
def test_rotary_takes_q_and_k_in_place_in_the_qkv_output(ops, shape):
    """The op and the callable rotate q and k where they lie in the fused QKV output (row strides, no
    copy): the same bits as on contiguous copies, v and the rest untouched; also captured in a CUDA
    graph and under torch.compile(fullgraph=True), whose functionalization of the mutated views must
    write back into the buffer."""
    op, callable_ = ops["rotary_embedding"]
    positions, q, k, cache, qkv, scalars = qkv_views(shape)
    want_q, want_k, v_before = q.clone(), k.clone(), qkv[:, q.shape[1] + k.shape[1]:].clone()
    op(positions, want_q, want_k, cache, **scalars)
    op(positions, q, k, cache, **scalars)
    torch.cuda.synchronize()
    assert torch.equal(q, want_q) and torch.equal(k, want_k), shape
    assert torch.equal(qkv[:, q.shape[1] + k.shape[1]:], v_before)
    positions, q, k, cache, qkv, scalars = qkv_views(shape)
    callable_(positions, q, k, cache, **scalars)
    torch.cuda.synchronize()
    assert torch.equal(q, want_q) and torch.equal(k, want_k), shape
    positions, q, k, cache, qkv, scalars = qkv_views(shape)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(positions, q, k, cache, **scalars)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(q, want_q) and torch.equal(k, want_k), shape
    positions, q, k, cache, qkv, scalars = qkv_views(shape)
    wq, wk = q.shape[1], k.shape[1]

    def split_and_rotate(buffer, positions, cache):
        a, b, _ = buffer.split([wq, wk, wk], dim=-1)
        op(positions, a, b, cache, **scalars)
        return buffer

    torch._dynamo.reset()
    compiled = torch.compile(split_and_rotate, fullgraph=True)
    out = compiled(qkv, positions, cache)
    torch.cuda.synchronize()
    assert torch.equal(out[:, :wq], want_q) and torch.equal(out[:, wq:wq + wk], want_k), shape
    assert torch.equal(qkv[:, :wq], want_q), "the compiled call must write into the caller's buffer"


def test_rotary_refuses_rows_it_cannot_load_in_one_line(ops):
    op, _ = ops["rotary_embedding"]
    positions, q, k, cache, qkv, scalars = qkv_views(dict(N=16, HQ=32, HK=8, D=128, R=128, P=4096))
    odd = torch.zeros(16, 4096 + 1024 + 4, dtype=torch.bfloat16, device="cuda")  # rows 10248 bytes apart
    for args, words in (((positions, odd[:, :4096], odd[:, 4096:5120], cache), "has rows 5124 elements apart"),
                        ((positions, q.t().contiguous().t(), k, cache), "each of its rows must be contiguous")):
        with pytest.raises(RuntimeError) as caught:
            op(*args, **scalars)
        first = str(caught.value).splitlines()[0]
        assert words in first and first.startswith("rotary_embedding: argument q"), first


def test_export_build_leaves_the_library_load_then_reads(tmp_path, capsys):
    """`astra export --build` builds the op's library with the folder; load() then finds it cached."""
    import json

    from astra_kernels.cli import main
    from astra_kernels.runtime import torch_op

    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA device")
    assert main(["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", str(tmp_path / "b"),
                 "--build", "--json"]) == 0
    library = json.loads(capsys.readouterr().out)["library"]
    assert library.endswith("libsilu_and_mul_bf16.so") and str(torch_op.build(tmp_path / "b")) == library
