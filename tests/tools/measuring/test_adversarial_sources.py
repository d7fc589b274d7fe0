"""The adversarial kernels (support/adversarial.py) compile for sm_90 without a GPU, and the
__device__ variables the evaluation watches (device_state.py) are found in their cubins."""

from __future__ import annotations

import pytest

from support import adversarial
from astra_kernels.tools.measuring.correctness import floor_verdict
from astra_kernels.tools.measuring.device_state import state_verdict, writable_globals
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.timing import Timing

STATE = {0: set(), 20: set(), 21: {"blocks_done", "served_x"}, 22: {"blocks_done", "memo_key", "memo_out"},
         23: {"blocks_done", "previous_key", "previous_y"}, 24: {"blocks_started"}, 25: {"blocks_started"},
         26: set(), 27: set()}


@pytest.mark.parametrize("variant", sorted(STATE))
def test_each_adversarial_kernel_compiles_and_its_device_variables_are_found(variant):
    assert {c[1] for c in adversarial.CASES} - {adversarial.OVERCLAIMED} | {adversarial.TIMED_SHAPE_ONLY} == set(STATE)
    module = compile_source(adversarial.SOURCE, CompileOptions(arch="sm_90", defines={"VARIANT": variant}))
    assert "scale" in module.kernels
    assert {name for name, _ in writable_globals(module.cubin)} == STATE[variant]


def test_globals_are_read_from_the_symbol_table_with_their_sizes():
    source = r"""
    __device__ unsigned int counter;
    __device__ float table[16];
    __constant__ float coeffs[4];
    extern "C" __global__ void k(float* y) { counter++; y[0] = table[threadIdx.x] + coeffs[0]; table[1] = 2; }
    """
    found = dict(writable_globals(compile_source(source, CompileOptions(arch="sm_90")).cubin))
    assert found == {"counter": 4, "table": 64}  # __constant__ memory no kernel can write is not listed
    assert writable_globals(b"not an ELF file") == []


def test_the_state_verdict_names_the_variables_that_changed():
    before = {"counter": b"\0\0\0\0", "table": b"\1" * 8}
    assert state_verdict(before, dict(before)).passed
    changed = state_verdict(before, {"counter": b"\1\0\0\0", "table": b"\1" * 8})
    assert not changed.passed and "'counter'" in changed.detail and "'table'" not in changed.detail
    assert "kept state across launches" in changed.detail


def _timing(median: float, spread: float) -> Timing:
    return Timing(median_us=median, min_us=median, max_us=median * (1 + spread), spread=spread,
                  samples_us=[median], launches_per_replay=20, input_sets=4, method="fake")


def test_a_time_under_the_floor_beyond_the_spread_is_flagged_and_none_else():
    assert floor_verdict(_timing(21.0, 0.01), 20.0).passed  # over the floor
    assert floor_verdict(_timing(18.5, 0.01), 20.0).passed  # under it, within the 10% margin
    flagged = floor_verdict(_timing(7.5, 0.01), 20.0)
    assert not flagged.passed and "faster than its bytes allow" in flagged.detail
    assert "12.50 us under the floor of 20.00 us" in flagged.detail
    assert floor_verdict(_timing(15.0, 0.30), 20.0).passed  # a spread of 30%: a 25% gap is noise
    assert not floor_verdict(_timing(13.0, 0.30), 20.0).passed
