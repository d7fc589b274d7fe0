"""The PyTorch peers' outputs rotate with their input sets as the worker's arena rotates ours:
launch i writes where launch i - count wrote, never the block the launch before it just wrote
(which sits in L2 wherever the outputs fit there, and made a peer write warm while ours wrote cold).
"""

from __future__ import annotations

import gc
import weakref

import pytest

from astra_kernels.jobs.torch_peers import RotatingCalls


class _Outputs:
    """Stands for a call's output tensors; weakly referenced to see when the caller lets go."""


def test_launch_i_minus_count_outputs_are_released_before_launch_i():
    count, launches = 3, 8
    alive: list[weakref.ref] = []
    seen: list[tuple[int, list[int]]] = []

    def forward(tensors, scalars, variant):
        gc.collect()
        seen.append((tensors["set"], [n for n, ref in enumerate(alive) if ref() is not None]))
        made = _Outputs()
        alive.append(weakref.ref(made))
        return made

    calls = RotatingCalls(forward, [{"set": s} for s in range(count)], {}, "default")
    for i in range(launches):
        calls(i)
    for i, (input_set, held) in enumerate(seen):
        assert input_set == i % count
        # while launch i runs, exactly the previous count - 1 launches' outputs are held
        assert held == list(range(max(0, i - count + 1), i)), (i, held)
    calls.release()
    gc.collect()
    assert all(ref() is None for ref in alive)


def test_one_set_warm_rewrites_the_same_outputs():
    """The warm regime's one set: each launch's outputs released before the next, as the worker
    rewrites its one output buffer."""
    held_during: list[bool] = []
    last: list[weakref.ref] = []

    def forward(tensors, scalars, variant):
        gc.collect()
        held_during.append(bool(last) and last[-1]() is not None)
        made = _Outputs()
        last.append(weakref.ref(made))
        return made

    calls = RotatingCalls(forward, [{}], {}, "default")
    for i in range(4):
        calls(i)
    assert held_during == [False, False, False, False]


@pytest.mark.gpu
@pytest.mark.parametrize("outputs", [1, 2])
def test_captured_launches_write_where_the_launch_count_before_wrote(outputs):
    """Under CUDA-graph capture the caching allocator hands launch i the blocks launch i - count
    released: the addresses rotate with period count, as the arena's do, for one output or
    several (out-of-place fused_add_rmsnorm returns two), and no launch writes where the launch
    before it wrote."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    from astra_kernels.tools.toolchain.timing import time_torch_graph

    count, launches = 3, 10
    addresses: list[frozenset[int]] = []

    def forward(tensors, scalars, variant):
        made = {f"out{k}": tensors["x"] * (k + 2) for k in range(outputs)}  # one allocation each, no temporaries
        addresses.append(frozenset(t.data_ptr() for t in made.values()))
        return made

    x = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
    calls = RotatingCalls(forward, [{"x": x.clone()} for _ in range(count)], {}, "default")
    timing = time_torch_graph(calls, launches=launches, input_sets=count, replays=2)
    calls.release()
    captured = addresses[-launches:]  # the first call is the warm-up, outside the capture
    assert len(set(captured[:count])) == count
    assert all(captured[i] == captured[i - count] for i in range(count, launches)), captured
    assert all(not captured[i] & captured[i - 1] for i in range(1, launches)), captured
    assert timing.median_us > 0
