"""The dispatch table: tuned shapes mapped to their best configurations, and a run-time pick.

A shape that was tuned gets its own best, which is the baseline itself where no configuration
measured there beat it: so the tuned kernel is never slower than the baseline at a tuned shape. Any other shape gets the configuration of the nearest
tuned shape (distance: the sum over shape symbols of |log a - log b|) whose configuration the
template's constraints admit at the new shape, else the general configuration, else the
configuration the shape admits that is fewest value steps from the nearest tuned shape's (at an
odd width, say, the same threads and CTAs per row with narrower vectors), so the launcher never
picks a configuration that cannot run there, nor a slow one when a near one runs.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from pydantic import BaseModel

from astra_kernels.tools.templating.template import Exclusion

from astra_kernels.kernels_sglang import suite


class DispatchEntry(BaseModel):
    shape: dict[str, int]
    config: dict[str, int]
    median_us: float | None = None
    source: Literal["template", "baseline"] = "template"  # baseline: nothing measured there beat it


class Pick(NamedTuple):
    """What to launch at a shape: the template at `config`, or the baseline (`config` empty)."""

    config: dict[str, int]
    picked_by: str
    source: str = "template"


class DispatchTable(BaseModel):
    kernel: str
    dtype: str
    variant: str
    entries: list[DispatchEntry]
    general: dict[str, int] | None = None

    def pick(self, shape: dict[str, int], sms: int = suite.DEFAULT_SMS, arch: str | None = None) -> Pick:
        """The configuration to launch at `shape` on a GPU of `sms` multiprocessors and `arch`, and
        where it came from."""
        folder = suite.load(self.kernel)
        env = suite.environment(folder.spec, shape, self.dtype, self.variant, sms, arch)

        def admits(config) -> bool:
            return not isinstance(folder.template.instantiate(config, env), Exclusion)

        def distance(entry: DispatchEntry) -> float:
            return sum(abs(math.log(entry.shape[s]) - math.log(shape[s])) for s in folder.spec.symbols)

        ranked = sorted(self.entries, key=distance)
        for entry in ranked:
            where = "tuned" if distance(entry) == 0 else f"nearest tuned shape {folder.spec.label(entry.shape)}"
            if entry.source == "baseline":  # the baseline runs at every shape
                return Pick({}, f"{where}: the baseline", "baseline")
            if admits(entry.config):
                return Pick(entry.config, where)
        if self.general and admits(self.general):
            return Pick(self.general, "general configuration")
        templated = [e for e in ranked if e.source == "template"]
        target, origin = ((templated[0].config, f"tuned shape {folder.spec.label(templated[0].shape)}") if templated
                          else (folder.template.default, "template default"))
        index = {p.name: {v: i for i, v in enumerate(p.values)} for p in folder.template.parameters}

        def steps(config) -> int:
            return sum(abs(index[n][config[n]] - index[n][target[n]]) for n in index if n in target)

        runnable = [c for c in folder.template.all_configs() if admits(c)]
        if runnable:
            return Pick(min(runnable, key=steps), f"closest runnable to the {origin}'s configuration")
        raise suite.AstraError(f"{self.kernel}: no configuration of the template runs at {folder.spec.label(shape)}")
