"""A template's search space at one shape, shrunk stage by stage, each cut with its reason.

Stage one applies the template's constraints; stage two compiles what is left, in parallel, and
drops what does not compile; stage three reads each binary's ptxas report against the hardware
limits (tools/search/hardware.py). The survivors are what a search strategy may propose, each with its
resources and occupancy already known; the report shows the space shrinking and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_many
from .hardware import Limits, Occupancy, occupancy, prune_reason
from astra_kernels.tools.toolchain.resources import ResourceUsage
from astra_kernels.tools.templating.template import Exclusion, Template

Stage = Literal["constraint", "replay", "compile", "hardware"]
REPLAY_REASON = "not in the recording replayed, so not compiled (a replay answers only what it holds)"


class Pruned(BaseModel):
    config: dict[str, int]
    stage: Stage
    reason: str


class FeasibleConfig(BaseModel):
    """A configuration that compiles and fits the hardware at this shape."""

    config: dict[str, int]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int
    options: CompileOptions
    resources: ResourceUsage
    occupancy: Occupancy


class SpaceReport(BaseModel):
    total: int
    after_constraints: int
    after_compile: int
    candidates: list[FeasibleConfig] = Field(default_factory=list)
    pruned: list[Pruned] = Field(default_factory=list)

    @property
    def after_hardware(self) -> int:
        return len(self.candidates)

    def reasons(self, stage: Stage | None = None) -> list[tuple[str, int]]:
        """Why configurations were cut, most frequent first."""
        tally = Counter(p.reason for p in self.pruned if stage is None or p.stage == stage)
        return tally.most_common()


def build_space(template: Template, env: Mapping[str, int], base: CompileOptions, limits: Limits, *,
                configs: Iterable[dict[str, int]] | None = None, max_spill_bytes: int = 0,
                workers: int | None = None, compile_timeout_s: float | None = None,
                progress: Callable[[int, int], None] | None = None,
                answerable: Callable[[dict[str, int]], bool] | None = None) -> SpaceReport:
    """Shrink `configs` (default: the whole space) for one environment (shape, dtype, variant).
    `compile_timeout_s` prunes a configuration NVRTC has not finished by then (a template from a
    chat model may hold code that compiles for ever at some parameter values). `progress(done,
    total)` follows the compile stage, the slow one (compile_many). `answerable(config)`, for a
    replay, keeps only what the recording can answer: the rest is never compiled (stage "replay")."""
    configs = list(template.all_configs() if configs is None else configs)
    pruned: list[Pruned] = []
    instances = []
    for config, instance in zip(configs, template.instantiate_all(configs, env)):
        if isinstance(instance, Exclusion):
            # unvalidated: a whole space's exclusions at every shape of a sweep (millions) are the
            # template's own dicts and strings, and validating each was a tenth of a tune's driver time
            pruned.append(Pruned.model_construct(config=config, stage="constraint", reason=instance.reason))
        elif answerable is not None and not answerable(config):
            pruned.append(Pruned.model_construct(config=config, stage="replay", reason=REPLAY_REASON))
        else:
            instances.append(instance)
    after_constraints = len(instances) + sum(p.stage == "replay" for p in pruned)
    options = [instance.compile_options(base) for instance in instances]
    outcomes = compile_many([(template.code, o) for o in options], workers=workers, timeout_s=compile_timeout_s,
                            progress=progress)
    candidates = []
    compiled = 0
    for instance, opts, outcome in zip(instances, options, outcomes):
        if outcome.module is None:
            first = (outcome.error or "compile error").splitlines()[0]
            pruned.append(Pruned(config=instance.config, stage="compile", reason=first))
            continue
        compiled += 1
        resources = outcome.module.kernel(template.kernel).resources
        threads = 1
        for d in instance.block:
            threads *= d
        reason = prune_reason(resources, threads, instance.shared_bytes, limits, max_spill_bytes)
        if reason:
            pruned.append(Pruned(config=instance.config, stage="hardware", reason=reason))
            continue
        candidates.append(FeasibleConfig(
            config=instance.config, grid=instance.grid, block=instance.block,
            shared_bytes=instance.shared_bytes, options=opts, resources=resources,
            occupancy=occupancy(resources, threads, instance.shared_bytes, limits),
        ))
    return SpaceReport(total=len(configs), after_constraints=after_constraints, after_compile=compiled,
                       candidates=candidates, pruned=pruned)
