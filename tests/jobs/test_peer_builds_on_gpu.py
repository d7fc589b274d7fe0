"""A peer built ahead in a child process (jobs/peer_builds.py) is what the benchmark's own compile of
that shape then loads: measure_peer's torch.compile finds it in Inductor's on-disk cache (a hit, no
miss) and times it correctly, for every kernel of the suite; the child kept no launch configuration
it timed (those are picked by the worker, on its idle GPU). Fresh cache folders, so a hit can only
come from the child's build."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.jobs import peer_builds
from astra_kernels.jobs.torch_peers import measure_peer

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _sweep_shape(name: str) -> dict[str, int]:
    """A sweep shape of the kernel with a few dozen tokens: the first of its serving widths."""
    shapes = suite.load(name).spec.sweep_shapes(held_out=False)
    return next(s for s in shapes if list(s.values())[0] >= 27)


@pytest.mark.parametrize("name", suite.names())
def test_the_benchmarks_compile_loads_the_peer_built_ahead(name, tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    spec = suite.load(name).spec
    shape, dtype = _sweep_shape(name), spec.dtypes[0]
    built = peer_builds.build_ahead([(name, shape, dtype, "default")], deadline_s=300)
    assert (built.built, built.failed) == (1, []), built.line()
    # the launch configurations Inductor times at a kernel's first call are the worker's to pick
    assert not list((tmp_path / "inductor").rglob("*.best_config"))
    from torch._dynamo.utils import counters

    counters.clear()
    peer = measure_peer(None, name, shape, dtype, "default", "compile")
    assert peer.status == "ok", peer.message
    hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
    assert hits >= 1 and counters["inductor"]["fxgraph_cache_miss"] == 0, dict(counters)
