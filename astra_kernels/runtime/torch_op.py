"""An exported kernel as a PyTorch custom op: `load(FOLDER)` gives torch.ops.astra.<kernel>_<dtype>.

What `astra export` wrote is built as written: `<kernel>.cu` with nvcc, one object per flag group
(the tuner's flags, as the file's header says), and `<kernel>_torch.cpp` (the op's schema and its
CUDA implementation: jobs/exporting/torch_op.py) against PyTorch's headers, linked into one shared
library that torch.ops.load_library registers. The library is cached by the hash of everything that
goes into it (the three sources' code, the flags, nvcc's and PyTorch's versions) under the compile
cache's folder, so a process after the first loads it in milliseconds. The sources' leading comment
blocks are left out of the hash: an export's header names when and by which command it was written,
and two exports of one table must be one library, since a process registers an op name once
(`load`) and may load it from either. It is built in a temporary folder and moved into place whole,
so a build that fails or is stopped leaves nothing half-written.

Why: the Python callable (runtime/exported_kernel.py) costs 120-230 us of host time per call and
is opaque to torch.compile; a registered op costs what a native op's dispatch does, is one node of a
torch.compile graph (with the fake implementation registered here, outputs written in place, as its
schema declares), and launches on PyTorch's current stream, so CUDA graphs capture it.

Without nvcc (or without a CUDA build of PyTorch) `load` says so in one line; the Python callable
still works.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from astra_kernels.tools.errors import AstraError, ToolchainError
from astra_kernels.tools.toolchain.compile_cache import default_cache_dir
from .export_format import MANIFEST, OP_NAMESPACE, ExportError, Group, op_name, torch_op_file

BUILD_TIMEOUT_S = 900  # nvcc over a file of dozens of kernels, on a small machine
_LOADED: dict[str, Path] = {}  # op name -> the library this process loaded it from
_LOCK = threading.Lock()


def load(folder: str | Path):
    """torch.ops.astra.<kernel>_<dtype> for the export in `folder`, built on first use (cached)."""
    import torch

    folder = Path(folder)
    manifest = _manifest(folder)
    name = op_name(manifest["kernel"], manifest["dtype"])
    with _LOCK:
        library = build(folder)
        if name in _LOADED:
            if _LOADED[name] != library:
                raise ExportError(f"torch.ops.{OP_NAMESPACE}.{name} is already loaded in this process from "
                                  f"{_LOADED[name]}; another export of {manifest['kernel']} in {manifest['dtype']} "
                                  "needs a process of its own")
        else:
            torch.ops.load_library(str(library))
            torch.library.register_fake(f"{OP_NAMESPACE}::{name}")(_writes_in_place)
            _LOADED[name] = library
    return getattr(getattr(torch.ops, OP_NAMESPACE), name)


def _writes_in_place(*args, **kwargs) -> None:
    """The op's fake implementation: it returns nothing (its outputs are arguments it writes)."""
    return None


def _code(text: str) -> str:
    """A source without its leading comment block (the export's header, which names when and by
    which command it was written), for the cache key. Only the leading block: a comment line
    further down may end in a backslash that splices the next line into it, or sit inside a macro."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("//")), len(lines))
    return "\n".join(lines[start:])


def build(folder: str | Path) -> Path:
    """The op's shared library for the export in `folder`: from the cache, else built now."""
    import torch
    from torch.utils import cpp_extension

    folder = Path(folder)
    manifest = _manifest(folder)
    kernel = manifest["kernel"]
    sources = {name: _read(folder / name) for name in (manifest["cu"], f"{kernel}.h", torch_op_file(kernel))}
    if not torch.cuda.is_available() and torch.version.cuda is None:
        raise ExportError(f"this PyTorch ({torch.__version__}) has no CUDA; the {kernel} op is built against a "
                          "CUDA build of PyTorch")
    nvcc_version = _nvcc_version()
    groups = [Group(**g) for g in manifest["groups"]]
    arch = manifest["arch"]
    try:
        includes = cpp_extension.include_paths("cuda")
    except OSError as exc:  # no CUDA_HOME and no nvcc PyTorch can find
        raise ExportError(f"PyTorch cannot find the CUDA toolkit's headers ({exc}); set CUDA_HOME") from None
    libraries = cpp_extension.library_paths("cuda")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    code = {name: _code(text) for name, text in sources.items()}
    key = hashlib.sha256(json.dumps([code, [g.nvcc_flags() for g in groups], arch, torch.__version__,
                                     nvcc_version, abi], sort_keys=True).encode()).hexdigest()[:24]
    target = default_cache_dir() / "torch_ops" / key / f"lib{op_name(kernel, manifest['dtype'])}.so"
    if target.is_file():
        return target
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent.parent) as tmp:
        work = Path(tmp)
        for name, text in sources.items():
            (work / name).write_text(text)
        objects = []
        for index, group in enumerate(groups):
            select = [f"-DASTRA_GROUP={index}"] if len(groups) > 1 else []
            obj = f"{kernel}_g{index}.o"
            _run([f"-arch={arch}", "-std=c++17", "-O3", *group.nvcc_flags(), *select, "-Xcompiler", "-fPIC",
                  "-c", manifest["cu"], "-o", obj], work, kernel)
            objects.append(obj)
        _run(["-std=c++17", "-O2", "-Xcompiler", "-fPIC", abi, *(f"-I{p}" for p in includes),
              "-c", torch_op_file(kernel), "-o", "op.o"], work, kernel)
        links = [f"-L{p}" for p in libraries] + [f"-Xlinker=-rpath,{p}" for p in libraries]
        _run(["-shared", *objects, "op.o", "-o", target.name, *links,
              "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch", "-lcudart"], work, kernel)
        staged = target.parent.with_name(target.parent.name + ".tmp")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        os.replace(work / target.name, staged / target.name)
        try:
            os.replace(staged, target.parent)  # whole, or not at all (another process may have won)
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)
    if not target.is_file():
        raise ExportError(f"building the {kernel} op left no library at {target}")
    return target


def _manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise ExportError(f"{folder} has no {MANIFEST}: give a folder written by `astra export`")
    manifest = json.loads(path.read_text())
    if not (folder / torch_op_file(manifest["kernel"])).is_file():
        raise ExportError(f"{folder} has no {torch_op_file(manifest['kernel'])}: it was exported before the op "
                          "existed; export it again")
    return manifest


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ExportError(f"cannot read {path}: {exc.strerror or exc}") from None


def _nvcc_version() -> str:
    """nvcc's version (part of the cache key); a one-line error where there is no nvcc."""
    from astra_kernels.tools.toolchain.nvcc import nvcc_version

    try:
        return nvcc_version()
    except ToolchainError:
        raise ExportError("no nvcc was found (ASTRA_NVCC, the PATH, CUDA_HOME, CUDA_PATH), and the op is built with "
                          "it: install the CUDA toolkit (or pip's nvidia-cuda-nvcc) or set ASTRA_NVCC; the Python "
                          "callable (<kernel>_launch.py) works without it") from None


def _run(arguments: list[str], cwd: Path, kernel: str) -> None:
    """One nvcc step of the build; its diagnostics in the error where it fails."""
    from astra_kernels.tools.toolchain.nvcc import nvcc_run

    try:
        status, log = nvcc_run(arguments, cwd, BUILD_TIMEOUT_S)
    except ToolchainError as exc:
        raise ExportError(f"building the {kernel} op: {exc}") from None
    if status != 0:
        raise AstraError(f"building the {kernel} op failed (exit {status}): {log.strip()[-1500:]}")
