"""NVRTC through cuda-python, in this process: source in, cubin plus resource report out.

The types a compile is described by (CompileOptions, CompiledModule, KernelInfo), the
architecture it targets, and one compile behind the on-disk cache. Compiling needs no GPU and
no CUDA toolkit (the pip NVRTC and runtime-header wheels suffice). compiler.py adds deadlines
(through compiler_process.py, whose child calls compile_here) and parallel compiles.
"""

from __future__ import annotations

import functools
import os
import re
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from astra_kernels.tools.errors import CompileError, KernelNotFoundError, ToolchainError, UnknownArchError

from .compile_cache import CompileCache, cache_key
from .driver import local_arch
from .headers import cuda_include_dir
from .nvcc import nvcc_compile, nvcc_version
from .targets import DEFAULT_ARCH
from .resources import KernelParam, ResourceUsage, parse_ptx_signatures, parse_ptxas_report


# NVRTC honours the CUDA compute cache: a program it has compiled before (in any process) skips
# ptxas, and with it the `-v` resource report this module parses. Our own cache (compile_cache.py)
# already makes repeats free, so the driver's is switched off for this process and its children.
os.environ["CUDA_CACHE_DISABLE"] = "1"

_ELF_RELOCATABLE = 1  # e_type of an object file that still needs linking (ET_REL)
_ARCH = re.compile(r"^sm_(\d+)([af]?)$")


class CompileOptions(BaseModel):
    """Everything besides the source that decides the binary."""

    arch: str | None = None  # None: the local GPU's, or sm_90 without one
    fast_math: bool = False
    max_registers: int | None = None
    defines: dict[str, str | int | float | bool] = Field(default_factory=dict)
    line_info: bool = True
    std: str = "c++17"
    extra: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)  # include name -> text, served by NVRTC
    include_dirs: list[str] = Field(default_factory=list)  # absolute; a template's `//@ include:`
    compiler: Literal["nvrtc", "nvcc"] = "nvrtc"  # nvcc only where a template asks (nvcc.py says why)

    def nvrtc_flags(self, arch: str) -> list[str]:
        flags = [f"--gpu-architecture={arch}", f"--std={self.std}", "--ptxas-options=-v"]
        if self.fast_math:
            flags.append("--use_fast_math")
        if self.max_registers:
            flags.append(f"--maxrregcount={self.max_registers}")
        if self.line_info:
            flags.append("--generate-line-info")
        for name, value in sorted(self.defines.items()):
            if isinstance(value, bool):
                value = int(value)
            flags.append(f"-D{name}={value}")
        return flags + [f"-I{d}" for d in self.include_dirs] + list(self.extra)


class Diagnostic(BaseModel):
    """One `file(line): error|warning: message` line of the NVRTC log."""

    line: int
    severity: str
    message: str


class KernelInfo(BaseModel):
    name: str
    resources: ResourceUsage
    params: list[KernelParam]


class CompiledModule(BaseModel):
    """A compiled translation unit: the cubin to load and what the compiler said about it."""

    arch: str
    nvrtc_version: str
    options: list[str]
    cubin: bytes
    log: str
    kernels: dict[str, KernelInfo]
    compile_seconds: float
    cached: bool = False

    def kernel(self, name: str) -> KernelInfo:
        try:
            return self.kernels[name]
        except KeyError:
            raise KernelNotFoundError(
                f"kernel {name!r} is not an entry point of this source; it has "
                f"{sorted(self.kernels) or 'none'} (kernels must be declared extern \"C\" __global__)"
            ) from None


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ToolchainError(f"cuda-python's NVRTC bindings are missing: {exc}") from exc
    return nvrtc


def _check(result, what: str):
    nvrtc = _nvrtc()
    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


@functools.cache
def nvrtc_version() -> str:
    try:
        major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    except ToolchainError:
        raise
    except Exception as exc:  # the NVRTC shared library itself could not be loaded
        raise ToolchainError(f"cannot load NVRTC ({exc}); install nvidia-cuda-nvrtc") from exc
    return f"{major}.{minor}"


@functools.cache
def supported_archs() -> tuple[int, ...]:
    return tuple(_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def resolve_arch(arch: str | None) -> str:
    """Validate an explicit `sm_XY[a]`, or take the local GPU's, or fall back to sm_90."""
    if arch is None:
        arch = local_arch() or DEFAULT_ARCH
    match = _ARCH.match(arch)
    if not match:
        raise UnknownArchError(f"{arch!r} is not an architecture; write it like sm_90 or sm_90a")
    if int(match.group(1)) not in supported_archs():
        raise UnknownArchError(
            f"NVRTC {nvrtc_version()} cannot target {arch}; it supports "
            + ", ".join(f"sm_{a}" for a in supported_archs())
        )
    return arch


_DIAGNOSTIC = re.compile(r"^[^\s(]*\((\d+)\): (error|warning|catastrophic error)[^:]*: (.*)$")


def parse_diagnostics(log: str) -> list[Diagnostic]:
    return [
        Diagnostic(line=int(m.group(1)), severity=m.group(2), message=m.group(3).strip())
        for m in map(_DIAGNOSTIC.match, log.splitlines())
        if m
    ]


def _excerpt(source: str, line: int, context: int = 2) -> str:
    lines = source.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if n == line else ' '}{n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))


def _program_text(nvrtc, prog, size_fn, get_fn) -> bytes:
    size = _check(size_fn(prog), size_fn.__name__)
    buffer = b" " * size
    _check(get_fn(prog, buffer), get_fn.__name__)
    return buffer.rstrip(b"\0")


