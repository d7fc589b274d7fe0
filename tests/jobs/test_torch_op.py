"""The exported kernel as a PyTorch custom op, on CPU: the C++ source `astra export` writes for it
(its schema, its checks, deterministic text), and what `load` says where it cannot build. The op
itself runs in tests/jobs/test_torch_op_on_gpu.py."""

from __future__ import annotations

import re

import pytest

from astra_kernels.jobs.exporting import cuda_file, torch_op
from astra_kernels.jobs.generated_files import fill
from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.runtime.export_format import torch_op_file
from astra_kernels.tools.errors import AstraError, UsageError

SCHEMAS = {
    "rmsnorm": "rmsnorm_bf16(Tensor x, Tensor w, Tensor(a!) out, float eps) -> ()",
    "fused_add_rmsnorm": "fused_add_rmsnorm_bf16(Tensor(a!) x, Tensor(b!) residual, Tensor w, float eps) -> ()",
    "silu_and_mul": "silu_and_mul_bf16(Tensor x, Tensor(a!) out) -> ()",
    "merge_attn_states": "merge_attn_states_bf16(Tensor va, Tensor sa, Tensor vb, Tensor sb, Tensor(a!) v, "
                         "Tensor(b!) s) -> ()",
    "rotary_embedding": "rotary_embedding_bf16(Tensor positions, Tensor(a!) q, Tensor(b!) k, Tensor cos_sin_cache, "
                        "int num_q_heads, int num_k_heads, int head_dim) -> ()",
}


def shipped(kernel: str) -> DispatchTable:
    from astra_kernels.suite import tuned_tables

    return DispatchTable.model_validate_json(tuned_tables.table_path(kernel, "h200").read_text())


@pytest.mark.parametrize("kernel", sorted(SCHEMAS))
def test_each_op_takes_the_specs_tensors_and_the_scalars_the_shape_does_not_give(kernel):
    folder = suite.load(kernel)
    assert torch_op.schema(folder, "bf16") == SCHEMAS[kernel]
    text = torch_op.render(shipped(kernel), folder)
    assert text == torch_op.render(shipped(kernel), folder)  # the same table, the same text
    assert f'm.def("{SCHEMAS[kernel]}");' in text and f'#include "{kernel}.h"' in text
    assert not re.search(r"@[A-Z_]+@", text)  # every placeholder filled
    for arg in folder.spec.args:  # every tensor checked, the shape read from them, nothing from scalars
        if arg.role != "scalar":
            assert f"{'ASTRA_ROWS_APART' if arg.row_stride else 'ASTRA_TENSOR'}({arg.name}, " in text
    assert "at::cuda::getCurrentCUDAStream()" in text


def test_a_size_the_tensors_hold_only_as_a_product_comes_from_its_scalar_and_an_uncarried_one_is_passed_on(tmp_path):
    """rotary_embedding: q[N, HQ * D] gives neither HQ nor D, so the op takes num_q_heads, num_k_heads and
    head_dim (checked positive, then against every tensor's sizes); no scalar carries the cache length P,
    so the .cu's launch takes it as an argument of its own, after the kernel's, and the op passes the
    cache's row count there."""
    folder = suite.load("rotary_embedding")
    source = cuda_file.resolve_source(None, "h200", "rotary_embedding")
    text = torch_op.render(source.table, folder)
    for line in ("ASTRA_SYMBOL(sym_N, positions, 0);", "ASTRA_GIVEN(sym_HQ, num_q_heads);",
                 "ASTRA_GIVEN(sym_HK, num_k_heads);", "ASTRA_GIVEN(sym_D, head_dim);",
                 "ASTRA_SYMBOL(sym_R, cos_sin_cache, 1);", "ASTRA_SYMBOL(sym_P, cos_sin_cache, 0);",
                 "ASTRA_SIZE(q, 1, ax_mul(err, sym_HQ, sym_D));"):
        assert line in text, line
    launch = re.search(r"rotary_embedding_launch\((.*), at::cuda::getCurrentCUDAStream\(\)\)", text).group(1)
    assert launch.endswith("static_cast<int>(sym_R), static_cast<int>(stride_q_stride), "
                           "static_cast<int>(stride_k_stride), static_cast<int>(sym_P)"), launch
    cuda_file.export(source, tmp_path / "out")
    header = (tmp_path / "out" / "rotary_embedding.h").read_text()
    assert "int rotary_dim, int q_stride, int k_stride, int P, cudaStream_t stream);" in header
    cu = (tmp_path / "out" / "rotary_embedding.cu").read_text()
    assert "int rotary_dim, int q_stride, int k_stride, int P, cudaStream_t stream) {" in cu
    assert "(ax_int)nnz, (ax_int)num_q_heads, (ax_int)num_k_heads, (ax_int)head_dim, (ax_int)rotary_dim, (ax_int)P" in cu
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "P: an argument of its own, after the others" in readme
    assert "num_q_heads=HQ, num_k_heads=HK, head_dim=D)" in (tmp_path / "out" / "rotary_embedding_launch.py").read_text()


