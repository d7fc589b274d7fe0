"""nvcc as the compiler of a source that NVRTC cannot compile: source in, cubin plus resource report out.

NVRTC compiles device code only, with no host C++ standard library. Kernels taken as they ship
from a project that builds with nvcc (SGLang's JIT kernels include <concepts>, <ostream> and
TVM-FFI's host headers beside their device code) compile only where nvcc and a host compiler
parse the whole file. A template asks for it with `//@ compiler: nvcc`; everything else about the
compile (the flags, the cache, the resource report, the compiler child's deadline) is the same as
NVRTC's, so nvrtc.compile_here calls `nvcc_compile` in place of NVRTC and nothing after it can
tell the difference. nvcc comes from ASTRA_NVCC, the PATH, or CUDA_HOME/CUDA_PATH; the host
compiler is nvcc's default.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from astra_kernels.tools.errors import ToolchainError

from .processes import die_with_parent

NVCC = "nvcc"


@functools.cache
def nvcc_path() -> str:
    """The nvcc binary; ToolchainError naming every place tried."""
    tried = []
    explicit = os.environ.get("ASTRA_NVCC")
    if explicit:
        if Path(explicit).is_file():
            return explicit
        tried.append(f"ASTRA_NVCC: {explicit}")
    found = shutil.which(NVCC)
    if found:
        return found
    tried.append("PATH")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidate = Path(os.environ[var]) / "bin" / NVCC
            if candidate.is_file():
                return str(candidate)
            tried.append(f"{var}: {candidate}")
    raise ToolchainError(
        "this kernel is compiled with nvcc (its `//@ compiler: nvcc`), and no nvcc was found; tried "
        + "; ".join(tried) + ". Install the CUDA toolkit, or set ASTRA_NVCC to an nvcc binary.")


@functools.cache
def nvcc_version() -> str:
    """`nvcc 13.0.88`: part of every nvcc compile's cache key."""
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not match:
        raise ToolchainError(f"{nvcc_path()} --version did not say its version: {out.strip()[-200:] or '(nothing)'}")
    return f"nvcc {match.group(1)}"


NVCC_TIMEOUT_S = 600  # a bound of nvcc's own, beside the compile child's deadline: its children die with it


def _kill_with_parent() -> None:
    die_with_parent()


def nvcc_compile(source: str, name: str, flags: list[str],
                 headers: dict[str, str]) -> tuple[bool, str, bytes, str]:
    """(ok, log, cubin, ptx), as nvrtc._nvrtc_compile answers. The source and the headers served by
    name go to a temporary folder (removed after); `--keep` leaves the PTX there, whose entry
    signatures name the kernels' parameters. Paths of that folder are cut from the log, so a
    diagnostic reads `kernel.cu(12): error: ...` as NVRTC's do."""
    with tempfile.TemporaryDirectory(prefix="astra-nvcc-") as tmp:
        folder = Path(tmp)
        (folder / name).write_text(source)
        for header, text in headers.items():
            (folder / header).parent.mkdir(parents=True, exist_ok=True)
            (folder / header).write_text(text)
        keep = folder / "keep"
        keep.mkdir()
        status, log = nvcc_run(["-cubin", "-o", str(folder / "out.cubin"), "--keep", f"--keep-dir={keep}",
                                *flags, f"-I{folder}", str(folder / name)], folder)
        if status != 0 and (status < 0 or "error" not in log):
            # killed, or failed without a diagnostic (no host compiler, a full disk): the machine's
            # failure, not the source's, so raised rather than cached as the source's compile error
            raise ToolchainError(f"nvcc failed without a compile error (exit {status}): "
                                 f"{log.strip()[-500:] or 'no output'}")
        if status != 0:
            return False, log, b"", ""
        ptx = "\n".join(p.read_text(errors="replace") for p in sorted(keep.glob("*.ptx")))
        return True, log, (folder / "out.cubin").read_bytes(), ptx


def nvcc_run(arguments: list[str], cwd: Path, timeout_s: float = NVCC_TIMEOUT_S) -> tuple[int, str]:
    """(exit status, its output) of nvcc with `arguments` in `cwd`: nvcc_compile's compile, and the
    build steps of an exported kernel's PyTorch op (astra_kernels/runtime/torch_op.py). nvcc runs in
    a session of its own, so its children (the host preprocessor, cicc, ptxas), which do not inherit
    the kill-with-parent request, are killed with it as one process group on its timeout or on
    anything that stops this call (a Ctrl-C, the compile child's deadline). The output has `cwd`'s
    path cut, so a diagnostic reads `kernel.cu(12): error: ...` as NVRTC's do. ToolchainError when
    nvcc cannot run or runs past the timeout."""
    argv = [nvcc_path(), *arguments]
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                   preexec_fn=_kill_with_parent, start_new_session=True)
    except OSError as exc:
        raise ToolchainError(f"cannot run {argv[0]}: {exc}") from exc
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"nvcc ran past {timeout_s:.0f} s and was stopped") from None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, (out + err).replace(f"{cwd}/", "")
