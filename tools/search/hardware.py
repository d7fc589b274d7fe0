"""Hardware limits and occupancy, computed from the ptxas report without a GPU.

The tuner prunes configurations before launching anything: a kernel that asks for more
registers, shared memory or threads than a multiprocessor has cannot run, one that spills pays
local-memory traffic, and one with zero resident blocks never starts. The numbers per
architecture are NVIDIA's published per-SM limits; on a GPU, the device's own multiprocessor
count and opt-in shared-memory limit replace the table's.
"""

from __future__ import annotations

from pydantic import BaseModel

from astra_kernels.tools.errors import UnknownArchError
from astra_kernels.tools.toolchain.resources import ResourceUsage
from astra_kernels.tools.toolchain.targets import DEFAULT_SMS


class Limits(BaseModel):
    arch: str
    multiprocessors: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_per_sm: int
    shared_per_block_optin: int
    shared_reserved_per_block: int = 1024  # the runtime keeps 1 KB of each block's shared memory
    shared_unit: int = 128


_TABLE = {
    "sm_90": dict(multiprocessors=DEFAULT_SMS, shared_per_sm=233472, shared_per_block_optin=232448),
    "sm_89": dict(multiprocessors=128, shared_per_sm=102400, shared_per_block_optin=101376,
                  max_threads_per_sm=1536, max_blocks_per_sm=24),
    "sm_86": dict(multiprocessors=84, shared_per_sm=102400, shared_per_block_optin=101376,
                  max_threads_per_sm=1536, max_blocks_per_sm=16),
    "sm_80": dict(multiprocessors=108, shared_per_sm=167936, shared_per_block_optin=166912),
}


def limits_for(arch: str, multiprocessors: int | None = None, shared_per_block_optin: int | None = None) -> Limits:
    """The limits of `arch` (sm_90a counts as sm_90), with the device's own figures where known."""
    base = arch.rstrip("af")
    if base not in _TABLE:
        raise UnknownArchError(f"no hardware limits recorded for {arch}; known: {', '.join(_TABLE)}")
    fields = dict(_TABLE[base])
    if multiprocessors:
        fields["multiprocessors"] = multiprocessors
    if shared_per_block_optin:
        fields["shared_per_block_optin"] = shared_per_block_optin
    return Limits(arch=arch, **fields)


class Occupancy(BaseModel):
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # resident warps over the SM's maximum
    limiter: str  # what caps the blocks: "registers", "shared memory", "warps" or "blocks"


def _ceil(a: int, unit: int) -> int:
    return -(-a // unit) * unit


def occupancy(resources: ResourceUsage, threads: int, dynamic_shared: int, limits: Limits) -> Occupancy:
    """Resident blocks per multiprocessor, by the same rules as CUDA's occupancy calculator."""
    warps = -(-threads // 32)
    max_warps = limits.max_threads_per_sm // 32
    registers = max(resources.registers, 1)
    per_warp = _ceil(registers * 32, limits.register_unit)
    shared = _ceil(resources.shared_bytes + dynamic_shared, limits.shared_unit) + limits.shared_reserved_per_block
    caps = {
        "registers": (limits.registers_per_sm // per_warp) // warps if registers <= limits.max_registers_per_thread else 0,
        "shared memory": limits.shared_per_sm // shared,
        "warps": max_warps // warps,
        "blocks": limits.max_blocks_per_sm,
    }
    limiter = min(caps, key=caps.get)
    blocks = max(0, caps[limiter])
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                     fraction=blocks * warps / max_warps, limiter=limiter)


def prune_reason(resources: ResourceUsage, threads: int, dynamic_shared: int, limits: Limits,
                 max_spill_bytes: int = 0) -> str | None:
    """Why this binary cannot run well at this launch size, or None when it can."""
    if threads > limits.max_threads_per_block:
        return f"{threads} threads per block exceed the {limits.max_threads_per_block} allowed"
    if resources.registers > limits.max_registers_per_thread:
        return f"{resources.registers} registers per thread exceed {limits.max_registers_per_thread}"
    shared = resources.shared_bytes + dynamic_shared
    if shared > limits.shared_per_block_optin:
        return f"{shared} bytes of shared memory exceed the {limits.shared_per_block_optin} a block may have"
    spilled = resources.spill_store_bytes + resources.spill_load_bytes
    if spilled > max_spill_bytes:
        return f"spills {spilled} bytes to local memory (limit {max_spill_bytes})"
    occ = occupancy(resources, threads, dynamic_shared, limits)
    if occ.blocks_per_sm == 0:
        return f"zero resident blocks per multiprocessor ({occ.limiter})"
    return None
