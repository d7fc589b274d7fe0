"""The element types kernels use, mapped to NumPy storage types.

NumPy has no bf16 or fp8; ml_dtypes supplies them as real NumPy dtypes, so host buffers of those
types round-trip through device memory as raw bytes and convert to float64 for checking.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from astra_kernels.tools.errors import LaunchArgumentError

DTYPES: dict[str, np.dtype] = {
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "fp64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
}

# The C++ type of each element type, as kernels and exported launchers name it.
C_TYPES = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "fp64": "double",
           "fp8_e4m3": "__nv_fp8_e4m3", "fp8_e5m2": "__nv_fp8_e5m2", "int8": "signed char",
           "uint8": "unsigned char", "int32": "int", "uint32": "unsigned int", "int64": "long long",
           "uint64": "unsigned long long"}

FLOAT_TYPES = frozenset({"fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp64"})


def numpy_dtype(name: str) -> np.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise LaunchArgumentError(
            f"unknown dtype {name!r}; known: {', '.join(DTYPES)}"
        ) from None


def is_float(name: str) -> bool:
    return name in FLOAT_TYPES
