"""The CUDA driver through cuda-python: initialising it, unwrapping its results, and what the
local GPU is. Below both the compiler (which targets the local GPU's architecture when none is
given) and the device (which owns a context on it).
"""

from __future__ import annotations

import functools

from astra_kernels.tools.errors import LaunchError, NoGpuError


def api():
    """cuda-python's driver bindings (one place to replace them, as the host-memory tests do)."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise NoGpuError(f"cuda-python's driver bindings are missing: {exc}") from exc
    return driver


def check(result, what: str = "CUDA call"):
    """Unwrap a cuda-python (err, *values) tuple, raising LaunchError on failure."""
    driver = api()
    if isinstance(result, tuple):
        err, *values = result
    else:
        err, values = result, []
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        raise LaunchError(
            f"{what}: {name.decode() if name else err} ({text.decode() if text else ''})"
        )
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def init() -> int:
    """Initialise the driver once; return the device count or raise NoGpuError."""
    try:
        driver = api()
        (err,) = driver.cuInit(0)
    except NoGpuError:
        raise
    except Exception as exc:  # libcuda.so absent: the loader raises its own error type
        raise NoGpuError(f"no NVIDIA driver on this machine ({exc})") from exc
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NoGpuError(f"the CUDA driver did not initialise: {err}")
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0:
        raise NoGpuError("the CUDA driver sees no device")
    return count


def gpu_available() -> bool:
    try:
        init()
    except NoGpuError:
        return False
    return True


def local_arch(index: int = 0) -> str | None:
    """`sm_XY` of the local device, or None when there is none (compiling still works)."""
    try:
        init()
    except NoGpuError:
        return None
    driver = api()
    attr = driver.CUdevice_attribute
    device = check(driver.cuDeviceGet(index))
    major = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
    minor = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
    return f"sm_{major}{minor}"
