"""The section headers of a cubin (a 64-bit little-endian ELF, as NVRTC and nvcc write it): what
the device checks read a kernel's `__device__` variables from (measuring/device_state.py) and what
bench/code_size.py sums a kernel's machine code over."""

from __future__ import annotations

import struct
from typing import NamedTuple


class Section(NamedTuple):
    name: str
    kind: int  # sh_type: 2 is a symbol table
    offset: int
    size: int
    link: int  # for a symbol table, the index of its string table
    entsize: int


def is_cubin(data: bytes) -> bool:
    return data[:4] == b"\x7fELF" and len(data) >= 64 and data[4] == 2 and data[5] == 1


def string_at(data: bytes, table: Section, at: int) -> str:
    """The NUL-terminated name at offset `at` of string table `table`."""
    start = table.offset + at
    return data[start:data.index(b"\0", start)].decode(errors="replace")


def sections(data: bytes) -> list[Section]:
    """Every section header, named; [] for anything that is not a 64-bit little-endian ELF."""
    if not is_cubin(data):
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]

    def name(at: int) -> str:
        start = names_offset + at
        return data[start:data.index(b"\0", start)].decode(errors="replace")
    return [Section(name(h[0]), h[1], h[4], h[5], h[6], h[9]) for h in headers]


def machine_code_bytes(data: bytes) -> int:
    """The summed size of the .text sections: the machine code, nothing else (line tables, symbols
    and constants left out, so two builds of one code compare equal)."""
    return sum(s.size for s in sections(data) if s.name.startswith(".text"))
