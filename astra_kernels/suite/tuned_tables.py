"""The dispatch tables shipped with the suite, one folder per GPU kind: tuned/<kind>/<kernel>.json
for tables tuned with cold L2 (rotating inputs), tuned/<kind>/warm/<kernel>.json for tables tuned
with warm L2 (inputs resident, as when the previous op has just written them).

One table per regime because the two rank configurations differently at shapes whose inputs fit
in L2, and a kernel cannot tell at launch which regime it runs in: the user, who knows where the
kernel sits in the model, picks the table (`astra export --l2`).

Which kinds are shipped, which kind a device is, and where a kernel's table for a kind and regime
lives: `astra bench` reads the table of the GPU it runs on and the regime it times, `astra export
--gpu-kind` the one it is given. Reading a file into a DispatchTable belongs to the run-time
(astra_kernels/runtime).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from astra_kernels.tools.measuring.regimes import L2_REGIMES

TUNED_DIR = Path(str(resources.files("astra_kernels.kernels_sglang").joinpath("tuned")))  # data, in kernels_sglang/
REGIMES = L2_REGIMES  # cold tables sit in the kind's folder itself, warm ones in its warm/


def gpu_kinds() -> list[str]:
    """The GPU kinds tables are shipped for, as their folder names (h100, h200)."""
    return sorted(p.name for p in TUNED_DIR.iterdir() if p.is_dir())


def regime_folder(kind: str, l2: str = "cold") -> Path:
    """The folder of the tables of GPU kind `kind` tuned in L2 regime `l2`."""
    if l2 not in REGIMES:
        raise ValueError(f"unknown L2 regime {l2!r}: {' or '.join(REGIMES)}")
    folder = TUNED_DIR / kind.lower()
    return folder if l2 == "cold" else folder / l2


def preferred_regimes(l2: str) -> tuple[str, ...]:
    """The regimes whose table stands in for one tuned in `l2`, best first: `l2` itself, then the
    other (a table tuned in the other regime still runs correctly, only its picks may be slower)."""
    return (l2, *(r for r in REGIMES if r != l2))


def shipped_kernels(kind: str, l2: str = "cold") -> list[str]:
    """The kernels whose table for `kind` and regime `l2` is shipped."""
    return sorted(p.stem for p in regime_folder(kind, l2).glob("*.json"))


def device_key(name: str) -> str | None:
    """The short name shipped tables and docs/kernels.md's anchors use for a GPU, if it is one of theirs."""
    for key in ("H200", "H100"):
        if key in name:
            return key
    return None


def same_kind(tuned_on: str | None, device: str) -> bool:
    """Whether a table tuned on `tuned_on` (a table's tuned_on: "NVIDIA H200 (sm_90)") is of the
    GPU kind of `device` (a GPU's name): by the shipped kinds' short names where either is one of
    them, as the shipped tables are looked up (an H100 PCIe runs the H100's); else by the name. A
    table that does not say where it was tuned is taken as it is."""
    if not tuned_on:
        return True
    gpu = re.sub(r"\s*\(sm_\w+\)$", "", tuned_on)
    key, here = device_key(gpu), device_key(device)
    return key == here if key or here else gpu == device


def table_path(kernel: str, kind: str, l2: str = "cold") -> Path:
    """Where the table of `kernel` for GPU kind `kind`, tuned in L2 regime `l2`, is (or would be) shipped."""
    return regime_folder(kind, l2) / f"{kernel}.json"
