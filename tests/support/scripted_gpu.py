"""A scripted GPU for the tuner's tests: a worker whose timings follow a rule, on silu_and_mul."""

from __future__ import annotations

import random

from astra_kernels import suite
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.toolchain.timing import Timing

FOLDER = suite.load("silu_and_mul")
SHAPES = [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]


def row_sample(count: int = 40, seed: int = 2) -> list[dict[str, int]]:
    """A seeded sample of the template's row-per-CTA space (FLAT = STREAM = STATIC_D = 0): the configurations
    `sample_configs(count, seed)` drew before the template gained those three parameters, which the
    tuner tests' expectations (the scripted GPU's best, the pick at an odd width) were worked out on."""
    rows = [c for c in FOLDER.template.all_configs() if c["FLAT"] == 0 and c["STREAM"] == 0 and c["STATIC_D"] == 0]
    return [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), count))]


class ScriptedWorker:
    """Prefers more CTAs per row at few tokens and wide vectors everywhere."""

    device = {"name": "Scripted GPU", "arch": "sm_90", "multiprocessors": 132, "max_shared_per_block_optin": 232448}

    def __init__(self):
        self.calls = 0

    def evaluate(self, request):
        self.calls += 1
        d = request.options.defines
        us = 10.0 / d.get("VEC", 8) + (1.0 / d.get("CHUNKS", 1)) + d.get("UNROLL", 1) * 0.01
        t = Timing(median_us=us, min_us=us, max_us=us, spread=0.0, samples_us=[us], launches_per_replay=10,
                   input_sets=10, method="graph")
        return EvaluationResult(status="ok", timing=t, device=self.device["name"], arch=self.device["arch"],
                                wall_seconds=0.05)
