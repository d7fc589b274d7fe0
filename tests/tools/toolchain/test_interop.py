"""Framework tensors described through DLPack and __cuda_array_interface__ without importing the
framework: pointer, shape, strides, element type and place, checked on CPU torch tensors (the
same capsule layout as CUDA ones) and on a described CUDA array."""

from __future__ import annotations

import pytest

from astra_kernels.tools.errors import LaunchArgumentError
from astra_kernels.tools.toolchain.interop import view

torch = pytest.importorskip("torch")


def test_dlpack_gives_pointer_shape_strides_and_bf16():
    t = torch.arange(24, dtype=torch.float32).to(torch.bfloat16).reshape(4, 6)
    v = view(t)
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device) == (t.data_ptr(), (4, 6), (6, 1), "bf16", "cpu")
    assert v.is_contiguous() and v.nbytes == 48
    row = view(t[1:])
    assert row.ptr == t.data_ptr() + 12 and row.shape == (3, 6)
    transposed = view(t.t())
    assert transposed.strides == (1, 6) and not transposed.is_contiguous()
    assert view(t[:, :1]).strides == (6, 1) and not view(t[:, :3]).is_contiguous()
    assert view(t[:1]).is_contiguous()  # a size-1 dimension may carry any stride
    assert view(torch.zeros(3, dtype=torch.float16)).dtype == "fp16"
    assert view(torch.zeros(3, dtype=torch.int32)).dtype == "int32"


def test_dlpack_fp8_is_the_kernels_fp8():
    """torch's float8_e4m3fn and float8_e5m2 (DLPack codes 10 and 12) are what per_token_group_quant_fp8
    writes; the Python callable refused them before (the GPU test of the exported op found it). The
    other fp8 flavours (fnuz: no negative zero, another bias) are not those bits and stay refused."""
    q = view(torch.zeros(3, 128, dtype=torch.float8_e4m3fn))
    assert (q.dtype, q.nbytes, q.strides) == ("fp8_e4m3", 384, (128, 1))
    assert view(torch.zeros(2, dtype=torch.float8_e5m2)).dtype == "fp8_e5m2"
    with pytest.raises(LaunchArgumentError, match="q has DLPack type .code 11, 8 bits"):
        view(torch.zeros(2, dtype=torch.float8_e4m3fnuz), what="q")


def test_cuda_array_interface_and_refusals():
    class Described:
        def __init__(self):
            self.__cuda_array_interface__ = {"shape": (2, 8), "typestr": "<f4", "data": (4096, True), "version": 3,
                                             "strides": (64, 4), "stream": 7}

    v = view(Described())
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device) == (4096, (2, 8), (16, 1), "fp32", "cuda")
    assert v.readonly and v.producer_stream == 7 and v.device_index is None and not v.is_contiguous()
    with pytest.raises(LaunchArgumentError, match="x: a builtins.list is not a tensor"):
        view([1, 2], what="x")
    with pytest.raises(LaunchArgumentError, match="x has DLPack type .code 5"):
        view(torch.zeros(2, dtype=torch.complex64), what="x")