def _nvrtc_compile(source: str, name: str, flags: list[str],
                   headers: dict[str, str]) -> tuple[bool, str, bytes, str]:
    nvrtc = _nvrtc()
    names = sorted(headers)
    prog = _check(nvrtc.nvrtcCreateProgram(
        source.encode(), name.encode(), len(names),
        [headers[n].encode() for n in names], [n.encode() for n in names]), "create")
    try:
        encoded = [f.encode() for f in flags]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_text(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log.decode(errors="replace"), b"", ""
        cubin = _program_text(nvrtc, prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        ptx = _program_text(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        return True, log.decode(errors="replace"), cubin, ptx.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def key_and_flags(source: str, options: CompileOptions, name: str) -> tuple[str, list[str], str]:
    """The cache key, the compiler's flags and the arch. NVRTC gets the CUDA headers' folder; nvcc
    has its own toolkit's (a second, other version's would clash). Included folders enter the key
    by their files' names, sizes and times, so an edited header is a new compile."""
    arch = resolve_arch(options.arch)
    if options.compiler == "nvcc":
        flags, version = options.nvrtc_flags(arch), nvcc_version()
    else:
        flags, version = options.nvrtc_flags(arch) + [f"-I{cuda_include_dir()}"], nvrtc_version()
    key = cache_key(source, name, version, *flags,
                    *(f"{n}\0{text}" for n, text in sorted(options.headers.items())),
                    *(folder_digest(d) for d in options.include_dirs))
    return key, flags, arch


def folder_digest(folder: str) -> str:
    """A digest of an included folder's files (names and contents), so an edited header is a new
    compile and a new measurement, and the same files give the same key on any machine. Hashed
    once per state of the folder (its files' sizes and times)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else []
    stamp = "".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}\0" for p in files)
    return _digest(folder, stamp)


@functools.lru_cache(maxsize=64)
def _digest(folder: str, stamp: str) -> str:
    del stamp  # the cache's key only: a folder whose files changed is hashed again
    return cache_key(*(f"{p.relative_to(folder)}\0{p.read_bytes().hex()}"
                       for p in sorted(Path(folder).rglob("*")) if p.is_file()))


def from_cache(store: CompileCache, key: str, source: str) -> CompiledModule | None:
    """The cached module for `key`, None on a miss; a cached failure raises its CompileError again."""
    hit = store.get(key)
    if hit is None:
        return None
    meta, cubin = hit
    if not meta["ok"]:
        raise_compile_error(source, meta["log"])
    return _loadable(CompiledModule.model_validate({**meta["module"], "cubin": cubin, "cached": True}))


def _loadable(module: CompiledModule) -> CompiledModule:
    """Refuse relocatable device code (-rdc): it needs a device link step, and cudadevrt for
    device-side launches, that this toolchain never runs, so the driver could not load it. It
    is also how a kernel would start work on a stream of its own (cudaStreamFireAndForget), out
    of the timed launch's sight; every kernel here is whole-program and does its work in the
    launch that is timed."""
    if module.cubin[:4] == b"\x7fELF" and int.from_bytes(module.cubin[16:18], "little") == _ELF_RELOCATABLE:
        raise CompileError(
            "compilation produced relocatable device code (-rdc / --relocatable-device-code): it "
            "needs a device link step (and cudadevrt for device-side kernel launches) that this "
            "toolchain does not run, so it cannot be loaded; compile whole-program code, with no "
            "device-side launches", log=module.log)
    return module


def compile_here(source: str, options: CompileOptions, *, name: str = "kernel.cu",
                 cache: CompileCache | None = None) -> CompiledModule:
    """Compile in this process (NVRTC cannot be interrupted: compiler.compile_source runs a compile
    with a deadline in a child that calls this). Compile errors are cached too: the same source
    and options fail the same way."""
    key, flags, arch = key_and_flags(source, options, name)
    if cache is not None and (module := from_cache(cache, key, source)) is not None:
        return module
    start = time.perf_counter()
    compile_with = nvcc_compile if options.compiler == "nvcc" else _nvrtc_compile
    ok, log, cubin, ptx = compile_with(source, name, flags, options.headers)
    seconds = time.perf_counter() - start
    if not ok:
        if cache is not None:
            cache.put(key, {"ok": False, "log": log}, b"")
        raise_compile_error(source, log)

    resources = parse_ptxas_report(log)
    signatures = parse_ptx_signatures(ptx)
    kernels = {
        entry: KernelInfo(name=entry, resources=resources.get(entry, ResourceUsage()), params=params)
        for entry, params in signatures.items()
    }
    module = CompiledModule(
        arch=arch, nvrtc_version=nvcc_version() if options.compiler == "nvcc" else nvrtc_version(),
        options=flags, cubin=cubin, log=log,
        kernels=kernels, compile_seconds=seconds,
    )
    if cache is not None:
        to_cache(cache, key, module)
    return _loadable(module)


def to_cache(store: CompileCache, key: str, module: CompiledModule) -> None:
    """Keep a compiled module under `key` (compiled here, or elsewhere and sent back)."""
    store.put(key, {"ok": True, "module": module.model_dump(exclude={"cubin", "cached"})}, module.cubin)


def raise_compile_error(source: str, log: str):
    diagnostics = parse_diagnostics(log)
    errors = [d for d in diagnostics if d.severity != "warning"] or diagnostics
    if errors:
        first = errors[0]
        summary = f"line {first.line}: {first.message}\n{_excerpt(source, first.line)}"
        if len(errors) > 1:
            summary += f"\n(and {len(errors) - 1} more; see the log)"
    else:
        summary = log.strip()[-2000:] or "no log"
    raise CompileError(f"compilation failed at {summary}", log=log, diagnostics=diagnostics)
