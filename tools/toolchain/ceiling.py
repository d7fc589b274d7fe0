"""The copy-bandwidth ceiling: the best device-to-device copy this GPU does, measured here.

Every memory-bound kernel is judged by bytes moved / this bandwidth. On an H200 the driver's
memcpy and a plain 16-byte-vector copy kernel each win at some sizes (bench/copy_ceiling.py), and
one measurement of either can come in 5% low, so the ceiling is the best of a few interleaved
rounds of both at 1 GiB, each round the median of several timed copies. It is measured once per
device per process and cached.
"""

from __future__ import annotations

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
