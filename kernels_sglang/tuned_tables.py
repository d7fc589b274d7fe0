"""The dispatch tables shipped with the suite, one folder per GPU kind: tuned/<kind>/<kernel>.json.

Which kinds are shipped, which kind a device is, and where a kernel's table for a kind lives:
`astra bench` reads the table of the GPU it runs on, `astra export --gpu-kind` the one it is
given. Reading a file into a DispatchTable belongs to the run-time (astra_kernels/runtime).
"""

from __future__ import annotations

from pathlib import Path

TUNED_DIR = Path(__file__).parent / "tuned"


def gpu_kinds() -> list[str]:
    """The GPU kinds tables are shipped for, as their folder names (h100, h200)."""
    return sorted(p.name for p in TUNED_DIR.iterdir() if p.is_dir())


def device_key(name: str) -> str | None:
    """The short name shipped tables and docs/kernels.md's anchors use for a GPU, if it is one of theirs."""
    for key in ("H200", "H100"):
        if key in name:
            return key
    return None


def table_path(kernel: str, kind: str) -> Path:
    """Where the table of `kernel` for GPU kind `kind` is (or would be) shipped."""
    return TUNED_DIR / kind.lower() / f"{kernel}.json"
