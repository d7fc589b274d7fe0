"""Nsight Compute's counters for one launch of a candidate, where `ncu` is installed.

The agent's profiler evidence (nodes/shared/evidence.py) is computed from the project's own
probes; what only hardware counters say (how busy DRAM was, how many warps were really resident,
why warps stalled, how often L2 hit) comes from here: `profile(request)` runs the request's
correctness launches (no timing) in a child process under
`ncu --csv --metrics METRICS --kernel-name KERNEL --launch-count 1 --cache-control all`, so the
first launch of the candidate's kernel is measured with the caches flushed, and reads the CSV ncu
prints. As with the sanitizer (sanitizer.py), the child is this package's own module, the request
goes over a pickle in a private folder, and a run past its deadline is killed with its group
(tool_process.py).
"""

from __future__ import annotations

import csv
import io
import pickle
import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field

from astra_kernels.tools.toolchain.toolkit import toolkit_program
from .evaluation import EvaluationRequest
from .tool_process import not_installed, request_folder, run_under

# The counters read, each with the fact it gives (NsightReport.facts).
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
L2_HIT = "lts__t_sector_hit_rate.pct"
WAVES = "launch__waves_per_multiprocessor"
DURATION = "gpu__time_duration.sum"
# Why a warp could not issue, per issued instruction (ncu's warp-state sampling): the reasons a
# memory-bound kernel shows, each with what it means for the code.
STALLS = {
    "long_scoreboard": "waiting for global or local memory (L1TEX) results",
    "short_scoreboard": "waiting for shared memory or special math results",
    "barrier": "waiting at __syncthreads",
    "membar": "waiting at a memory fence",
    "mio_throttle": "the shared-memory and special-math queue full",
    "lg_throttle": "the global-memory instruction queue full (many narrow loads)",
    "math_pipe_throttle": "a math pipe busy",
    "wait": "a fixed-latency dependency",
    "drain": "draining stores at exit",
    "branch_resolving": "resolving a branch",
    "no_instruction": "no instruction fetched",
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = [DRAM, OCCUPANCY, L2_HIT, WAVES, DURATION, *(STALL_METRIC.format(r) for r in STALLS)]


class NsightReport(BaseModel):
    """What ncu measured of one launch, or why it did not."""

    available: bool
    binary: str | None = None
    kernel: str = ""
    metrics: dict[str, float] = Field(default_factory=dict)  # metric name: value, as ncu printed it
    message: str = ""
    output_tail: str = ""
    seconds: float = 0.0

    def facts(self) -> str:
        """The counters as one line a model reads; empty where none was measured."""
        m = self.metrics
        parts = []
        if DRAM in m:
            parts.append(f"DRAM throughput {m[DRAM]:.0f}% of peak")
        if OCCUPANCY in m:
            parts.append(f"achieved occupancy {m[OCCUPANCY]:.0f}% of the SM's warps")
        if L2_HIT in m:
            parts.append(f"L2 hit rate {m[L2_HIT]:.0f}%")
        if WAVES in m:
            parts.append(f"{m[WAVES]:.2f} waves per SM")
        stalls = sorted(((m[STALL_METRIC.format(r)], r) for r in STALLS if STALL_METRIC.format(r) in m), reverse=True)
        if stalls and stalls[0][0] > 0:
            parts.append("top warp stalls (cycles per issued instruction): " + ", ".join(
                f"{reason} {value:.1f} ({STALLS[reason]})" for value, reason in stalls[:3] if value > 0))
        return "; ".join(parts)


def find_ncu() -> str | None:
    """Nsight Compute's command line, on PATH or in the CUDA toolkit (toolkit.toolkit_program)."""
    return toolkit_program("ncu")


def parse_csv(text: str, kernel: str) -> dict[str, float]:
    """The metrics of the first launch of `kernel` in ncu's --csv output (its own lines and the
    target's output before the header are skipped); values as numbers, thousands separators gone,
    a value ncu could not collect ("n/a") left out."""
    start = text.find('"ID","Process ID"')
    if start < 0:
        return {}
    metrics: dict[str, float] = {}
    first_id = None
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Kernel Name") != kernel:
            continue
        first_id = first_id or row["ID"]
        if row["ID"] != first_id:
            break
        try:
            metrics[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError, AttributeError):
            continue
    return metrics


def profile(request: EvaluationRequest, *, binary: str | None = None, timeout_s: float = 300.0,
            device_index: int = 0) -> NsightReport:
    """Run the request's correctness launches under ncu in a child process and read the counters
    of the kernel's first launch. A run past `timeout_s` is killed with its process group."""
    binary = binary or find_ncu()
    if binary is None:
        return NsightReport(available=False, message=not_installed("Nsight Compute (ncu)"))
    started = time.perf_counter()
    with request_folder(request, "astra-nsight-") as folder:
        request_path = folder / "request.pickle"
        code, text = run_under([binary, "--csv", "--metrics", ",".join(METRICS), "--kernel-name", request.kernel,
                                "--launch-count", "1", "--cache-control", "all", "--target-processes", "all"],
                               __name__, [str(request_path), str(device_index)], timeout_s)
    if code is None:
        return NsightReport(available=True, binary=binary, kernel=request.kernel, seconds=time.perf_counter() - started,
                            message=f"ncu did not finish within {timeout_s:g} s; it was killed", output_tail=text[-4000:])
    metrics = parse_csv(text, request.kernel)
    message = (f"ncu measured {len(metrics)} counters of {request.kernel}" if metrics else
               f"ncu measured nothing of {request.kernel} (exit code {code}): "
               + (text.strip().splitlines() or ["no output"])[-1][:300])
    return NsightReport(available=True, binary=binary, kernel=request.kernel, metrics=metrics, message=message,
                        output_tail=text[-4000:], seconds=time.perf_counter() - started)


def _run(request_path: str, device_index: str) -> None:
    """Inside ncu: the correctness launches only (the first is the one measured)."""
    import dataclasses

    from astra_kernels.tools.toolchain.device import Device
    from .evaluation import evaluate

    request = pickle.loads(Path(request_path).read_bytes())
    evaluate(Device(int(device_index)), dataclasses.replace(request, time=False))


if __name__ == "__main__":
    _run(*sys.argv[1:3])
