"""The tuned kernel at run time: the dispatch table picks a configuration for each call's shape.

`astra tune` writes a dispatch table; this is what runs it. Each call names its shape, the table
picks the configuration (tuned, nearest tuned shape, general, or default: see dispatch.py), the
template is compiled once per configuration and set of shape-derived defines (then served from
the compile cache and kept loaded), and the kernel is launched with the grid, block and shared
memory the template computes for that configuration and shape. The output folder's generated launcher.py is a thin wrapper of this.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.device import Device, Kernel
from astra_kernels.tools.toolchain.targets import STATIC_SHARED_LIMIT
from astra_kernels.tools.templating.template import Exclusion

from astra_kernels import suite
from .dispatch import DispatchTable


@dataclass(frozen=True)
class LaunchPlan:
    config: dict[str, int]
    picked_by: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int
    source: str = "template"  # "baseline" where no tuned configuration beat it, or a named source of the table


class TunedKernel:
    """Launches `table`'s kernel on `device`; arguments follow the kernel's signature
    (`astra kernels` lists it): device buffers for tensors, Python numbers for scalars."""

    def __init__(self, table: DispatchTable, device: Device | None = None):
        # An entry the template refuses at its own shape would be passed over for another one in
        # silence; constraints on the GPU are left out, since on another GPU that is what pick() is for.
        if broken := table.broken_entry(device_facts=False):
            raise suite.AstraError(broken)
        self.table = table
        self.device = device or Device(0)
        self.folder = suite.load(table.kernel)
        self._loaded: dict[str, Kernel] = {}
        self._shared_allowed: dict[str, int] = {}

    def plan(self, **shape: int) -> LaunchPlan:
        sms, arch = self.device.properties.multiprocessors, self.device.properties.arch
        pick = self.table.pick(shape, sms, arch)
        template = self.table.source_of(pick.source)
        env = suite.environment(self.folder.spec, shape, self.table.dtype, self.table.variant, sms, arch)
        instance = template.instantiate(pick.config, env)
        if isinstance(instance, Exclusion):  # pick() only returns admitted configurations
            raise suite.AstraError(f"{self.table.kernel}: {pick.config} cannot run at {shape}: {instance.reason}")
        return LaunchPlan(pick.config, pick.picked_by, instance.grid, instance.block, instance.shared_bytes, pick.source)

    def _kernel(self, plan: LaunchPlan, shape: dict[str, int]) -> Kernel:
        """The compiled kernel for this configuration at this shape: derived values (vectors per
        row, say) are compile-time defines, so the binary is keyed by its options, not the config."""
        request = suite.request(self.folder, plan.source, shape, self.table.dtype, self.table.variant,
                                plan.config or None, sms=self.device.properties.multiprocessors,
                                arch=self.device.properties.arch, source=self.table.source_of(plan.source))
        key = request.options.model_dump_json()
        if key not in self._loaded:
            module = compile_source(request.source, request.options)
            self._loaded[key] = self.device.load(module, request.kernel)
            self._shared_allowed[key] = STATIC_SHARED_LIMIT
        if plan.shared_bytes > self._shared_allowed[key]:  # shared memory can grow with the shape
            self.device.set_dynamic_shared(self._loaded[key], plan.shared_bytes)
            self._shared_allowed[key] = plan.shared_bytes
        return self._loaded[key]

    def __call__(self, *args, stream=None, **shape: int) -> LaunchPlan:
        """Launch at `shape` (e.g. T=16, D=4096) on the device's stream unless one is given."""
        plan = self.plan(**shape)
        kernel = self._kernel(plan, shape)
        self.device.launch(kernel, plan.grid, plan.block, list(args), plan.shared_bytes, stream)
        return plan
