"""What a machine without a GPU says: plainly that it has none, and nothing crashes."""

from __future__ import annotations

import numpy as np
import pytest

from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.errors import NoGpuError
from astra_kernels.tools.measuring import probes
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.device import Device, Kernel
from astra_kernels.tools.toolchain.driver import gpu_available, local_arch
from astra_kernels.tools.errors import LaunchArgumentError

pytestmark = pytest.mark.skipif(gpu_available(), reason="checks the behaviour of a machine with no GPU")


def test_device_raises_no_gpu():
    with pytest.raises(NoGpuError, match="driver"):
        Device(0)
    assert local_arch() is None


def test_default_arch_without_gpu_is_sm_90():
    assert compile_source(probes.EMPTY_SOURCE, CompileOptions(), cache=False).arch == "sm_90"


def test_worker_reports_no_gpu_and_parent_survives():
    with pytest.raises(NoGpuError, match="cannot evaluate"):
        EvaluationWorker(start_timeout_s=60).start()


def _kernel():
    module = compile_source(probes.COPY_SOURCE, CompileOptions(arch="sm_90"), cache=False)
    return Kernel(function=None, info=module.kernel("copy_vec4"))


def test_argument_count_is_checked_before_the_driver():
    with pytest.raises(LaunchArgumentError, match="takes 3 arguments, got 2"):
        _kernel().pack_args([np.uint64(0), np.uint64(0)])


def test_argument_width_and_kind_are_checked():
    k = _kernel()
    with pytest.raises(LaunchArgumentError, match="4 bytes given"):
        k.pack_args([np.uint64(0), np.uint64(0), np.uint32(5)])
    with pytest.raises(LaunchArgumentError, match="not a DeviceBuffer"):
        k.pack_args([np.uint64(0), np.uint64(0), 5])
    with pytest.raises(LaunchArgumentError, match="float64"):
        k.pack_args([np.uint64(0), np.uint64(0), np.float64(5)])
    holders, pointers = k.pack_args([np.uint64(1), np.uint64(2), np.uint64(3)])
    assert len(pointers) == 3 and [int(h[0]) for h in holders] == [1, 2, 3]


def test_a_prepared_launch_packs_once_and_writes_each_calls_pointers(monkeypatch):
    """PreparedLaunch: the scalars packed once; each call writes its pointers into the same
    parameter array and hands the driver that array (checked here with a stand-in driver)."""
    import ctypes

    from astra_kernels.tools.toolchain import device as device_module
    from astra_kernels.tools.toolchain.device import DeviceBuffer, PreparedLaunch

    seen = []

    class Driver:
        def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointers = (ctypes.c_void_p * 3).from_address(params)
            seen.append(((gx, gy, gz, bx, by, bz, shared, stream),
                         [ctypes.c_uint64.from_address(p).value for p in pointers]))
            return (0,)

    monkeypatch.setattr(device_module.cu, "api", lambda: Driver())
    monkeypatch.setattr(device_module, "check", lambda result, what: None)
    slot = DeviceBuffer.view(0, 1)
    launch = PreparedLaunch(_kernel(), (4, 1, 1), (128, 1, 1), [slot, slot, np.uint64(77)], 0)
    launch([0x1000, 0x2000], 5)
    launch([0x3000, 0x4000], 6)
    assert seen == [((4, 1, 1, 128, 1, 1, 0, 5), [0x1000, 0x2000, 77]), ((4, 1, 1, 128, 1, 1, 0, 6), [0x3000, 0x4000, 77])]
    with pytest.raises(ValueError):  # a call with the wrong number of pointers launches nothing
        launch([0x1000], 7)
    assert len(seen) == 2
