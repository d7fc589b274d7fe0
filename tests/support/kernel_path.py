"""A directory on ASTRA_KERNELS_PATH for one test, the loaded kernels forgotten before and after (so a
folder of one test is never another's), and SGLang's wheels for `astra import-sglang`."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels import suite

# The versions the importer was written against: sglang pins apache-tvm-ffi==0.1.11.
SGLANG_PINS = ("sglang==0.5.23", "apache-tvm-ffi==0.1.11")


def on_kernel_path(monkeypatch, root: Path) -> Iterator[Path]:
    """For a fixture: `yield from on_kernel_path(monkeypatch, root)`."""
    monkeypatch.setenv(suite.KERNELS_PATH, str(root))
    suite.load.cache_clear()
    yield root
    suite.load.cache_clear()


def sglang_wheels(request) -> list[Path]:
    """The two wheels, fetched once into pytest's cache (about 40 MB; without the cache plugin, a
    folder under the temporary directory); the test skips when the index is out of reach."""
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider (scripts/gpu_check.sh)
    folder = Path(cache.mkdir("sglang-wheels")) if cache else Path(tempfile.gettempdir()) / "astra-sglang-wheels"
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob("*.whl"))
    if len(found) < len(SGLANG_PINS):
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder),
                            *SGLANG_PINS], check=True, capture_output=True, text=True, timeout=600)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            pytest.skip(f"cannot fetch {' '.join(SGLANG_PINS)} from the package index: "
                        f"{getattr(exc, 'stderr', '') or exc}")
        found = sorted(folder.glob("*.whl"))
    return found


def import_sglang(dest: Path, wheels: list[Path]) -> Path:
    """`astra import-sglang DEST --from` each wheel."""
    assert cli.main(["import-sglang", str(dest), *(a for w in wheels for a in ("--from", str(w))), "--json"]) == 0
    return dest
