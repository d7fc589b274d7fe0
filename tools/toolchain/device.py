"""The GPU through cuda-python's driver API: one context, buffers, modules, launches.

Everything here runs inside the evaluation worker (tools/measuring/worker.py), which owns the process's
only CUDA context; a fault poisons that context, and the worker is what gets replaced.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from . import driver as cu
from .driver import check
from .nvrtc import CompiledModule, KernelInfo
from astra_kernels.tools.errors import LaunchArgumentError, LaunchError, NoGpuError


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    arch: str
    multiprocessors: int
    l2_bytes: int
    max_threads_per_block: int
    max_shared_per_block_optin: int
    registers_per_multiprocessor: int
    memory_bytes: int


class DeviceBuffer:
    """Device memory of a fixed size; frees itself when closed or collected.

    Uploads and fills run on the legacy default stream, and return before the copy engine is
    done (a memset always, a pageable upload once the data is staged), while kernels run on
    the Device's non-blocking stream, which does not wait for the legacy one. So each waits for
    the context to settle: otherwise a poison fill can land after the kernel wrote its output.
    """

    def __init__(self, nbytes: int):
        self.nbytes = max(int(nbytes), 1)
        self.ptr = int(check(cu.api().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes})"))
        self._owner = True

    @classmethod
    def view(cls, ptr: int, nbytes: int) -> "DeviceBuffer":
        """A buffer inside memory someone else owns (an arena); closing it frees nothing."""
        buf = cls.__new__(cls)
        buf.nbytes, buf.ptr, buf._owner = max(int(nbytes), 1), int(ptr), False
        return buf

    def upload(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        if data.nbytes > self.nbytes:
            raise LaunchArgumentError(f"{data.nbytes} bytes do not fit a {self.nbytes}-byte buffer")
        check(cu.api().cuMemcpyHtoD(self.ptr, data.ctypes.data, data.nbytes), "upload")
        check(cu.api().cuCtxSynchronize(), "upload")

    def download(self, dtype, shape) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        check(cu.api().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "download")
        return out

    def copy_from(self, other: "DeviceBuffer", nbytes: int | None = None) -> None:
        """The first `nbytes` (all of `other`) of another device buffer, copied on the GPU."""
        nbytes = other.nbytes if nbytes is None else int(nbytes)
        if nbytes > self.nbytes or nbytes > other.nbytes:
            raise LaunchArgumentError(f"{nbytes} bytes do not fit a {min(self.nbytes, other.nbytes)}-byte buffer")
        check(cu.api().cuMemcpyDtoD(self.ptr, other.ptr, nbytes), "device copy")
        check(cu.api().cuCtxSynchronize(), "device copy")

    def fill_bytes(self, byte: int) -> None:
        check(cu.api().cuMemsetD8(self.ptr, byte, self.nbytes), "memset")
        check(cu.api().cuCtxSynchronize(), "memset")

    def close(self) -> None:
        if self.ptr and self._owner:
            cu.api().cuMemFree(self.ptr)
        self.ptr = 0

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class DeviceArena:
    """One allocation carved into aligned buffers, the way a framework's caching allocator packs
    tensors: many small buffers then share pages (and address-translation entries) instead of
    each starting a fresh one, as separate cuMemAlloc calls would."""

    ALIGN = 512

    def __init__(self, sizes: list[int]):
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-max(int(size), 1) // self.ALIGN) * self.ALIGN
        self.memory = DeviceBuffer(total)
        self.buffers = [DeviceBuffer.view(self.memory.ptr + o, n) for o, n in zip(offsets, sizes)]

    def close(self) -> None:
        for buf in self.buffers:
            buf.close()
        self.memory.close()


class Kernel:
    """A loaded entry function with its compiler facts; turns Python values into launch args."""

    def __init__(self, function, info: KernelInfo, module=None):
        self.function = function
        self.info = info
        self.module = module  # the loaded module's handle: its __device__ variables are read through it

    @property
    def name(self) -> str:
        return self.info.name

    def pack_args(self, args) -> tuple[list, np.ndarray]:
        """Return (keep-alive list, array of pointers) for cuLaunchKernel's kernelParams.

        Each argument is a DeviceBuffer (a pointer), or a NumPy scalar whose size must match the
        PTX parameter; plain Python ints and floats are refused because their width is a guess.
        """
        params = self.info.params
        if len(args) != len(params):
            raise LaunchArgumentError(
                f"kernel {self.name} takes {len(params)} arguments, got {len(args)}"
            )
        holders = []
        for position, (arg, param) in enumerate(zip(args, params)):
            if isinstance(arg, DeviceBuffer):
                value = np.array([arg.ptr], dtype=np.uint64)
            elif isinstance(arg, np.generic):
                value = np.array([arg])
            else:
                raise LaunchArgumentError(
                    f"argument {position} of {self.name}: {type(arg).__name__} is not a "
                    "DeviceBuffer or a sized NumPy scalar (np.int32(4), np.float32(1.0), ...)"
                )
            if value.nbytes != param.size:
                raise LaunchArgumentError(
                    f"argument {position} of {self.name}: {value.nbytes} bytes given, the kernel's "
                    f"parameter is .{param.ptx_type} ({param.size} bytes)"
                )
            if param.ptx_type.startswith("f") != (value.dtype.kind == "f") and not isinstance(arg, DeviceBuffer):
                raise LaunchArgumentError(
                    f"argument {position} of {self.name}: {value.dtype} given for a .{param.ptx_type} parameter"
                )
            holders.append(value)
        pointers = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        return holders, pointers


class Device:
    """The process's CUDA context on one device (the primary context), and a stream."""

    def __init__(self, index: int = 0):
        count = cu.init()
        if not 0 <= index < count:
            raise NoGpuError(f"GPU index {index} requested, but the driver sees {count} device(s)")
        driver = cu.api()
        self.index = index
        self.device = check(driver.cuDeviceGet(index))
        self.context = check(driver.cuDevicePrimaryCtxRetain(self.device), "retain context")
        check(driver.cuCtxSetCurrent(self.context), "set context")
        self.stream = check(
            driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "stream"
        )
        self.properties = self._properties()
        self._modules: list = []

    def _properties(self) -> DeviceProperties:
        driver = cu.api()
        attr = driver.CUdevice_attribute

        def get(a):
            return check(driver.cuDeviceGetAttribute(a, self.device))

        name = check(driver.cuDeviceGetName(256, self.device)).split(b"\0")[0].decode()
        return DeviceProperties(
            name=name,
            arch=f"sm_{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}"
            f"{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}",
            multiprocessors=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            l2_bytes=get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            max_threads_per_block=get(attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            max_shared_per_block_optin=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            registers_per_multiprocessor=get(attr.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
            memory_bytes=int(check(driver.cuDeviceTotalMem(self.device))),
        )

    def _load_module(self, module: CompiledModule):
        """The module's cubin loaded into this context (unloaded with it), after the arch check."""
        if module.arch.rstrip("af") != self.properties.arch:
            raise LaunchError(
                f"module compiled for {module.arch} cannot run on this {self.properties.arch} device"
            )
        handle = check(cu.api().cuModuleLoadData(module.cubin), "cuModuleLoadData")
        self._modules.append(handle)
        return handle

    def load(self, module: CompiledModule, name: str) -> Kernel:
        """Load a compiled module's cubin and return one of its kernels."""
        info = module.kernel(name)  # KernelNotFoundError before touching the driver
        handle = self._load_module(module)
        return Kernel(check(cu.api().cuModuleGetFunction(handle, name.encode()), f"get {name}"), info, handle)

    def load_all(self, module: CompiledModule) -> dict[str, Kernel]:
        """Load a module's cubin once and return all its kernels (an exported file holds many)."""
        handle = self._load_module(module)
        return {name: Kernel(check(cu.api().cuModuleGetFunction(handle, name.encode()), f"get {name}"), info)
                for name, info in module.kernels.items()}

    def set_dynamic_shared(self, kernel: Kernel, nbytes: int) -> None:
        """Allow `nbytes` of dynamic shared memory (needed above 48 KB)."""
        driver = cu.api()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuFuncSetAttribute(kernel.function, attr, int(nbytes)), "dynamic shared memory")

    def check_launch(self, kernel: Kernel, grid, block, shared: int = 0) -> None:
        """Refuse, with the limit it breaks, a launch shape this device or this kernel cannot run.

        The driver would refuse it too, but as CUDA_ERROR_INVALID_VALUE or
        LAUNCH_OUT_OF_RESOURCES with no word of which limit; asked once per evaluation, not per
        launch, since stream timing measures the launch path.
        """
        driver = cu.api()
        attr, fattr = driver.CUdevice_attribute, driver.CUfunction_attribute

        def device_limit(name: str) -> int:
            return int(check(driver.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"), self.device)))

        def kernel_limit(name: str) -> int:
            return int(check(driver.cuFuncGetAttribute(getattr(fattr, f"CU_FUNC_ATTRIBUTE_{name}"), kernel.function)))

        for what, dims in (("block", _dim3(block, "block")), ("grid", _dim3(grid, "grid"))):
            for axis, size in zip("XYZ", dims):
                most = device_limit(f"MAX_{what.upper()}_DIM_{axis}")
                if size > most:
                    raise LaunchArgumentError(f"{what} {axis.lower()} of {size} exceeds the device's {most}")
        threads = math.prod(_dim3(block, "block"))
        if threads > self.properties.max_threads_per_block:
            raise LaunchArgumentError(
                f"block of {threads} threads exceeds the device's {self.properties.max_threads_per_block}")
        most = kernel_limit("MAX_THREADS_PER_BLOCK")
        if threads > most:
            raise LaunchArgumentError(
                f"block of {threads} threads exceeds the {most} that {kernel.name} can run with "
                f"{kernel_limit('NUM_REGS')} registers per thread")
        static = kernel_limit("SHARED_SIZE_BYTES")
        if static + int(shared) > self.properties.max_shared_per_block_optin:
            raise LaunchArgumentError(
                f"{int(shared)} bytes of dynamic shared memory plus {kernel.name}'s {static} static exceed "
                f"the device's {self.properties.max_shared_per_block_optin} per block")

    def context_error(self) -> str | None:
        """None while the context is usable; the sticky error once a kernel has faulted in it."""
        try:
            check(cu.api().cuCtxSynchronize(), "context")
        except LaunchError as exc:
            return str(exc)
        return None

    def occupancy(self, kernel: Kernel, block_threads: int, dynamic_shared: int = 0) -> int:
        """Resident blocks per multiprocessor for this block size, from the driver."""
        return int(check(
            cu.api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                kernel.function, int(block_threads), int(dynamic_shared)
            ),
            "occupancy",
        ))

    def launch(self, kernel: Kernel, grid, block, args, shared: int = 0, stream=None, pdl: bool = False) -> None:
        """Enqueue one launch; argument errors raise before the driver sees anything. `pdl` allows
        the grid to start before the previous one on the stream ends (tools/toolchain/pdl.py)."""
        grid = _dim3(grid, "grid")
        block = _dim3(block, "block")
        threads = block[0] * block[1] * block[2]
        if threads > self.properties.max_threads_per_block:
            raise LaunchArgumentError(
                f"block of {threads} threads exceeds the device's {self.properties.max_threads_per_block}"
            )
        _holders, pointers = kernel.pack_args(args)
        stream = stream if stream is not None else self.stream
        if pdl:
            check(cu.api().cuLaunchKernelEx(_pdl_config(grid, block, shared, stream), kernel.function,
                                             pointers.ctypes.data, 0), f"launch {kernel.name} (PDL)")
            return
        check(
            cu.api().cuLaunchKernel(kernel.function, *grid, *block, int(shared), stream, pointers.ctypes.data, 0),
            f"launch {kernel.name}",
        )

    def prepare(self, kernel: Kernel, grid, block, args, shared: int = 0) -> "PreparedLaunch":
        """`launch`'s checks and argument packing done once for a caller that launches the same
        kernel at the same geometry and scalars again and again, on other pointers each time."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        threads = block[0] * block[1] * block[2]
        if threads > self.properties.max_threads_per_block:
            raise LaunchArgumentError(
                f"block of {threads} threads exceeds the device's {self.properties.max_threads_per_block}"
            )
        return PreparedLaunch(kernel, grid, block, args, int(shared))

    def synchronize(self, stream=None) -> None:
        check(cu.api().cuStreamSynchronize(stream if stream is not None else self.stream), "synchronize")

    def upload(self, array: np.ndarray) -> DeviceBuffer:
        buf = DeviceBuffer(array.nbytes)
        buf.upload(array)
        return buf


class PreparedLaunch:
    """One kernel at one geometry with its scalar arguments fixed: cuLaunchKernel's parameter array
    is built once, and a call writes that call's pointers into it. The driver copies the parameters
    when the launch is enqueued, so the next call may overwrite them; the lock keeps two threads from
    writing between each other's write and launch. Why: an exported kernel's Python callable runs the
    same pick at every step of a server, and rebuilding the array was most of its host time."""

    def __init__(self, kernel: Kernel, grid: tuple, block: tuple, args, shared: int):
        self.kernel = kernel
        self._holders, self._pointers = kernel.pack_args(args)
        self._slots = [h for h, a in zip(self._holders, args) if isinstance(a, DeviceBuffer)]
        self._launch_args = (kernel.function, *grid, *block, shared)
        self._params = int(self._pointers.ctypes.data)  # the array lives as long as this object
        self._lock = threading.Lock()

    def __call__(self, pointers, stream) -> None:
        """Launch on `pointers` (one per buffer argument, in order) on `stream`."""
        with self._lock:
            for slot, pointer in zip(self._slots, pointers, strict=True):
                slot[0] = pointer
            check(cu.api().cuLaunchKernel(*self._launch_args, stream, self._params, 0),
                  f"launch {self.kernel.name}")


def _pdl_config(grid, block, shared: int, stream):
    """A launch configuration carrying the programmatic-stream-serialization attribute."""
    driver = cu.api()
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = int(shared)
    config.hStream = stream
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def _dim3(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise LaunchArgumentError(f"{what} {value!r} must be 1 to 3 positive sizes")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))