def test_q_and_k_may_be_views_into_a_qkv_output_their_row_strides_passed_to_the_kernel():
    """rotary_embedding's q and k carry row_stride: the op checks each row contiguous and the rows
    apart by a 16-byte multiple (not contiguity), and passes the views' strides where the kernel takes
    them; the caller never gives q_stride or k_stride, the other tensors stay contiguous."""
    folder = suite.load("rotary_embedding")
    text = torch_op.render(cuda_file.resolve_source(None, "h200", "rotary_embedding").table, folder)
    for line in ("ASTRA_ROWS_APART(q, at::kBFloat16, 2);", "ASTRA_ROWS_APART(k, at::kBFloat16, 2);",
                 "ASTRA_TENSOR(positions, at::kLong, 1);", "ASTRA_ROW_STRIDE(stride_q_stride, q);",
                 "ASTRA_ROW_STRIDE(stride_k_stride, k);"):
        assert line in text, line
    assert "stride" not in torch_op.schema(folder, "bf16")
    assert "not a multiple of 16 bytes" in text and "its rows overlap" in text


def test_an_fp16_table_makes_an_op_of_its_own_name_and_types():
    folder = suite.load("silu_and_mul")
    table = shipped("silu_and_mul").model_copy(update={"dtype": "fp16"})
    text = torch_op.render(table, folder)
    assert "silu_and_mul_fp16(Tensor x, Tensor(a!) out) -> ()" in text
    assert "at::kHalf" in text and "const __half*" in text and "kBFloat16" not in text


def test_export_writes_the_op_source_beside_the_cu(tmp_path):
    source = cuda_file.resolve_source(None, "h200", "silu_and_mul")
    result = cuda_file.export(source, tmp_path / "out")
    written = tmp_path / "out" / torch_op_file("silu_and_mul")
    assert written in result.files and written.read_text() == torch_op.render(source.table, suite.load("silu_and_mul"))


def test_code_placed_in_the_op_template_cannot_carry_a_string_or_a_directive():
    for bad in ['x"); system("rm', "x\n#include <evil>", "x // comment", "x /* c */", "x\\"]:
        with pytest.raises(UsageError, match="holds characters generated C"):
            fill("export_torch_op.cpp.in", KERNEL="k", OP="k_bf16", SCHEMA=bad, FIRST="x", PARAMS="",
                 CHECKS="", LAUNCH="")


