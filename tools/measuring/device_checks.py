"""The correctness checks' comparisons on the GPU, and each draw kept resident there.

Done on the host, the checks of a large shape were most of its evaluation: every output and
read-only input downloaded, the outputs turned to float64 and compared in NumPy, the draw uploaded
again for every candidate. rmsnorm 16384x8192 spent 1.9 s of its 2.5 s evaluations on the H200
(recording h200-2026-11-26b), silu_and_mul 16384x28672 about 9 s, and two workers sharing a host
made the checks 1.27x slower still (docs/scaling.md, run F). Here a draw's inputs and float64
reference are uploaded once per worker and kept while they fit RESIDENT_FRACTION of the GPU's
memory; each comparison is one pass over device memory, and a few hundred bytes come back.

The verdicts, and every word of them, are correctness.py's (`verdict`, `unchanged_verdict`,
`fresh_outputs`, `timed_verdict`): a comparison here fills the same Findings that NumPy's does,
with the tolerance test computed in the host's order and rounding (device_checks.cu), so an element
passes here exactly where it passes there; only the sums of squares add in another order. Outputs
of other dtypes (integers, fp8) are downloaded and compared on the host, as before.

A resident copy is a target a wild kernel could write into, so each is checksummed when uploaded
and again around every use: changed after a candidate ran, the candidate fails ("resident
draws"); changed before (by a launch none of its checks covered), it is uploaded again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from astra_kernels.tools.errors import LaunchError
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.device import Device, DeviceBuffer
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from .correctness import Check, Findings, compare, raw_bytes, verdict
from .problem import Case, Param, Problem, Tolerance

SOURCE = Path(__file__).with_name("device_checks.cu")
# The output dtypes compared on the GPU, and their kernels; any other is compared on the host.
COMPARED = {"bf16": "compare_bf16", "fp16": "compare_fp16", "fp32": "compare_fp32", "fp64": "compare_fp64"}
THREADS = 256  # THREADS in the source
BLOCKS_PER_SM = 4
FOUND_WORDS = 11  # struct Found: 7 counts and indices, then 4 doubles, 8 bytes each
NONE = np.uint64(0xFFFFFFFFFFFFFFFF)  # "none found" in Found's first-index fields
# Resident draws may hold this fraction of the GPU's memory (the last two whatever their size).
# The four serving kernels' astra and serving shapes need about 22 GB (silu_and_mul 16384x28672's
# two draws 5.6 GB, fused_add_rmsnorm 16384x8192's 5.4 GB, ...): with an eighth of an 80 GB H100,
# a worker interleaving those shapes uploaded them again for nearly every candidate (1.3 s of
# silu_and_mul 16384x28672's checks, 2026-11-26). A kernel's own buffers need far less: two input
# sets at the largest shapes; and an allocation that fails drops the other draws and tries again.
RESIDENT_FRACTION = 1 / 2
_ALIGN = 16  # resident copies are padded with zeros to whole 16-byte words (the checksum's unit is 8)


@dataclass
class ResidentCase:
    """One draw on the GPU: every in and inout buffer's inputs, and the float64 reference of
    every output the GPU compares, each with the checksum it was uploaded with."""

    inputs: dict[str, DeviceBuffer] = field(default_factory=dict)
    expected: dict[str, DeviceBuffer] = field(default_factory=dict)
    sums: dict[int, int] = field(default_factory=dict)  # by buffer pointer

    @property
    def buffers(self) -> list[DeviceBuffer]:
        return [*self.inputs.values(), *self.expected.values()]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)

    def close(self) -> None:
        for buffer in self.buffers:
            buffer.close()


class DeviceChecks:
    """The comparison kernels loaded into one device's context, and the draws resident there."""

    def __init__(self, device: Device):
        module = compile_source(SOURCE.read_text(), CompileOptions(arch=device.properties.arch), name=SOURCE.name)
        self.device = device
        self.kernels = device.load_all(module)
        self.blocks = device.properties.multiprocessors * BLOCKS_PER_SM
        self.resident_bytes = int(device.properties.memory_bytes * RESIDENT_FRACTION)
        self._partials = DeviceBuffer(self.blocks * FOUND_WORDS * 8)
        self._word = DeviceBuffer(8)
        self._sink = DeviceBuffer(8)  # evict_l2_async's sum, never read
        # evict_l2_async's buffer, allocated here: nothing may be allocated while a graph is captured
        self._scratch = DeviceBuffer(2 * device.properties.l2_bytes)
        self._scratch.fill_bytes(0)
        self._resident: OrderedDict[tuple, ResidentCase] = OrderedDict()

    def _launch(self, name: str, work: int, args: list) -> None:
        blocks = max(1, min(self.blocks, -(-work // THREADS)))
        self.device.launch(self.kernels[name], (blocks,), (THREADS,), args)
        self.device.synchronize()

    # -- comparisons -------------------------------------------------------------------------

    def findings(self, got: DeviceBuffer, ref: DeviceBuffer, count: int, dtype: str, tol: Tolerance) -> Findings:
        """What correctness.compare finds comparing `count` elements of `got` (of `dtype`) with the
        float64 `ref`."""
        blocks = max(1, min(self.blocks, -(-count // THREADS)))
        self._launch(COMPARED[dtype], count, [got, ref, np.uint64(count), np.float64(-tol.rtol),
                                              np.float64(tol.atol), self._partials])
        return merged(self._partials.download(np.uint64, (blocks, FOUND_WORDS)))

    def compare(self, name: str, got: DeviceBuffer, ref: DeviceBuffer, shape: tuple[int, ...], dtype: str,
                tol: Tolerance) -> Check:
        """correctness.compare of an output on the GPU against its reference there."""
        itemsize = numpy_dtype(dtype).itemsize

        def values_at(at: int) -> tuple[float, float]:
            value = DeviceBuffer.view(got.ptr + at * itemsize, itemsize).download(numpy_dtype(dtype), (1,))
            reference = DeviceBuffer.view(ref.ptr + at * 8, 8).download(np.float64, (1,))
            return float(value[0]), float(reference[0])

        return verdict(name, self.findings(got, ref, math.prod(shape), dtype, tol), tuple(shape), tol, values_at)

    def compare_output(self, param: Param, got: DeviceBuffer, resident: ResidentCase, draw: Callable[[], Case],
                       tol: Tolerance) -> Check:
        """An output against its reference: on the GPU where its dtype is compared there, else
        downloaded and compared on the host with the draw's reference (`draw()`)."""
        if param.name in resident.expected:
            return self.compare(param.name, got, resident.expected[param.name], param.shape, param.dtype, tol)
        host = got.download(numpy_dtype(param.dtype), param.shape)
        return compare(param.name, host, draw().expected[param.name], tol)

    def differ(self, a: DeviceBuffer, b: DeviceBuffer, nbytes: int) -> bool:
        """Whether the first `nbytes` of two device buffers differ in any byte."""
        words = nbytes // 16 if a.ptr % 16 == 0 and b.ptr % 16 == 0 else 0
        self._word.fill_bytes(0)
        self._launch("bytes_differ", max(words, nbytes - 16 * words),
                     [a, b, np.uint64(nbytes), np.uint64(words), self._word])
        return bool(self._word.download(np.uint32, (1,))[0])

    def references_differ(self, first: ResidentCase, second: ResidentCase, name: str,
                          first_draw: Callable[[], Case], second_draw: Callable[[], Case]) -> bool:
        """Whether two draws' references of output `name` differ (on the GPU where both are there)."""
        if name in first.expected and name in second.expected:
            a, b = first.expected[name], second.expected[name]
            return a.nbytes != b.nbytes or self.differ(a, b, a.nbytes)
        a, b = first_draw().expected[name], second_draw().expected[name]
        return a.shape != b.shape or not np.array_equal(raw_bytes(a), raw_bytes(b))

    def evict_l2_async(self) -> None:
        """Queue, without waiting (so it can be captured into a graph), a read of a scratch buffer
        twice the size of L2: the lines written before it (the fill of the outputs before each cold
        replay) go back to memory, and the replay starts with L2 holding only clean lines, as it did
        when the outputs were last written a whole rotation earlier. Without it a cold replay began
        with every output dirty in L2 (an H200: few-token silu_and_mul 6-8% slower, the baseline not)."""
        words = self._scratch.nbytes // 8
        blocks = max(1, min(self.blocks, -(-words // THREADS)))
        self.device.launch(self.kernels["checksum"], (blocks,), (THREADS,),
                           [self._scratch, np.uint64(words), self._sink])

    # -- many small ranges in one launch (a timing's rotating sets) ----------------------------

    def _ranges_grid(self, table: "RangeTable") -> tuple[int, int]:
        return max(1, min(self.blocks, -(-table.longest // (THREADS * 16)))), max(1, min(table.count, 65535))

    def copy_ranges(self, table: "RangeTable") -> None:
        """Each (destination, source, bytes) row copied; returns when done."""
        if table.count:
            self.device.launch(self.kernels["copy_ranges"], self._ranges_grid(table), (THREADS,),
                               [table.buffer, np.uint64(table.count)])
            self.device.synchronize()

    def fill_ranges_async(self, table: "RangeTable", byte: int) -> None:
        """Each (start, bytes) row set to `byte`, queued without waiting (capturable into a graph)."""
        if table.count:
            self.device.launch(self.kernels["fill_ranges"], self._ranges_grid(table), (THREADS,),
                               [table.buffer, np.uint64(table.count), np.uint32(byte)])

    def ranges_differ(self, table: "RangeTable") -> list[bool]:
        """Whether the two ranges of each (a, b, bytes) row differ in any byte."""
        if not table.count:
            return []
        flags = DeviceBuffer(4 * table.count)
        try:
            flags.fill_bytes(0)
            self.device.launch(self.kernels["ranges_differ"], self._ranges_grid(table), (THREADS,),
                               [table.buffer, np.uint64(table.count), flags])
            self.device.synchronize()
            return [bool(f) for f in flags.download(np.uint32, (table.count,))]
        finally:
            flags.close()

    def checksum(self, buffer: DeviceBuffer) -> int:
        """ResidentCase's checksum of a padded buffer (device_checks.cu, `checksum`)."""
        self._word.fill_bytes(0)
        self._launch("checksum", buffer.nbytes // 8, [buffer, np.uint64(buffer.nbytes // 8), self._word])
        return int(self._word.download(np.uint64, (1,))[0])

    # -- resident draws ----------------------------------------------------------------------

    def resident(self, key: tuple, problem: Problem, draw: Callable[[], Case]) -> ResidentCase:
        """The draw `key` names on the GPU: kept from an earlier evaluation if it is there and
        intact, else `draw()` uploaded (the host's copy is asked for only then: once a draw is
        here, the host need not keep it); the least recently used go while more than
        `resident_bytes` is held, never the last two (an evaluation's two draws are in use
        together)."""
        kept = self._resident.get(key)
        if kept is not None and self.intact(kept):
            self._resident.move_to_end(key)
            return kept
        if kept is not None:
            self._resident.pop(key).close()
        try:
            resident = self._upload_case(problem, draw())
        except LaunchError as exc:  # the GPU's memory is full: make room, once (the last draw may be in use)
            if "OUT_OF_MEMORY" not in str(exc):
                raise
            while len(self._resident) > 1:
                self._resident.popitem(last=False)[1].close()
            resident = self._upload_case(problem, draw())
        self._resident[key] = resident
        held = sum(r.nbytes for r in self._resident.values())
        while len(self._resident) > 2 and held > self.resident_bytes:
            _, dropped = self._resident.popitem(last=False)
            held -= dropped.nbytes
            dropped.close()
        return resident

    def _upload_case(self, problem: Problem, case: Case) -> ResidentCase:
        resident = ResidentCase()
        try:
            for p in problem.buffers:
                if p.role in ("in", "inout"):
                    resident.inputs[p.name] = self._upload(case.inputs[p.name], resident)
                if p.role in ("out", "inout") and p.dtype in COMPARED:
                    resident.expected[p.name] = self._upload(
                        np.asarray(case.expected[p.name], dtype=np.float64), resident)
        except BaseException:
            resident.close()
            raise
        return resident

    def _upload(self, array: np.ndarray, resident: ResidentCase) -> DeviceBuffer:
        data = np.ascontiguousarray(array)
        buffer = DeviceBuffer(-(-max(data.nbytes, 1) // _ALIGN) * _ALIGN)
        try:
            if buffer.nbytes != data.nbytes:
                buffer.fill_bytes(0)
            buffer.upload(data)
            resident.sums[buffer.ptr] = self.checksum(buffer)
        except BaseException:
            buffer.close()
            raise
        return buffer

    def intact(self, resident: ResidentCase) -> bool:
        """Whether every buffer of a resident draw still holds what was uploaded."""
        return all(self.checksum(b) == resident.sums[b.ptr] for b in resident.buffers)

    def forget(self, resident: ResidentCase) -> None:
        """Drop a resident draw (found changed: it is uploaded again when next needed)."""
        for key, kept in list(self._resident.items()):
            if kept is resident:
                del self._resident[key]
        resident.close()


def merged(partials: np.ndarray) -> Findings:
    """The blocks' Found records (rows of FOUND_WORDS uint64) as one Findings, merged as the
    blocks merged their threads': counts and sums added, the lowest first index, the largest
    excess at its lowest index."""
    doubles = partials.view(np.float64)

    def first(column: int) -> int:
        found = partials[:, column][partials[:, column] != NONE]
        return int(found.min()) if found.size else -1

    excess = doubles[:, 10]
    top = excess.max() if excess.size else -np.inf
    worst = int(partials[:, 6][excess == top].min()) if top > -np.inf else -1
    return Findings(
        bad_nan=int(partials[:, 0].sum()), first_bad_nan=first(1),
        inf_mismatch=int(partials[:, 2].sum()), first_inf_mismatch=first(3), first_nonfinite=first(4),
        failing=int(partials[:, 5].sum()), worst=worst, max_abs=float(doubles[:, 7].max()),
        diff_sq=float(doubles[:, 8].sum()), ref_sq=float(doubles[:, 9].sum()), worst_excess=float(top),
    )


_CHECKS: dict[int, DeviceChecks] = {}


class RangeTable:
    """Rows of device addresses and byte counts (u64 words) on the GPU, for the *_ranges kernels;
    built before a graph is captured, since nothing may be allocated while one is."""

    def __init__(self, rows: list[tuple[int, ...]]):
        self.count = len(rows)
        self.longest = max((row[-1] for row in rows), default=0)  # every row ends with its byte count
        words = np.array(rows, dtype=np.uint64).reshape(-1) if rows else np.zeros(1, np.uint64)
        self.buffer = DeviceBuffer(words.nbytes)
        try:
            self.buffer.upload(words)
        except BaseException:
            self.buffer.close()
            raise

    def close(self) -> None:
        self.buffer.close()

    def __enter__(self) -> "RangeTable":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def on(device: Device) -> DeviceChecks:
    """The checks of `device` in this process, compiled and loaded on first use."""
    if device.index not in _CHECKS:
        _CHECKS[device.index] = DeviceChecks(device)
    return _CHECKS[device.index]


def intact_check(residents: list[ResidentCase], checks: DeviceChecks) -> Check | None:
    """A failing check if a candidate changed a resident draw (which is then dropped); else None."""
    changed = [r for r in residents if not checks.intact(r)]
    for resident in changed:
        checks.forget(resident)
    if not changed:
        return None
    return Check(name="resident draws", passed=False,
                 detail="the kernel wrote outside its buffers, past the guard bands: the checks' copies of "
                 "the draw's inputs and reference in device memory changed while it ran")
