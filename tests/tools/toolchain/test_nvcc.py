"""tools/toolchain/nvcc.py with a stand-in nvcc (a shell script), on CPU: what nvcc_compile hands
back for a compile that succeeds, one that fails with a diagnostic, and one that fails without any
(the machine's failure, raised). The real nvcc runs in the GPU tests of imported kernels."""

from __future__ import annotations

import pytest

from astra_kernels.tools.errors import ToolchainError
from astra_kernels.tools.toolchain import nvcc

SCRIPT = """#!/bin/sh
if [ "$1" = --version ]; then echo 'Cuda compilation tools, V13.0.88'; exit 0; fi
out=""; keep=""
for a in "$@"; do
  case "$a" in --keep-dir=*) keep="${a#--keep-dir=}";; esac
done
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done
MODE
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    def make(mode: str):
        path = tmp_path / "nvcc"
        path.write_text(SCRIPT.replace("MODE", mode))
        path.chmod(0o755)
        monkeypatch.setenv("ASTRA_NVCC", str(path))
        nvcc.nvcc_path.cache_clear()
    yield make
    nvcc.nvcc_path.cache_clear()


def test_a_compile_gives_the_cubin_the_ptx_and_a_log_without_the_temporary_folder(stand_in):
    stand_in('printf cubin > "$out"; echo ".entry k(" > "$keep/k.ptx"; echo "$out: note"; exit 0')
    ok, log, cubin, ptx = nvcc.nvcc_compile("__global__ void k() {}", "k.cu", ["-arch=sm_90"], {"h.cuh": "//"})
    assert ok and cubin == b"cubin" and ".entry k(" in ptx
    assert log.strip() == "out.cubin: note"  # the folder's path cut


def test_a_compile_error_is_an_outcome_and_a_silent_failure_is_raised(stand_in):
    stand_in('echo "k.cu(1): error: expected a ;"; exit 1')
    ok, log, cubin, _ = nvcc.nvcc_compile("bad", "k.cu", [], {})
    assert not ok and "k.cu(1): error" in log and cubin == b""
    stand_in("exit 3")
    with pytest.raises(ToolchainError, match="without a compile error"):
        nvcc.nvcc_compile("x", "k.cu", [], {})