def test_load_says_in_one_line_why_it_cannot_build(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from astra_kernels.runtime import torch_op as runtime_op
    from astra_kernels.tools.toolchain import nvcc

    with pytest.raises(AstraError, match="no export.json"):
        runtime_op.load(tmp_path)
    cuda_file.export(cuda_file.resolve_source(None, "h200", "rmsnorm"), tmp_path / "out")
    monkeypatch.setenv("ASTRA_NVCC", str(tmp_path / "no-nvcc"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    nvcc.nvcc_path.cache_clear()
    nvcc.nvcc_version.cache_clear()
    try:
        with pytest.raises(AstraError) as caught:
            runtime_op.load(tmp_path / "out")
    finally:
        nvcc.nvcc_path.cache_clear()
        nvcc.nvcc_version.cache_clear()
    message = str(caught.value)
    assert "\n" not in message
    if torch.version.cuda is None:
        assert "has no CUDA" in message
    else:
        assert "no nvcc was found" in message and "_launch.py" in message


def test_the_build_compiles_each_flag_group_and_the_op_then_links_once_and_is_cached(tmp_path, monkeypatch):
    """runtime/torch_op.build with a stand-in nvcc (a script that logs its arguments and writes its
    -o file): one object per flag group of the .cu, one of the op's C++, one link; the library
    lands in the cache under a key of its sources' code, and a second build, or a build of another
    export of the same table, runs nothing."""
    torch = pytest.importorskip("torch")
    from astra_kernels.runtime import torch_op as runtime_op
    from astra_kernels.tools.toolchain import nvcc

    cuda_file.export(cuda_file.resolve_source(None, "h200", "rmsnorm"), tmp_path / "out")
    log = tmp_path / "nvcc.log"
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Cuda compilation tools, V13.0.88'; exit 0; fi\n"
                    f"echo \"$@\" >> {log}\n"
                    "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo built > \"$2\"; fi; shift; done\n")
    fake.chmod(0o755)
    (tmp_path / "cuda" / "include").mkdir(parents=True)
    monkeypatch.setenv("ASTRA_NVCC", str(fake))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path / "cuda"))  # read by PyTorch at its import
    nvcc.nvcc_path.cache_clear()
    nvcc.nvcc_version.cache_clear()
    try:
        library = runtime_op.build(tmp_path / "out")
        calls = log.read_text().splitlines()
        again = runtime_op.build(tmp_path / "out")
        # another export of the same table (its header has another time and command): the same library
        cuda_file.export(cuda_file.resolve_source(None, "h200", "rmsnorm"), tmp_path / "out2", command="again")
        assert "again" in (tmp_path / "out2" / "rmsnorm.cu").read_text()
        assert runtime_op.build(tmp_path / "out2") == library
        # another table (the H100's) is another library
        other = tmp_path / "out3"
        cuda_file.export(cuda_file.resolve_source(None, "h100", "rmsnorm"), other)
        built_other = runtime_op.build(other)
    finally:
        nvcc.nvcc_path.cache_clear()
        nvcc.nvcc_version.cache_clear()
    manifest = __import__("json").loads((tmp_path / "out" / "export.json").read_text())
    assert library == again and library.read_text() == "built\n" and library.name == "librmsnorm_bf16.so"
    assert library.is_relative_to(tmp_path / "cache") and log.read_text().splitlines()[:len(calls)] == calls  # cached
    assert built_other != library and len(log.read_text().splitlines()) > len(calls)
    compiles = [c for c in calls if " -c rmsnorm.cu " in f" {c} "]
    assert len(compiles) == len(manifest["groups"]) and all("-arch=sm_90" in c for c in compiles)
    assert sum(" -c rmsnorm_torch.cpp " in f" {c} " for c in calls) == 1
    assert sum(c.startswith("-shared ") for c in calls) == 1 and len(calls) == len(compiles) + 2


def test_a_shape_no_argument_can_give_is_refused_by_name():
    """A symbol neither a tensor dimension nor a scalar gives, and a symbol named like an argument,
    are one-line export errors."""
    from types import SimpleNamespace

    from astra_kernels.runtime.export_format import ExportError, caller_scalars, shape_params

    def arg(name, role, shape=(), value=""):
        return SimpleNamespace(name=name, role=role, shape=list(shape), value=value, dtype="int32", row_stride=None)

    product_only = SimpleNamespace(name="k", symbols=["T", "H", "D"],
                                   args=[arg("x", "in", ["T", "H * D"]), arg("heads", "scalar", value="H")])
    with pytest.raises(ExportError, match="k: neither a tensor dimension nor a scalar argument gives D"):
        caller_scalars(product_only)
    # astra new names a scalar after its symbol (an int N): it carries N, so the shape can be told
    same_name = SimpleNamespace(name="k", symbols=["N", "M"], args=[arg("x", "in", ["N * M"]),
                                                                   arg("N", "scalar", value="N"), arg("M", "scalar", value="M")])
    assert [a.name for a in caller_scalars(same_name)] == ["N", "M"] and shape_params(same_name) == []
    clash = SimpleNamespace(name="k", symbols=["T", "x"], args=[arg("x", "in", ["T", "x"])])
    with pytest.raises(ExportError, match="shape symbol x is also an argument's name"):
        shape_params(clash)
