"""What the compiler says about a kernel: the ptxas resource report and the PTX signature.

Both are read from text NVRTC already produces, so they are known without a GPU: the tuner prunes
on registers, spills and shared memory before anything launches, and a launch is checked against
the parameter list before the driver sees it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel


class ResourceUsage(BaseModel):
    """ptxas's report for one entry function."""

    registers: int = 0
    barriers: int = 0
    shared_bytes: int = 0  # static shared memory; dynamic shared memory is a launch argument
    constant_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


class KernelParam(BaseModel):
    """One parameter of an entry function as PTX declares it."""

    ptx_type: str  # u64, u32, f32, b8 (structs) ...
    size: int  # bytes
    align: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers(.*)")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_report(log: str) -> dict[str, ResourceUsage]:
    """Map each entry function in a `ptxas -v` log to its resources.

    ptxas prints a "Compiling entry function" line, a "Function properties" block with the
    stack frame and spills, then a "Used N registers" line; the current function is whichever
    of the first two was named last.
    """
    report: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            report.setdefault(current, {})
        elif m := _PROPS.search(line):
            current = m.group(1)
            report.setdefault(current, {})
        elif current is not None and (m := _FRAME.search(line)):
            report[current].update(
                stack_frame_bytes=int(m.group(1)),
                spill_store_bytes=int(m.group(2)),
                spill_load_bytes=int(m.group(3)),
            )
        elif current is not None and (m := _USED.search(line)):
            entry = report[current]
            entry["registers"] = int(m.group(1))
            rest = m.group(2)
            for key, pattern in (
                ("barriers", _BARRIERS),
                ("shared_bytes", _SMEM),
                ("constant_bytes", _CMEM),
            ):
                if found := pattern.search(rest):
                    entry[key] = int(found.group(1))
    return {name: ResourceUsage(**fields) for name, fields in report.items()}


_PTX_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)", re.S)
_PTX_TYPE = re.compile(r"\.([busf](?:8|16|32|64))\b")
_PTX_ALIGN = re.compile(r"\.align\s+(\d+)")
_PTX_COUNT = re.compile(r"\[(\d+)\]")


def parse_ptx_signatures(ptx: str) -> dict[str, list[KernelParam]]:
    """Map each `.entry` in PTX to its parameters, in order.

    A parameter reads like `.param .u64 .ptr .global .align 1 k_param_0` or, for a struct passed
    by value, `.param .align 8 .b8 k_param_1[24]`.
    """
    signatures: dict[str, list[KernelParam]] = {}
    for name, body in _PTX_ENTRY.findall(ptx):
        params = []
        for decl in body.split(","):
            if ".param" not in decl or not (kind := _PTX_TYPE.search(decl)):
                continue
            width = int(kind.group(1)[1:]) // 8
            count = _PTX_COUNT.search(decl)
            align = _PTX_ALIGN.search(decl)
            params.append(
                KernelParam(
                    ptx_type=kind.group(1),
                    size=width * (int(count.group(1)) if count else 1),
                    align=int(align.group(1)) if align and ".ptr" not in decl else width,
                )
            )
        signatures[name] = params
    return signatures
