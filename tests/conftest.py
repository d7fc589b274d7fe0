"""Shared fixtures: a private compile cache per test session, a user kernel directory, and the GPU
marker's skip."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Tests never read or pollute the user's cache; spawned workers inherit the variable."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ASTRA_CACHE_DIR", str(tmp_path_factory.mktemp("astra-cache")))
    yield
    mp.undo()


@pytest.fixture
def kernels_path(tmp_path, monkeypatch):
    """An empty user directory on ASTRA_KERNELS_PATH; the loaded kernels forgotten before and after."""
    from astra_kernels import suite

    root = tmp_path / "mine"
    root.mkdir()
    monkeypatch.setenv(suite.KERNELS_PATH, str(root))
    suite.load.cache_clear()
    yield root
    suite.load.cache_clear()


def pytest_collection_modifyitems(config, items):
    from astra_kernels.tools.toolchain.driver import gpu_available

    if any("gpu" in item.keywords for item in items) and not gpu_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible to the driver here)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
