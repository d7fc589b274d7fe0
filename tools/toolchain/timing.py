"""Timing kernels the way this project reports them: CUDA-graph replay over rotating inputs.

A host loop costs about 5 us a launch through Python, more than many of these kernels take, so
kernels are captured N at a time into a CUDA graph and the graph is replayed; each launch reads
a different input set, so that together they exceed L2 and every launch reads cold memory. The
per-launch median of several replays is the figure; its spread says how far to trust a difference.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from pydantic import BaseModel

from . import driver as cu
from .device import Device
from .driver import check

COLD_BYTES = 256 << 20  # the rotating sets together exceed any current L2 several times


class Timing(BaseModel):
    """Per-launch microseconds of one kernel configuration."""

    median_us: float
    min_us: float
    max_us: float
    spread: float  # (max - min) / median over replays
    samples_us: list[float]
    launches_per_replay: int
    input_sets: int
    method: str  # "graph" or "stream"


class Events:
    """A pair of CUDA events around work on a stream."""

    def __init__(self):
        driver = cu.api()
        flags = driver.CUevent_flags.CU_EVENT_DEFAULT
        self.start = check(driver.cuEventCreate(flags), "event")
        self.stop = check(driver.cuEventCreate(flags), "event")

    def record_start(self, stream) -> None:
        check(cu.api().cuEventRecord(self.start, stream), "record")

    def record_stop(self, stream) -> None:
        check(cu.api().cuEventRecord(self.stop, stream), "record")

    def elapsed_ms(self) -> float:
        driver = cu.api()
        check(driver.cuEventSynchronize(self.stop), "event synchronize")
        return float(check(driver.cuEventElapsedTime(self.start, self.stop), "elapsed"))

    def close(self) -> None:
        driver = cu.api()
        driver.cuEventDestroy(self.start)
        driver.cuEventDestroy(self.stop)


def rotation_count(bytes_per_set: int, l2: str = "cold", cold_bytes: int = COLD_BYTES, most: int = 4096) -> int:
    """How many input sets make the rotation at least `cold_bytes` in all; one for the warm L2
    regime, whose one set stays resident from each launch to the next."""
    if l2 == "warm":
        return 1
    return max(2, min(most, -(-cold_bytes // max(1, bytes_per_set))))


def _summarise(samples: Sequence[float], launches: int, sets: int, method: str) -> Timing:
    median = statistics.median(samples)
    return Timing(
        median_us=median, min_us=min(samples), max_us=max(samples),
        spread=(max(samples) - min(samples)) / median if median > 0 else 0.0,
        samples_us=list(samples), launches_per_replay=launches, input_sets=sets, method=method,
    )


def time_graph(
    device: Device,
    enqueue: Callable[[int], None],
    *,
    launches: int,
    input_sets: int,
    replays: int = 10,
    warmup_replays: int = 2,
    before_replay: Callable[[], None] | None = None,
) -> Timing:
    """Capture `launches` calls of enqueue(i) (i = launch index) in one graph and time replays.

    `enqueue(i)` must put exactly the work of one kernel call on `device.stream`, reading input
    set i % input_sets. Returns per-launch microseconds. `before_replay()` puts work on the stream
    before every replay (warm-up ones too), outside the timed events: the evaluation refills the
    outputs there, so no replay starts with the previous replay's results already in place.
    """
    driver = cu.api()
    stream = device.stream
    mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    check(driver.cuStreamBeginCapture(stream, mode), "begin capture")
    try:
        for i in range(launches):
            enqueue(i)
    finally:
        graph = check(driver.cuStreamEndCapture(stream), "end capture")
    try:
        executable = check(driver.cuGraphInstantiate(graph, 0), "instantiate graph")
        events = Events()
        try:
            for _ in range(warmup_replays):
                if before_replay is not None:
                    before_replay()
                check(driver.cuGraphLaunch(executable, stream), "graph launch")
            samples = []
            for _ in range(replays):
                if before_replay is not None:
                    before_replay()
                events.record_start(stream)
                check(driver.cuGraphLaunch(executable, stream), "graph launch")
                events.record_stop(stream)
                samples.append(events.elapsed_ms() * 1000.0 / launches)
        finally:
            events.close()
            driver.cuGraphExecDestroy(executable)
    finally:
        driver.cuGraphDestroy(graph)
    device.synchronize()
    return _summarise(samples, launches, input_sets, "graph")


class CapturedWork:
    """Work captured once into a CUDA graph and launched on `device.stream` by `launch()`: many
    small operations (a memset per rotating set) cost one graph launch, not one Python call each."""

    def __init__(self, device: Device, enqueue: Callable[[], None]):
        driver = cu.api()
        self.device = device
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(driver.cuStreamBeginCapture(device.stream, mode), "begin capture")
        try:
            enqueue()
        finally:
            self._graph = check(driver.cuStreamEndCapture(device.stream), "end capture")
        try:
            self._executable = check(driver.cuGraphInstantiate(self._graph, 0), "instantiate graph")
        except BaseException:
            driver.cuGraphDestroy(self._graph)
            raise

    def launch(self) -> None:
        check(cu.api().cuGraphLaunch(self._executable, self.device.stream), "graph launch")

    def close(self) -> None:
        driver = cu.api()
        if self._executable is not None:
            driver.cuGraphExecDestroy(self._executable)
            driver.cuGraphDestroy(self._graph)
            self._executable = None


def fill_async(device: Device, ptr: int, byte: int, nbytes: int) -> None:
    """`nbytes` at `ptr` set to `byte`, queued on `device.stream` (capturable into a graph)."""
    check(cu.api().cuMemsetD8Async(ptr, byte, nbytes, device.stream), "memset")


def time_stream(
    device: Device,
    enqueue: Callable[[int], None],
    *,
    launches: int,
    input_sets: int,
    replays: int = 5,
) -> Timing:
    """The same measurement with launches issued one by one from Python (host overhead included)."""
    stream = device.stream
    enqueue(0)
    device.synchronize()
    events = Events()
    samples = []
    try:
        for _ in range(replays):
            events.record_start(stream)
            for i in range(launches):
                enqueue(i)
            events.record_stop(stream)
            samples.append(events.elapsed_ms() * 1000.0 / launches)
    finally:
        events.close()
    return _summarise(samples, launches, input_sets, "stream")


def time_torch_graph(function: Callable[[int], object], *, launches: int, input_sets: int,
                     replays: int = 10, warmup_replays: int = 2,
                     before_replay: Callable[[], None] | None = None) -> Timing:
    """`time_graph` for PyTorch code: `function(i)` runs one call on input set i % input_sets
    (eager kernels, or a torch.compile'd program) and is captured `launches` times into a
    torch.cuda.CUDAGraph, so a peer is timed exactly as our kernels are: replayed, cold L2,
    no Python in the measured time, `before_replay()` queued before each replay outside the timed
    events (an L2 eviction, as time_graph's). Warm it up (compile, autotune) before calling this."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        function(0)  # allocations made outside capture, so the graph's own pool starts warm
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(launches):
            function(i)
    for _ in range(warmup_replays):
        if before_replay is not None:
            before_replay()
        graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(replays):
        if before_replay is not None:
            before_replay()
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0 / launches)
    torch.cuda.synchronize()
    del graph
    return _summarise(samples, launches, input_sets, "graph")
