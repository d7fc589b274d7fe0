"""Guard bands around every buffer of a correctness launch, so a write out of bounds is seen.

A kernel that writes past its output (an off-by-one tail, a grid one block too large, a negative
index) usually lands where no check reads: the rounding slack of its allocation, a neighbour in
an arena, another input set. Nothing faults, and the outputs compare fine. So the correctness
launches place each buffer between two bands of a known pattern, in the evaluation's own layout
(one arena, or an allocation per buffer), and read the bands back after the launch: any changed
byte fails the evaluation, naming the buffer, the side and the offset.

Timing runs on the unguarded layout, so bands never change a measured time. A write that jumps
past a band is not seen here; compute-sanitizer's memcheck (tools/measuring/sanitizer.py) sees those, on a
layout without bands, since a write into a band is inside an allocation and legal to memcheck.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .correctness import Check
from astra_kernels.tools.toolchain.device import DeviceBuffer
from .problem import Param

# More than a block of 1024 threads each writing a 16-byte vector past the end: the usual
# overshoot of a tail that was not masked.
GUARD_BYTES = 64 << 10
# Where an allocator would start each buffer (DeviceArena.ALIGN), so vector loads stay aligned.
ALIGN = 512
_PATTERN_SEED = 0x6A7D5EED
_ROLES = {"in": "input", "out": "output", "inout": "in-out buffer"}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Slot:
    """One buffer and its bands, as offsets from the start of the memory that holds them."""

    name: str
    offset: int  # first byte of the buffer
    nbytes: int
    before: int  # band length in front of the buffer
    after: int  # band length behind it: the guard plus the padding that aligns the next slot

    @property
    def start(self) -> int:
        return self.offset - self.before

    @property
    def end(self) -> int:
        return self.offset + self.nbytes + self.after


def plan(buffers: list[tuple[str, int]], guard_bytes: int = GUARD_BYTES) -> list[Slot]:
    """Slots packed one after another: band, buffer, band, each buffer aligned to ALIGN.

    The band behind a buffer starts at its last byte + 1, not at the next aligned address, so a
    write one element past the end is caught even when the size is not a multiple of ALIGN.
    """
    if guard_bytes < 0 or guard_bytes % ALIGN:
        raise ValueError(f"guard_bytes={guard_bytes} must be a non-negative multiple of {ALIGN}, "
                         "or buffers behind the first band lose their alignment")
    slots, cursor = [], 0
    for name, size in buffers:
        size = max(int(size), 1)
        offset = cursor + guard_bytes
        end = _round_up(offset + size + guard_bytes, ALIGN)
        slots.append(Slot(name=name, offset=offset, nbytes=size, before=guard_bytes,
                          after=end - offset - size))
        cursor = end
    return slots


@functools.lru_cache(maxsize=64)
def pattern(nbytes: int) -> np.ndarray:
    """The bands' contents: seeded noise rather than one repeated byte, so that no value a
    kernel writes (zero, NaN, the output poison) leaves a band looking untouched."""
    values = np.random.default_rng(_PATTERN_SEED).integers(0, 256, nbytes, dtype=np.uint8)
    values.flags.writeable = False
    return values


def describe(label: str, slot: Slot, before: np.ndarray, after: np.ndarray) -> list[str]:
    """What changed in one buffer's bands, as sentences naming the buffer, side and offset.

    Offsets count from the buffer: -k is k bytes in front of its first byte, +k is k bytes
    past its last one (+0 is the byte right after it). The span from the change nearest the
    buffer to the farthest says how far an overshooting index went.
    """
    found = []
    changed = np.flatnonzero(before != pattern(slot.before)) if slot.before else np.empty(0, int)
    if changed.size:
        nearest, farthest = slot.before - int(changed[-1]), slot.before - int(changed[0])
        found.append(f"{label}: {changed.size} of the {slot.before} bytes before its start changed, "
                     f"{_span(-farthest, -nearest)}")
    changed = np.flatnonzero(after != pattern(slot.after)) if slot.after else np.empty(0, int)
    if changed.size:
        first, last = int(changed[0]), int(changed[-1])
        found.append(f"{label}: {changed.size} of the {slot.after} bytes after its end changed, "
                     f"{_span(first, last, plus=True)} past it (offset {slot.nbytes + first} of a "
                     f"{slot.nbytes}-byte buffer)")
    return found


def _span(low: int, high: int, plus: bool = False) -> str:
    sign = "+" if plus else ""
    return f"at byte {sign}{low}" if low == high else f"from byte {sign}{low} to {sign}{high}"


class GuardedBuffers:
    """Device buffers for one launch, in `layout`, each between two bands of the pattern.

    With `guard_bytes=0` there are no bands, and the separate layout gives each buffer an
    allocation of exactly its size, which is what memcheck needs to see a one-past-the-end write.
    """

    def __init__(self, params: list[Param], layout: str = "arena", guard_bytes: int = GUARD_BYTES):
        if layout not in ("arena", "separate"):
            raise ValueError(f"layout {layout!r} is neither 'arena' nor 'separate'")
        self.params = params
        self.guard_bytes = guard_bytes
        self._memory: list[DeviceBuffer] = []
        self._bases: list[int] = []
        if layout == "arena":
            self.slots = plan([(p.name, p.nbytes) for p in params], guard_bytes)
            arena = DeviceBuffer(self.slots[-1].end if self.slots else 1)
            self._memory.append(arena)
            self._bases = [arena.ptr] * len(self.slots)
        else:
            self.slots = [plan([(p.name, p.nbytes)], guard_bytes)[0] for p in params]
            for slot in self.slots:
                memory = DeviceBuffer(slot.end if guard_bytes else slot.nbytes)
                self._memory.append(memory)
                self._bases.append(memory.ptr)
        self.buffers = [DeviceBuffer.view(base + s.offset, s.nbytes) for base, s in zip(self._bases, self.slots)]
        for base, slot in zip(self._bases, self.slots):
            if slot.before:
                DeviceBuffer.view(base + slot.start, slot.before).upload(pattern(slot.before))
            if slot.after and guard_bytes:
                DeviceBuffer.view(base + slot.offset + slot.nbytes, slot.after).upload(pattern(slot.after))

    def check(self) -> Check | None:
        """Read every band back; None when there are none to read."""
        if not self.guard_bytes:
            return None
        found = []
        for param, base, slot in zip(self.params, self._bases, self.slots):
            before = DeviceBuffer.view(base + slot.start, slot.before).download(np.uint8, (slot.before,))
            after = DeviceBuffer.view(base + slot.offset + slot.nbytes, slot.after).download(np.uint8, (slot.after,))
            found += describe(f"{_ROLES.get(param.role, param.role)} {param.name!r}", slot, before, after)
        if found:
            return Check(name="guard bands", passed=False,
                         detail="out-of-bounds write: " + "; ".join(found))
        return Check(name="guard bands", passed=True,
                     detail=f"{2 * len(self.slots)} bands of at least {self.guard_bytes} bytes intact")

    def close(self) -> None:
        for memory in self._memory:
            memory.close()
        self._memory = []
