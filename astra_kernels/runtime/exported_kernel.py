"""An exported kernel as a Python callable on framework tensors: `load_callable(DIR)(*tensors, **scalars)`.

What `astra export` wrote is run as written: `<kernel>.cu` is compiled with NVRTC (one module per
flag group, served from the compile cache after the first time) and loaded once per GPU, and each
call picks through the same dispatch table as the file's C++ pick (the CPU tests hold the two to
the same answers). Tensors arrive by DLPack or __cuda_array_interface__ (tools/toolchain/interop.py), are
checked against the kernel's signature (dtype, shape, contiguity, alignment, one device) so a
mistake is an error naming the argument rather than a wrong answer, and the launch goes on the
stream the framework is using: torch's current stream for torch tensors, so the call orders with
the model's other work and is captured into CUDA graphs; the legacy default stream otherwise, or
`stream=` when given. A pick the file lacks (a shape outside the export's coverage whose
`derive` values differ) is compiled from its source on demand, as the tuner's launcher does.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from astra_kernels.tools.toolchain import interop
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.device import Device, DeviceBuffer, Kernel, PreparedLaunch
from astra_kernels.tools.toolchain.driver import check, gpu_available
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH, STATIC_SHARED_LIMIT
from astra_kernels.tools.errors import AstraError, LaunchArgumentError, NoGpuError
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.templating.template import Exclusion

from astra_kernels import suite
from .dispatch import DispatchTable
from .export_format import (
    FORMAT_VERSION, MANIFEST, ROW_STRIDES_SINCE, Binary, ExportError, Group, binary_key, caller_scalars,
    row_strides, rows_apart_allowed, shape_args, tensor_symbols,
)

ALIGNMENT = 16  # bytes: the kernels load 16-byte vectors from each tensor's start


@dataclass(frozen=True)
class Launch:
    """What a call ran: the kernel (None when every output was empty), why, and how."""

    kernel: str | None
    source: str
    config: dict
    picked_by: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int
    from_file: bool  # False: compiled from its source because the file lacks this pick


class _OnDevice:
    """The file's kernels loaded on one GPU, and the binaries compiled there on demand."""

    def __init__(self, device: Device, kernels: dict[str, Kernel]):
        self.device = device
        self.kernels = kernels
        self.shared_allowed: dict[Kernel, int] = {}  # dynamic shared memory each kernel is allowed, above 48 KB
        self.prepared: dict[tuple, PreparedLaunch] = {}  # (shape, scalars) -> the launch, packed once


