"""The dispatch table: tuned shapes mapped to their best configurations, and a run-time pick.

A shape that was tuned gets its own best. Any other shape gets the configuration of the nearest
tuned shape (distance: the sum over shape symbols of |log a - log b|) whose configuration the
template's constraints admit at the new shape, else the general configuration, else the
configuration the shape admits that is fewest value steps from the nearest tuned shape's (at an
odd width, say, the same threads and CTAs per row with narrower vectors), so the launcher never
picks a configuration that cannot run there, nor a slow one when a near one runs.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from astra_kernels.tools.template import Exclusion

from . import suite


class DispatchEntry(BaseModel):
    shape: dict[str, int]
    config: dict[str, int]
    median_us: float | None = None


class DispatchTable(BaseModel):
    kernel: str
    dtype: str
    variant: str
    entries: list[DispatchEntry]
    general: dict[str, int] | None = None

    def pick(self, shape: dict[str, int], sms: int = suite.DEFAULT_SMS) -> tuple[dict[str, int], str]:
        """The configuration to launch at `shape`, and where it came from."""
        folder = suite.load(self.kernel)
        env = suite.environment(folder.spec, shape, self.dtype, self.variant, sms)

        def admits(config) -> bool:
            return not isinstance(folder.template.instantiate(config, env), Exclusion)

        def distance(entry: DispatchEntry) -> float:
            return sum(abs(math.log(entry.shape[s]) - math.log(shape[s])) for s in folder.spec.symbols)

        ranked = sorted(self.entries, key=distance)
        for entry in ranked:
            if admits(entry.config):
                return entry.config, "tuned" if distance(entry) == 0 else f"nearest tuned shape {folder.spec.label(entry.shape)}"
        if self.general and admits(self.general):
            return self.general, "general configuration"
        target, origin = ((ranked[0].config, f"tuned shape {folder.spec.label(ranked[0].shape)}") if ranked
                          else (folder.template.default, "template default"))
        index = {p.name: {v: i for i, v in enumerate(p.values)} for p in folder.template.parameters}

        def steps(config) -> int:
            return sum(abs(index[n][config[n]] - index[n][target[n]]) for n in index if n in target)

        runnable = [c for c in folder.template.all_configs() if admits(c)]
        if runnable:
            return min(runnable, key=steps), f"closest runnable to the {origin}'s configuration"
        raise suite.AstraError(f"{self.kernel}: no configuration of the template runs at {folder.spec.label(shape)}")
