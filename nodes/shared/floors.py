"""A shape's time against its two floors: the bytes floor (the bytes moved over the bandwidth of the
kernel's own read/write mix) and the launch floor (an empty kernel under CUDA-graph replay), and
what they say of the shape: latency-bound or bandwidth-bound, done or not. The facts the model
reads (facts.py) and the profiler evidence (evidence.py) both judge a shape this one way."""

from __future__ import annotations

from dataclasses import dataclass

LATENCY_BOUND_RATIO = 0.5
"""A shape whose bytes floor is below this many launch floors is latency-bound: moving its bytes
at full bandwidth costs less than half an empty launch, so launch and ramp-up overhead, not
bandwidth, decide its time, and the bytes floor is out of reach. (At 2, as before 2026-11-27,
silu_and_mul 64x8192, whose bytes floor equals its launch floor, read latency-bound.)"""

LATENCY_DONE_RATIO = 1.5
"""A latency-bound shape within this many launch floors is done: what remains is launch cost."""


@dataclass(frozen=True)
class ShapeRow:
    label: str
    us: float | None = None
    floor_us: float | None = None  # bytes moved / the bandwidth of the kernel's own mix (the physical floor)
    launch_floor_us: float | None = None
    baseline_us: float | None = None

    @classmethod
    def from_measurement(cls, m, *, launch_floor_us: float | None = None,
                         baseline_us: float | None = None) -> ShapeRow:
        """A row from a nodes/state.py ShapeMeasurement: its floor_us, else its fraction of copy
        bandwidth times its time (the same number: floor / time is that fraction)."""
        floor = getattr(m, "floor_us", None) or (
            m.fraction_of_copy_bandwidth * m.median_us if m.fraction_of_copy_bandwidth and m.median_us else None)
        return cls(m.label, m.median_us, floor, launch_floor_us, baseline_us)

    def bound(self) -> str | None:
        if not self.floor_us or not self.launch_floor_us:
            return None
        return "latency-bound" if self.floor_us < LATENCY_BOUND_RATIO * self.launch_floor_us else "bandwidth-bound"

    def done(self, done_fraction: float) -> bool | None:
        if self.us is None or self.bound() is None:
            return None
        if self.bound() == "latency-bound":
            return self.us <= LATENCY_DONE_RATIO * self.launch_floor_us
        return self.us <= self.floor_us / done_fraction
