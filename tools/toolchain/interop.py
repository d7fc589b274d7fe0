"""Framework tensors as device pointers: DLPack and __cuda_array_interface__, read without the framework.

An exported kernel is called on whatever tensors a server holds (torch, CuPy, JAX, Numba...). Both
protocols give the same facts (pointer, shape, strides, element type, device); reading them here
with ctypes means no framework is imported to launch on its tensors. DLPack comes first because
it carries bf16, which __cuda_array_interface__ cannot name (torch refuses it for bf16 tensors).
The producer's `stream` argument is how DLPack orders the consumer after pending work on the
tensor; it is given the stream the kernel will run on.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from astra_kernels.tools.errors import LaunchArgumentError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {KDL_CPU: "cpu", KDL_CUDA: "cuda", KDL_CUDA_HOST: "cuda pinned host memory",
                 KDL_CUDA_MANAGED: "cuda managed memory", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm"}
# (DLPack type code, bits) -> the project's dtype names (tools/toolchain/dtypes.py); code 0 int, 1 uint, 2 float,
# 4 bfloat, 10 float8_e4m3fn and 12 float8_e5m2 (DLPack 1.1; torch's float8_e4m3fn and float8_e5m2).
_DLPACK_DTYPES = {(2, 16): "fp16", (2, 32): "fp32", (2, 64): "fp64", (4, 16): "bf16", (0, 8): "int8",
                  (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (1, 32): "uint32", (1, 64): "uint64",
                  (10, 8): "fp8_e4m3", (12, 8): "fp8_e5m2"}
_TYPESTRS = {"<f2": "fp16", "<f4": "fp32", "<f8": "fp64", "|i1": "int8", "<i4": "int32", "<i8": "int64",
             "|u1": "uint8", "<u4": "uint32", "<u8": "uint64"}
_ITEMSIZE = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "int8": 1, "uint8": 1, "int32": 4, "uint32": 4,
             "int64": 8, "uint64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class TensorView:
    """What a kernel needs of a tensor. `strides` are in elements; `device` is "cuda" or where it is."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: str
    device_index: int | None  # None: the protocol does not say (see device_of)
    readonly: bool = False
    producer_stream: int | None = None  # __cuda_array_interface__ v3: the stream still writing it

    @property
    def nbytes(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count * _ITEMSIZE[self.dtype]

    def is_contiguous(self) -> bool:
        """Row-major and compact; sizes of 1 may carry any stride, as in torch."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def view(obj, stream: int | None = None, what: str = "tensor") -> TensorView:
    """What `obj` holds and where; `stream` is the CUDA stream handle the consumer will use (0: the
    legacy default stream; -1: none to order after, the work is already on it). `what` names the
    argument in errors. Tensors anywhere are described; the caller decides what it accepts."""
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, stream, what)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_interface(obj.__cuda_array_interface__, what)
    raise LaunchArgumentError(
        f"{what}: a {type(obj).__module__}.{type(obj).__name__} is not a tensor: it has neither __dlpack__ "
        "nor __cuda_array_interface__ (torch, CuPy, JAX and Numba arrays have them)")


def _from_dlpack(obj, stream: int | None, what: str) -> TensorView:
    device_type = int(obj.__dlpack_device__()[0]) if hasattr(obj, "__dlpack_device__") else KDL_CUDA
    # DLPack: the consumer's stream for CUDA memory, 1 for the legacy default stream (0 is reserved).
    on_gpu = device_type in (KDL_CUDA, KDL_CUDA_MANAGED)
    consumer = None if stream is None or not on_gpu else (1 if stream == 0 else int(stream))
    try:
        capsule = obj.__dlpack__(stream=consumer)
    except TypeError:  # a producer from before the stream argument
        capsule = obj.__dlpack__()
    if not _capsule_valid(capsule, b"dltensor"):
        raise LaunchArgumentError(f"{what}: __dlpack__ returned something that is not an unused DLPack capsule")
    managed = ctypes.cast(_capsule_pointer(capsule, b"dltensor"), ctypes.POINTER(_DLManagedTensor)).contents
    tensor = managed.dl_tensor
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
        strides = tuple(strides)
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = _DLPACK_DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        raise LaunchArgumentError(f"{what} has DLPack type (code {code}, {bits} bits, {lanes} lanes), which no kernel here takes")
    device = tensor.device
    ptr = (tensor.data or 0) + int(tensor.byte_offset)
    # The capsule still holds the tensor's managed struct: its destructor calls the deleter, and
    # the data itself stays alive with `obj`, which the caller holds through the launch.
    place = "cuda" if device.device_type in (KDL_CUDA, KDL_CUDA_MANAGED) else _DEVICE_NAMES.get(
        device.device_type, f"device type {device.device_type}")
    return TensorView(ptr, shape, strides, dtype, place, int(device.device_id))


def _from_interface(interface: dict, what: str) -> TensorView:
    typestr = interface["typestr"]
    dtype = _TYPESTRS.get(typestr)
    if dtype is None:
        raise LaunchArgumentError(f"{what} has element type {typestr!r}, which no kernel here takes")
    shape = tuple(int(n) for n in interface["shape"])
    ptr, readonly = interface["data"]
    itemsize = _ITEMSIZE[dtype]
    if interface.get("strides") is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
        strides = tuple(strides)
    else:
        byte_strides = tuple(int(s) for s in interface["strides"])
        if any(s % itemsize for s in byte_strides):
            raise LaunchArgumentError(f"{what} has strides {byte_strides} bytes, not whole elements")
        strides = tuple(s // itemsize for s in byte_strides)
    producer = interface.get("stream") if interface.get("version", 0) >= 3 else None
    return TensorView(int(ptr or 0), shape, strides, dtype, "cuda", None, bool(readonly),
                      None if producer is None else int(producer))


def device_of(ptr: int) -> int:
    """The ordinal of the GPU holding `ptr` (__cuda_array_interface__ does not say), from the driver."""
    from cuda.bindings import driver

    from .driver import check

    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(driver.cuPointerGetAttribute(attr, ptr), f"the device of pointer {ptr:#x}"))
