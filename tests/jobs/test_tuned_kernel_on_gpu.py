"""The generated launcher on a real GPU: at every shape of a kernel's sets the dispatch table's
pick is launched through launcher.py on device buffers and matches the float64 reference."""

from __future__ import annotations

import importlib.util

import pytest

from astra_kernels import suite
from astra_kernels.jobs import tune_report, tuning
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable
from astra_kernels.tools.measuring.correctness import POISON_BYTE, compare
from astra_kernels.tools.toolchain.device import Device, DeviceBuffer
from astra_kernels.tools.toolchain.dtypes import numpy_dtype

pytestmark = pytest.mark.gpu

KERNELS = ["silu_and_mul", "fused_add_rmsnorm", "merge_attn_states"]
SMALL = 1 << 26  # bytes: the float64 references of larger shapes take tens of seconds each


def _table(name: str) -> DispatchTable:
    """A table as `astra tune` would write it: one tuned shape with a non-default configuration."""
    folder = suite.load(name)
    shape = folder.spec.all_shapes()[0]
    env = suite.environment(folder.spec, shape, "bf16", "default", 132)
    config = next(c for c in folder.template.sample_configs(50, seed=3)
                  if not isinstance(folder.template.instantiate(c, env), suite.Exclusion))
    return DispatchTable(kernel=name, dtype="bf16", variant="default",
                         entries=[DispatchEntry(shape=shape, config=config)], general=None)


def _shapes(name: str) -> list[dict]:
    folder = suite.load(name)
    small = []
    for shape in folder.spec.all_shapes():
        problem = suite.problem(folder, shape, "bf16")
        if sum(p.nbytes for p in problem.buffers) <= SMALL:
            small.append(shape)
    return small


@pytest.fixture(scope="module")
def device():
    return Device(0)


def _load_launcher(tmp_path, device, name: str, table: DispatchTable):
    folder = suite.load(name)
    report = tuning.TuneReport(kernel=name, dtype="bf16", variant="default", strategy="exhaustive",
                               device="test", arch=device.properties.arch, date="today", dispatch=table)
    tune_report.write_outputs(folder, report, tmp_path)
    spec = importlib.util.spec_from_file_location("launcher", tmp_path / "launcher.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    return launcher.load(device)


def _launch_and_check(kernel, device, folder, shape):
    """Launch the table's pick at `shape` on poisoned outputs and compare with the reference."""
    problem = suite.problem(folder, shape, "bf16")
    case = problem.make_case(0)
    buffers = {p.name: DeviceBuffer(p.nbytes) for p in problem.buffers}
    for p in problem.buffers:
        if p.role in ("in", "inout"):
            buffers[p.name].upload(case.inputs[p.name])
        else:
            buffers[p.name].fill_bytes(POISON_BYTE)
    plan = kernel(*[buffers[p.name] if p.is_buffer else p.scalar() for p in problem.params], **shape)
    device.synchronize()
    for p in problem.buffers:
        if p.role != "in":
            got = buffers[p.name].download(numpy_dtype(p.dtype), p.shape)
            check = compare(p.name, got, case.expected[p.name], problem.tolerance(p.dtype))
            assert check.passed, f"{folder.spec.label(shape)} {plan.config} ({plan.picked_by}): {check.detail}"
    for buf in buffers.values():
        buf.close()
    return plan


@pytest.mark.parametrize("name", KERNELS)
def test_generated_launcher_is_correct_at_every_shape(tmp_path, device, name):
    folder = suite.load(name)
    kernel = _load_launcher(tmp_path, device, name, _table(name))
    picked = {_launch_and_check(kernel, device, folder, shape).picked_by.split(" ")[0] for shape in _shapes(name)}
    assert "tuned" in picked and len(picked) > 1  # the tuned shape, and others picked by rule


@pytest.mark.parametrize("name", ["rmsnorm", "merge_attn_states"])
def test_a_baseline_entry_launches_the_baseline(tmp_path, device, name):
    folder = suite.load(name)
    table = _table(name)
    at = _shapes(name)[1]
    table.entries.append(DispatchEntry(shape=at, config={}, source="baseline"))
    kernel = _load_launcher(tmp_path, device, name, table)
    plan = _launch_and_check(kernel, device, folder, at)
    assert plan.source == "baseline" and plan.config == {} and plan.picked_by == "tuned: the baseline"
    assert _launch_and_check(kernel, device, folder, folder.spec.all_shapes()[0]).source == "template"
