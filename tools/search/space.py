"""A template's search space at one shape, shrunk stage by stage, each cut with its reason.

Stage one applies the template's constraints; stage two compiles what is left, in parallel, and
drops what does not compile; stage three reads each binary's ptxas report against the hardware
limits (tools/search/hardware.py). The survivors are what a search strategy may propose, each with its
resources and occupancy already known; the report shows the space shrinking and why.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from astra_kernels.tools.toolchain.nvrtc import CompileOptions, key_and_flags
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
    replay, keeps only what the recording can answer: the rest is never compiled (stage "replay").

    A sweep asks for the same space at every token count of a width: the whole space's constraint
    stage and each binary's compile verdict are kept in this process (_constrained, _compile_verdicts), so
    only the first shape of a width pays for them (1.7-2.3 s a shape of fused_add_rmsnorm's 55,296
    configurations on a 2-core machine, most of a warm sweep tune's wall time on an H200 before)."""
    pruned: list[Pruned] = []
    if configs is None:
        total = template.size()
        configs, excluded = _constrained(template, env)
        pruned.extend(excluded)
    else:
        configs = list(configs)
        total = len(configs)
    instances = []
    for instance in template.instantiate_all(configs, env):
        if isinstance(instance, Exclusion):
            # unvalidated: a whole space's exclusions at every shape of a sweep (millions) are the
            # template's own dicts and strings, and validating each was a tenth of a tune's driver time
            pruned.append(Pruned.model_construct(config=instance.config, stage="constraint", reason=instance.reason))
        elif answerable is not None and not answerable(instance.config):
            pruned.append(Pruned.model_construct(config=instance.config, stage="replay", reason=REPLAY_REASON))
        else:
            instances.append(instance)
    after_constraints = len(instances) + sum(p.stage == "replay" for p in pruned)
    options = [instance.compile_options(base) for instance in instances]
    verdicts = _compile_verdicts(template.code, template.kernel, options, workers, compile_timeout_s, progress)
    candidates = []
    compiled = 0
    for instance, opts, verdict in zip(instances, options, verdicts):
        if isinstance(verdict, str):
            pruned.append(Pruned(config=instance.config, stage="compile", reason=verdict))
            continue
        compiled += 1
        threads = 1
        for d in instance.block:
            threads *= d
        reason = prune_reason(verdict, threads, instance.shared_bytes, limits, max_spill_bytes)
        if reason:
            pruned.append(Pruned(config=instance.config, stage="hardware", reason=reason))
            continue
        candidates.append(FeasibleConfig(
            config=instance.config, grid=instance.grid, block=instance.block,
            shared_bytes=instance.shared_bytes, options=opts, resources=verdict,
            occupancy=occupancy(verdict, threads, instance.shared_bytes, limits),
        ))
    return SpaceReport(total=total, after_constraints=after_constraints, after_compile=compiled,
                       candidates=candidates, pruned=pruned)


# What a sweep's shapes of one width share, kept for the process: each template's whole space (one
# list of its configurations), the constraint stage per template and the environment values its
# constraints read, and each binary's compile verdict (its resources, or its error's first line) by
# compile key and kernel. Bounded, oldest out first. Measured for fused_add_rmsnorm (55,296
# configurations, 53,506 excluded at a width): the space 15 MB a template, an environment's
# exclusions 15 MB (Pruned objects over the space's own dicts, one field set shared), a verdict
# under 1 KB; so at most about 75 MB for such a kernel, and 40 MB of verdicts.
_SPACES_KEPT = 4  # templates (the agent tunes a model's template beside the suite's)
_CONSTRAINED_KEPT = 4  # environments: the widths a tune's shapes visit in turn
_COMPILED_KEPT = 50_000  # binaries: a kernel's admitted configurations at each of a few dozen widths
_spaces_memo: OrderedDict = OrderedDict()
_constrained_memo: OrderedDict = OrderedDict()
_compiled_memo: OrderedDict = OrderedDict()
_memo_lock = threading.Lock()
# Every field set, one set for all the exclusions (a model_copy's update adds names it holds already)
_PRUNED_FIELDS = set(Pruned.model_fields)


def _kept(memo: OrderedDict, key, limit: int, make):
    """memo[key], made by `make()` (outside the lock: a space takes a second) where it is not
    kept; the oldest entries out past `limit`."""
    with _memo_lock:
        if (value := memo.get(key)) is not None:
            memo.move_to_end(key)
            return value
    value = make()
    with _memo_lock:
        memo[key] = value
        while len(memo) > limit:
            memo.popitem(last=False)
    return value


def _constrained(template: Template, env: Mapping[str, int]) -> tuple[list[dict[str, int]], list[Pruned]]:
    """The whole space's configurations the constraints admit in `env`, and the others as the
    constraint stage's Pruned, from the first shape whose environment reads the same (a token
    sweep changes none of the values most templates' constraints read): the same lists, shared.
    An exclusion by the launch geometry (an empty grid: the shape's own) is left to each shape."""
    def screen() -> tuple[list[dict[str, int]], list[Pruned]]:
        configs = _kept(_spaces_memo, (template.code, template.path), _SPACES_KEPT,
                        lambda: list(template.all_configs()))
        passing, excluded = [], []
        for config, instance in zip(configs, template.instantiate_all(configs, env)):
            if isinstance(instance, Exclusion) and instance.line:
                excluded.append(Pruned.model_construct(_fields_set=_PRUNED_FIELDS, config=config, stage="constraint",
                                                       reason=instance.reason))
            else:
                passing.append(config)
        return passing, excluded

    key = (template.code, template.path, tuple(env.get(n) for n in template.screened_names()))
    return _kept(_constrained_memo, key, _CONSTRAINED_KEPT, screen)


def _compile_verdicts(code: str, kernel: str, options: list[CompileOptions], workers: int | None,
                      timeout_s: float | None, progress: Callable[[int, int], None] | None
                      ) -> list[ResourceUsage | str]:
    """Each variant's resources for `kernel`, or its compile error's first line: what the space
    needs of a compile. Only binaries no earlier shape asked for go to compile_many (the disk
    cache's reads and checks of 1,790 binaries were a fifth of a cached shape's time); a timeout is
    not kept (a less loaded moment may finish it), a compile error is (the same source fails the
    same way, where the compiler said so in its log: a crash, an out-of-memory kill say, is not)."""
    keys = [(key_and_flags(code, o, "kernel.cu")[0], kernel) for o in options]
    verdicts: list[ResourceUsage | str | None] = [None] * len(options)
    with _memo_lock:
        for i, key in enumerate(keys):
            verdicts[i] = _compiled_memo.get(key)
    misses = [i for i, v in enumerate(verdicts) if v is None]
    known = len(options) - len(misses)
    outcomes = compile_many([(code, options[i]) for i in misses], workers=workers, timeout_s=timeout_s,
                            progress=(lambda done, total: progress(known + done, len(options))) if progress else None)
    if progress and not misses and options:
        progress(len(options), len(options))
    with _memo_lock:
        for i, outcome in zip(misses, outcomes):
            if outcome.module is not None:
                verdicts[i] = _compiled_memo[keys[i]] = outcome.module.kernel(kernel).resources
            else:
                verdicts[i] = (outcome.error or "compile error").splitlines()[0]
                if outcome.error_type == "CompileError" and outcome.diagnostics:
                    _compiled_memo[keys[i]] = verdicts[i]
        while len(_compiled_memo) > _COMPILED_KEPT:
            _compiled_memo.popitem(last=False)
    return verdicts
