"""The bandwidth ceilings: the best device-to-device copy this GPU does, and the best streaming
of a kernel's own read/write mix, measured here.

The copy ceiling: on an H200 the driver's memcpy and a plain 16-byte-vector copy kernel each win
at some sizes (bench/copy_ceiling.py), and one measurement of either can come in 5% low, so it is
the best of a few interleaved rounds of both at 1 GiB, each round the median of several timed
copies.

The mix ceiling is the physical floor of a memory-bound kernel: HBM does not stream a read-heavy
mix at the rate of a 1:1 copy (torch.compile's silu_and_mul, which reads twice what it writes,
ran under the copy floor on an H200), so a kernel is judged against a probe that reads and writes
in its own ratio: READS 16-byte vectors from as many streams and WRITES to as many, per unit of
work, over 1 GiB, the best of a grid-stride launch and one unit per thread. Both are measured
once per device (and ratio) per process and cached.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from .nvrtc import CompileOptions
from .compiler import compile_source
from . import driver as cu
from .device import Device, DeviceBuffer
from .driver import check
from .timing import Events, time_graph

COPY_SOURCE = r"""
extern "C" __global__ void copy_vec4(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                     unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}
"""

CEILING_BYTES = 1 << 30


def memcpy_bandwidth(device: Device, nbytes: int = CEILING_BYTES, repeats: int = 10) -> float:
    """Bytes/s (read + written) of cuMemcpyDtoDAsync, median of `repeats` after one warm-up."""
    driver = cu.api()
    src, dst = DeviceBuffer(nbytes), DeviceBuffer(nbytes)
    events = Events()
    try:
        src.fill_bytes(0x3C)
        samples = []
        for _ in range(repeats + 1):
            events.record_start(device.stream)
            check(driver.cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, device.stream), "memcpy")
            events.record_stop(device.stream)
            samples.append(events.elapsed_ms() / 1e3)
    finally:
        events.close()
        src.close()
        dst.close()
    return 2 * nbytes / statistics.median(samples[1:])


def kernel_copy_bandwidth(device: Device, nbytes: int = CEILING_BYTES, blocks_per_sm: int = 8,
                          threads: int = 512) -> float:
    """Bytes/s of the vector copy kernel, graph-replayed over two buffer pairs."""
    module = compile_source(COPY_SOURCE, CompileOptions(arch=device.properties.arch))
    kernel = device.load(module, "copy_vec4")
    pairs = [(DeviceBuffer(nbytes), DeviceBuffer(nbytes)) for _ in range(2)]
    try:
        for src, _ in pairs:
            src.fill_bytes(0x3C)
        blocks = min(device.properties.multiprocessors * blocks_per_sm, max(1, nbytes // 16 // threads))
        words = np.uint64(nbytes // 16)

        def enqueue(i: int) -> None:
            src, dst = pairs[i % 2]
            device.launch(kernel, (blocks,), (threads,), [src, dst, words])

        timing = time_graph(device, enqueue, launches=10, input_sets=2, replays=5)
    finally:
        for src, dst in pairs:
            src.close()
            dst.close()
    return 2 * nbytes / (timing.median_us / 1e6)


_CEILING: dict[int, float] = {}


def copy_bandwidth(device: Device, rounds: int = 3) -> float:
    """The ceiling in bytes/s for `device`, measured on first use in this process."""
    if device.index not in _CEILING:
        _CEILING[device.index] = max(
            max(memcpy_bandwidth(device), kernel_copy_bandwidth(device)) for _ in range(rounds)
        )
    return _CEILING[device.index]


MIX_SOURCE = r"""
// READS vectors from as many streams, their XOR to WRITES streams: a kernel's read/write mix, streamed.
extern "C" __global__ void mix_vec4(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                    unsigned long long units) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long u = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride) {
        uint4 acc = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int j = 0; j < READS; ++j) {
            const uint4 v = src[j * units + u];
            acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
        }
#pragma unroll
        for (int j = 0; j < WRITES; ++j) dst[j * units + u] = make_uint4(acc.x + j, acc.y, acc.z, acc.w);
    }
}
"""
MIX_THREADS = 512
MIX_LIMIT = 4  # the ratio is approximated by READS:WRITES with both at most this


def mix_ratio(read_bytes: int, write_bytes: int) -> tuple[int, int]:
    """(READS, WRITES): the pair of integers up to MIX_LIMIT whose ratio is nearest the kernel's
    (in log terms; the smaller pair on a tie)."""
    if write_bytes <= 0:
        return MIX_LIMIT, 1
    if read_bytes <= 0:
        return 1, MIX_LIMIT
    target = math.log(read_bytes / write_bytes)
    pairs = [(r, w) for r in range(1, MIX_LIMIT + 1) for w in range(1, MIX_LIMIT + 1) if math.gcd(r, w) == 1]
    return min(pairs, key=lambda p: (abs(math.log(p[0] / p[1]) - target), p[0] + p[1]))


def mix_options(arch: str, reads: int, writes: int) -> CompileOptions:
    return CompileOptions(arch=arch, defines={"READS": reads, "WRITES": writes})


def mix_grids(units: int, multiprocessors: int) -> list[int]:
    """The launches tried for a mix: a grid-stride loop over 8 CTAs per SM, and one unit per thread."""
    full = max(1, -(-units // MIX_THREADS))
    return sorted({min(multiprocessors * 8, full), full})


def _mix_bandwidth_once(device: Device, reads: int, writes: int, nbytes: int) -> float:
    module = compile_source(MIX_SOURCE, mix_options(device.properties.arch, reads, writes))
    kernel = device.load(module, "mix_vec4")
    units = max(1, nbytes // (16 * (reads + writes)))
    sets = [(DeviceBuffer(16 * units * reads), DeviceBuffer(16 * units * writes)) for _ in range(2)]
    best = 0.0
    try:
        for src, _ in sets:
            src.fill_bytes(0x3C)
        for blocks in mix_grids(units, device.properties.multiprocessors):
            def enqueue(i: int, blocks=blocks) -> None:
                src, dst = sets[i % 2]
                device.launch(kernel, (blocks,), (MIX_THREADS,), [src, dst, np.uint64(units)])

            timing = time_graph(device, enqueue, launches=10, input_sets=2, replays=5)
            best = max(best, 16 * units * (reads + writes) / (timing.median_us / 1e6))
    finally:
        for src, dst in sets:
            src.close()
            dst.close()
    return best


_MIX: dict[tuple[int, int, int], float] = {}


def mix_bandwidth(device: Device, reads: int, writes: int, rounds: int = 3) -> float:
    """Bytes/s (read + written) of the best streaming of READS:WRITES on `device`, measured on first
    use in this process; 1:1 is the copy ceiling itself."""
    if (reads, writes) == (1, 1):
        return copy_bandwidth(device)
    key = (device.index, reads, writes)
    if key not in _MIX:
        _MIX[key] = max(_mix_bandwidth_once(device, reads, writes, CEILING_BYTES) for _ in range(rounds))
    return _MIX[key]
