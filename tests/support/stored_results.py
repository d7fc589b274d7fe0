"""A complete EvaluationResult as a GPU run stores it, for tests of the results store."""

from __future__ import annotations

from astra_kernels.tools.measuring.correctness import Check
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.toolchain.nvrtc import KernelInfo
from astra_kernels.tools.toolchain.resources import ResourceUsage
from astra_kernels.tools.toolchain.timing import Timing

DEVICE = "NVIDIA H100 80GB HBM3"


def result(median_us: float = 5.0, status: str = "ok", registers: int = 24, spills: bool = False) -> EvaluationResult:
    timing = Timing(median_us=median_us, min_us=median_us * 0.98, max_us=median_us * 1.03, spread=0.05,
                    samples_us=[median_us * 0.98, median_us, median_us * 1.03], launches_per_replay=64,
                    input_sets=64, method="graph")
    info = KernelInfo(name="act_and_mul", params=[],
                      resources=ResourceUsage(registers=registers, spill_store_bytes=8 if spills else 0))
    return EvaluationResult(
        status=status, label="silu_and_mul 16x4096 bf16", kernel="act_and_mul", device=DEVICE,
        arch="sm_90", kernel_info=info, compile_seconds=0.4, compile_cached=False,
        checks=[Check(name="out (seed 1)", passed=True, max_abs_error=1e-3, norm_error=2e-4),
                Check(name="outputs differ", passed=True)],
        timing=timing if status == "ok" else None, occupancy_blocks_per_sm=8, bytes_moved=393216,
        copy_bandwidth_gbs=3000.0, floor_us=0.13, fraction_of_copy_bandwidth=0.13 / median_us,
        wall_seconds=1.5,
    )
