"""State a kernel keeps across launches: its module's writable `__device__` variables.

A kernel rewarded for speed can remember: count its launches and work only in the ones the checks
see, keep the last result and replay it when the pointers (or a few input words) match, carry a
table of answers from one launch to the next. Each needs memory that outlives a launch, and the only
such memory a candidate owns is its module's global variables (a write anywhere else lands in the
guard bands or the resident draws' checksums). So the evaluation reads every global variable of the
loaded module before the first launch and again after the last: one that changed is state carried
across launches, and the candidate fails naming it. A variable a kernel uses within a launch and
restores (a grid-wide counter reset by the last block) reads the same both times and passes.

The variables are found in the cubin's ELF symbol table (objects in the `.nv.global*` sections,
where `__device__` variables live; `__constant__` ones are in `.nv.constant*` and cannot be written
by a kernel), so this needs no PTX and no GPU to list them.
"""

from __future__ import annotations

import struct

import numpy as np

from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.toolchain import driver as cu
from astra_kernels.tools.toolchain.cubin import sections, string_at
from astra_kernels.tools.toolchain.driver import check
from .correctness import Check

_SHT_SYMTAB = 2
_STT_OBJECT = 1


def writable_globals(cubin: bytes) -> list[tuple[str, int]]:
    """(name, size in bytes) of every `__device__` variable of a cubin (a 64-bit little-endian
    ELF, as NVRTC and nvcc write them), in symbol-table order; [] for anything that is not one."""
    found = []
    all_sections = sections(cubin)
    for section in all_sections:
        if section.kind != _SHT_SYMTAB or not section.entsize:
            continue
        for at in range(section.offset, section.offset + section.size, section.entsize):
            st_name, st_info, _other, shndx, _value, st_size = struct.unpack_from("<IBBHQQ", cubin, at)
            if st_info & 0xF != _STT_OBJECT or not 0 < shndx < len(all_sections) or not st_size:
                continue
            if all_sections[shndx].name.startswith(".nv.global"):
                found.append((string_at(cubin, all_sections[section.link], st_name), int(st_size)))
    return found


def snapshot(module, variables: list[tuple[str, int]]) -> dict[str, bytes]:
    """The bytes each variable holds now in the loaded `module` (a cuModuleGetGlobal per name)."""
    driver = cu.api()
    held = {}
    for name, _ in variables:
        try:
            ptr, size = check(driver.cuModuleGetGlobal(module, name.encode()), f"global {name}")
        except AstraError:  # a name the driver does not resolve (a local symbol): nothing to read
            continue
        data = np.empty(int(size), dtype=np.uint8)
        if size:
            check(driver.cuMemcpyDtoH(data.ctypes.data, ptr, int(size)), f"read global {name}")
        held[name] = data.tobytes()
    return held


def state_verdict(before: dict[str, bytes], after: dict[str, bytes]) -> Check:
    """Failing when a `__device__` variable holds other bytes after the launches than before them."""
    changed = [name for name in before if after.get(name) != before[name]]
    if changed:
        named = ", ".join(repr(n) for n in changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return Check(name="device state", passed=False,
                     detail=f"the kernel kept state across launches: __device__ variable(s) {named} changed "
                     "between before its first launch and after its last; a counter, a cached result or a memo "
                     "carried from launch to launch lets it skip work the timed launches should do")
    return Check(name="device state", passed=True,
                 detail=f"{len(before)} __device__ variable(s) unchanged across every launch" if before else
                 "no __device__ variables")