class ExportedKernel:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise ExportError(f"{self.folder} has no {MANIFEST}: give a folder written by `astra export`")
        self.manifest = json.loads(path.read_text())
        version = self.manifest.get("format", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ExportError(f"{path} is export format {version!r}; this astra-kernels reads formats up to "
                              f"{FORMAT_VERSION}: upgrade astra-kernels or export the table again")
        self.name = self.manifest["kernel"]
        self.table = DispatchTable.model_validate(self.manifest["table"])
        self.kernel_folder = suite.load(self.name)
        self.spec = self.kernel_folder.spec
        self.source = (self.folder / self.manifest["cu"]).read_text()
        self.groups = [Group(**g) for g in self.manifest["groups"]]
        self.binaries = {Binary(**b).key(): b["name"] for b in self.manifest["binaries"]}
        self.tensors = [a for a in self.spec.args if a.role != "scalar"]
        self.carriers = shape_args(self.spec)
        self.dtype = self.table.dtype
        # Everything a call reads from the spec, parsed once (a call parses nothing): the scalars the
        # caller passes, where each symbol comes from, each tensor's sizes as expressions.
        self.given = [a.name for a in caller_scalars(self.spec)]
        self._row_strides = row_strides(self.spec)  # scalar -> the tensor whose row stride it carries
        if self._row_strides and version < ROW_STRIDES_SINCE:
            raise ExportError(f"{self.folder} is export format {version}, written before {self.name}'s kernels took "
                              f"{' and '.join(self._row_strides)}: export the table again")
        self._rows_apart = rows_apart_allowed(self.spec, self.table)
        self._from_tensors = tensor_symbols(self.spec)
        self._dims = [[Expression(d) for d in a.shape] for a in self.tensors]
        self._elem_bytes = numpy_dtype(self.dtype).itemsize
        self._sizes: dict[tuple, list[tuple[int, ...]]] = {}  # shape -> each tensor's sizes there
        self._values: dict[tuple, dict[str, np.generic]] = {}  # (shape, given scalars) -> every scalar, converted
        self._devices: dict[int, _OnDevice] = {}
        self._plans: dict[tuple, Launch] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        names = ", ".join(a.name for a in self.tensors)
        return f"<exported {self.name} ({self.dtype}) from {self.folder}: tensors {names}>"

    # --- compile and load ----------------------------------------------------------------------

    def compile(self, arch: str) -> list:
        """The file's device part for `arch`, one module per flag group (the flags the tuner used)."""
        modules = []
        for index, group in enumerate(self.groups):
            defines = {"ASTRA_GROUP": index} if len(self.groups) > 1 else {}
            options = CompileOptions(arch=arch, fast_math=group.fast_math,
                                     max_registers=group.max_registers or None, defines=defines)
            modules.append(compile_source(self.source, options, name=self.manifest["cu"]))
        return modules

    def _on(self, index: int) -> _OnDevice:
        with self._lock:
            if index not in self._devices:
                from cuda.bindings import driver

                if not gpu_available():  # (which also initialises the driver the context comes from)
                    raise NoGpuError(f"{self.name}: no CUDA GPU is visible here, and the kernel launches on one")
                previous = check(driver.cuCtxGetCurrent(), "current context")
                device = Device(index)
                kernels = {}
                for module in self.compile(device.properties.arch):
                    kernels.update(device.load_all(module))
                if previous is not None and int(previous):  # leave the framework's context current
                    check(driver.cuCtxSetCurrent(previous), "restore context")
                self._devices[index] = _OnDevice(device, kernels)
            return self._devices[index]

    # --- the pick ------------------------------------------------------------------------------

    def plan(self, shape: dict[str, int], sms: int = suite.DEFAULT_SMS, arch: str | None = DEFAULT_ARCH) -> Launch:
        """What runs at `shape` on a GPU of `sms` multiprocessors and `arch`: the pick of the dispatch
        table, its geometry, and the file's kernel for it (None where the file lacks it)."""
        key = (tuple(shape[s] for s in self.spec.symbols), sms, arch)
        if key in self._plans:
            return self._plans[key]
        if any(shape[s] < 1 for s in self.spec.symbols):
            raise LaunchArgumentError(f"{self.name}: shape {shape} must be positive")
        pick = self.table.pick(shape, sms, arch)
        template = self.table.source_of(pick.source)
        env = suite.environment(self.spec, shape, self.dtype, self.table.variant, sms, arch)
        instance = template.instantiate(pick.config, env)
        if isinstance(instance, Exclusion):
            raise AstraError(f"{self.name}: the {pick.source} cannot run at {self.spec.label(shape)}: {instance.reason}")
        name = self.binaries.get(binary_key(template, pick.source, pick.config, instance))
        config, picked_by = dict(pick.config), pick.picked_by
        if name is None and (nearest := self._nearest_binary(pick.source, pick.config, env)) is not None:
            name, config, instance = nearest
            picked_by += "; not in this file, so its nearest kernel that runs here"
        launch = Launch(name, pick.source, config, picked_by, instance.grid, instance.block,
                        instance.shared_bytes, name is not None)
        self._plans[key] = launch
        return launch

    def _nearest_binary(self, source: str, config: dict[str, int], env) -> tuple | None:
        """Where the pick's binary is not in the file (a define derived from the shape, as a row
        length compiled in, at a width the export did not cover): the file's binary of the pick's
        source that runs here as it was built (its derived defines are this shape's), fewest value
        steps from the pick (the folder's template: positions in each parameter's values; another
        source: parameters that differ), the first of the file's order among equals; its name,
        configuration and instance, or None. The C launch cannot compile the pick, so it runs this
        (export_pick.cu.in's nearest_binary, the same rule); a call here runs it too, where the
        file's kernel starts at once and a compile would take seconds at the first call."""
        template = self.table.source_of(source)
        index = {p.name: {v: i for i, v in enumerate(p.values)} for p in template.parameters}
        best = None
        for built in self.manifest["binaries"]:
            if built["source"] != source:
                continue
            instance = template.instantiate(built["config"], env)
            if isinstance(instance, Exclusion):
                continue
            if self.binaries.get(binary_key(template, source, built["config"], instance)) != built["name"]:
                continue  # built with other derived defines or flags than this shape takes
            if source == "template":
                steps = sum(abs(index[n].get(built["config"][n], -1) - index[n].get(config[n], -1)) for n in index)
            else:
                steps = sum(built["config"][n] != config[n] for n in template.names)
            if best is None or steps < best[0]:
                best = (steps, built["name"], dict(built["config"]), instance)
        return best and best[1:]

    # --- a call --------------------------------------------------------------------------------

    def __call__(self, *tensors, stream=None, **scalars) -> Launch:
        """Launch on `tensors` (the signature's tensor arguments, in order) and `scalars` (those the
        shape does not give, by name: eps=1e-6). Returns what ran; the launch is asynchronous."""
        if len(tensors) != len(self.tensors):
            raise LaunchArgumentError(f"{self.name} takes {len(self.tensors)} tensors "
                                      f"({', '.join(a.name for a in self.tensors)}), got {len(tensors)}")
        handle, ordered = _stream_handle(stream, tensors)
        # DLPack's -1: no synchronisation, for tensors whose pending work is already on `handle`.
        consumer = -1 if ordered else handle
        views = [interop.view(t, consumer, what=f"{self.name} argument {a.name}") for t, a in zip(tensors, self.tensors)]
        index = self._check_devices(views)
        shape, values = self._shape_and_scalars(views, scalars)
        if all(math.prod(v.shape) == 0 for v, a in zip(views, self.tensors) if a.role != "in"):
            return Launch(None, "", {}, "every output is empty: nothing to compute", (), (), 0, True)
        on = self._on(index)
        props = on.device.properties
        launch = self.plan(shape, props.multiprocessors, props.arch)
        key = (tuple(shape.values()), _bits(values))
        with _current(on.device):  # loading, attributes and the launch belong to the tensors' GPU
            prepared = on.prepared.get(key)
            if prepared is None:
                prepared = self._prepare(on, launch, shape, values)
            _wait_for_producers(views, handle)
            from cuda.bindings import driver

            prepared([v.ptr for v in views], driver.CUstream(handle))
        return launch

    def _prepare(self, on: _OnDevice, launch: Launch, shape: dict[str, int], values: dict) -> PreparedLaunch:
        """The launch at `shape` with `values`, packed once: the kernel loaded, its shared memory
        allowed, its scalars in place and a slot for each pointer."""
        kernel = self._kernel(on, launch, shape)
        if launch.shared_bytes > on.shared_allowed.get(kernel, STATIC_SHARED_LIMIT):
            on.device.set_dynamic_shared(kernel, launch.shared_bytes)
            on.shared_allowed[kernel] = launch.shared_bytes
        slot = DeviceBuffer.view(0, 1)  # each tensor's pointer is written at the call
        args = [values[a.name] if a.role == "scalar" else slot for a in self.spec.args]
        prepared = on.device.prepare(kernel, launch.grid, launch.block, args, launch.shared_bytes)
        with self._lock:
            return on.prepared.setdefault((tuple(shape.values()), _bits(values)), prepared)

    def _kernel(self, on: _OnDevice, launch: Launch, shape: dict[str, int]) -> Kernel:
        if launch.kernel is not None:
            return on.kernels[launch.kernel]
        props = on.device.properties
        request = suite.request(self.kernel_folder, launch.source, shape, self.dtype, self.table.variant,
                                launch.config or None, sms=props.multiprocessors, arch=props.arch,
                                source=self.table.source_of(launch.source))
        key = request.options.model_dump_json()
        with self._lock:
            if key not in on.kernels:
                on.kernels[key] = on.device.load(compile_source(request.source, request.options), request.kernel)
            return on.kernels[key]

    def _check_devices(self, views) -> int:
        indices = set()
        for v, arg in zip(views, self.tensors):
            if v.device != "cuda":
                raise LaunchArgumentError(f"{self.name} argument {arg.name} is on {v.device}; the kernel needs CUDA tensors")
            index = v.device_index
            if index is None:
                index = interop.device_of(v.ptr) if v.ptr else next(iter(indices), 0)
            indices.add(index)
        if len(indices) > 1:
            raise LaunchArgumentError(f"{self.name}: the tensors are on different GPUs ({sorted(indices)})")
        return indices.pop()

    def _shape_and_scalars(self, views, given: dict) -> tuple[dict[str, int], dict[str, np.generic]]:
        """The shape (each symbol from its tensor dimension, else from the scalar the caller gave
        for it) and every scalar argument converted, each tensor's type, sizes and layout checked."""
        for v, arg in zip(views, self.tensors):
            expected_dtype = self.dtype if arg.dtype == "T" else arg.dtype
            if v.dtype != expected_dtype:
                raise LaunchArgumentError(f"{self.name} argument {arg.name} is {v.dtype}; this export takes {expected_dtype}")
            if len(v.shape) != len(arg.shape):
                raise LaunchArgumentError(f"{self.name} argument {arg.name} has {len(v.shape)} dimensions; it takes "
                                          f"{len(arg.shape)} [{', '.join(arg.shape)}]")
        if unknown := set(given) - set(self.carriers.values()) - set(self.given):
            raise LaunchArgumentError(f"{self.name} has no scalar {', '.join(sorted(unknown))}; give "
                                      f"{', '.join(self.given) or 'none'} (the tensors give the rest)")
        if missing := [name for name in self.given if name not in given]:
            first = next(a for a in self.spec.args if a.name == missing[0])
            raise LaunchArgumentError(f"{self.name} needs {missing[0]}= (the tuned runs used {first.value})")
        positions = {a.name: i for i, a in enumerate(self.tensors)}
        shape = {}
        for symbol in self.spec.symbols:
            if symbol in self._from_tensors:
                name, dim = self._from_tensors[symbol]
                shape[symbol] = views[positions[name]].shape[dim]
            else:
                value = given[self.carriers[symbol]]
                if not isinstance(value, (int, np.integer)) or not 1 <= value <= 2**31 - 1:
                    raise LaunchArgumentError(f"{self.name}: {self.carriers[symbol]}={value!r} must be a positive int")
                shape[symbol] = int(value)
        for symbol, name in self.carriers.items():  # a scalar the tensors give may be passed, if it agrees
            if name in given and name not in self.given and given[name] != shape[symbol]:
                raise LaunchArgumentError(f"{self.name}: {name}={given[name]}, but the tensors say {shape[symbol]}")
        key = tuple(shape.values())
        sizes = self._sizes.get(key)
        if sizes is None:
            env = {**shape, "ELEM_BYTES": self._elem_bytes}
            sizes = [tuple(int(d(env)) for d in dims) for dims in self._dims]
            self._sizes[key] = sizes
        strides: dict[str, int] = {}  # tensor -> its row stride, where the kernel takes it
        for v, arg, want in zip(views, self.tensors, sizes):
            if v.shape != want:
                raise LaunchArgumentError(f"{self.name} argument {arg.name} has shape {tuple(v.shape)}; with "
                                          f"{', '.join(f'{s} = {n}' for s, n in shape.items())} it must be {want} "
                                          f"[{', '.join(arg.shape)}]")
            if arg.row_stride and (self._rows_apart or v.is_contiguous()):
                strides[arg.name] = self._row_stride(v, arg)
            elif not v.is_contiguous():
                raise LaunchArgumentError(f"{self.name} argument {arg.name} is not contiguous (strides {v.strides}); "
                                          "pass .contiguous()")
            if v.nbytes and v.ptr % ALIGNMENT:
                raise LaunchArgumentError(f"{self.name} argument {arg.name} starts at {v.ptr:#x}, not {ALIGNMENT}-byte "
                                          "aligned (a slice?); the kernel loads 16-byte vectors")
            if v.readonly and arg.role != "in":
                raise LaunchArgumentError(f"{self.name} argument {arg.name} is read-only, but the kernel writes it")
        # cached only for plain numbers, keyed by their text (a NaN is not equal to itself; a tensor
        # hashes by identity): anything else is converted at every call, and no cache grows per call
        plain = all(type(given[name]) in (int, float, bool) or isinstance(given[name], np.generic)
                    for name in self.given)
        values_key = (key, tuple(strides.values()),
                      tuple((type(given[name]).__name__, repr(given[name])) for name in self.given)) if plain else None
        values = self._values.get(values_key) if plain else None
        if values is None:
            values = self._scalars(shape, given, strides)
            if values_key is not None:
                with self._lock:
                    self._values[values_key] = values
        return shape, values

    def _row_stride(self, v, arg) -> int:
        """The elements from one row of `v` to the next (ArgSpec.row_stride): each row contiguous, the
        rows apart by at least a row and a multiple of 16 bytes (the kernel's vector loads)."""
        row = 1
        for size, stride in zip(reversed(v.shape[1:]), reversed(v.strides[1:])):
            if size != 1 and stride != row:
                raise LaunchArgumentError(f"{self.name} argument {arg.name} has strides {v.strides}; each of its rows "
                                          "must be contiguous (pass .contiguous())")
            row *= size
        stride = v.strides[0] if v.shape[0] > 1 else row  # one row: its stride is never used
        if stride < row:
            raise LaunchArgumentError(f"{self.name} argument {arg.name} has strides {v.strides}; its rows overlap")
        if stride != row and stride * self._elem_bytes % ALIGNMENT:  # contiguous: as any tensor
            raise LaunchArgumentError(f"{self.name} argument {arg.name} has rows {stride} elements apart, not a multiple "
                                      f"of {ALIGNMENT} bytes; the kernel loads {ALIGNMENT}-byte vectors from each row")
        return stride

    def _scalars(self, shape: dict[str, int], given: dict, strides: dict[str, int]) -> dict[str, np.generic]:
        carried = {name: symbol for symbol, name in self.carriers.items()}
        values = {}
        for arg in self.spec.args:
            if arg.role != "scalar":
                continue
            if arg.name in self._row_strides:
                value = strides[self._row_strides[arg.name]]
            else:
                value = given[arg.name] if arg.name in self.given else shape[carried[arg.name]]
            try:
                if isinstance(value, (str, bytes)) or np.ndim(value) != 0:
                    raise TypeError("not one number")
                converted = numpy_dtype(arg.dtype).type(value)
            except (OverflowError, TypeError, ValueError) as exc:
                raise LaunchArgumentError(f"{self.name}: {arg.name}={value!r} is not a {arg.dtype}: {exc}") from None
            if np.issubdtype(type(converted), np.integer) and converted != value:
                raise LaunchArgumentError(f"{self.name}: {arg.name}={value} does not fit {arg.dtype}")
            values[arg.name] = converted
        return values


def _bits(values: dict[str, np.generic]) -> tuple[bytes, ...]:
    """The converted scalars as the kernel receives them: equal bits, the same packed launch."""
    return tuple(v.tobytes() for v in values.values())


def load_callable(folder: str | Path) -> ExportedKernel:
    """The exported kernel in `folder` (written by `astra export`), ready to call on tensors."""
    return ExportedKernel(folder)


def _stream_handle(stream, tensors) -> tuple[int, bool]:
    """The CUDA stream to launch on, and whether the tensors' pending work is known to be on it:
    `stream` (a handle, or an object with cuda_stream or ptr), else torch's current stream on the
    first torch tensor's device (where torch queues its own work), else the legacy default (0)."""
    if stream is not None:
        for attribute in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attribute):
                return int(getattr(stream, attribute)), False
        return int(stream), False
    for t in tensors:
        if type(t).__module__.startswith("torch") and getattr(t, "is_cuda", False):
            import torch

            return int(torch.cuda.current_stream(t.device).cuda_stream), True
    return 0, False


class _current:
    """Make `device`'s context current for the launch, restoring the caller's afterwards."""

    def __init__(self, device: Device):
        self.device = device
        self.pushed = False

    def __enter__(self):
        from cuda.bindings import driver

        current = check(driver.cuCtxGetCurrent(), "current context")
        if current is None or int(current) != int(self.device.context):
            check(driver.cuCtxPushCurrent(self.device.context), "push context")
            self.pushed = True
        return self

    def __exit__(self, *exc):
        if self.pushed:
            from cuda.bindings import driver

            check(driver.cuCtxPopCurrent(), "pop context")


def _wait_for_producers(views, handle: int) -> None:
    """__cuda_array_interface__ v3: order the launch after the stream still producing a tensor."""
    from cuda.bindings import driver

    for producer in {v.producer_stream for v in views if v.producer_stream not in (None, handle)}:
        event = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "event")
        try:
            check(driver.cuEventRecord(event, driver.CUstream(producer)), "record on the producer's stream")
            check(driver.cuStreamWaitEvent(driver.CUstream(handle), event, 0), "wait on the launch stream")
        finally:
            driver.cuEventDestroy(event)
