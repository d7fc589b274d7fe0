"""Results stores recorded on real GPUs, shipped inside the package.

A replay (`--replay`, the notebooks, LangGraph Studio, CI) must find real measurements on a
machine that has only the installed package, not this repository; so the recordings live under
`recorded/<device>-<date>/<kernel>.sqlite.gz` as package data, and `resolve` lets a user write
`--replay recorded` (the newest recording of the kernel) or `recorded:h200-2026-11-23` instead
of a path. Every number read from them was measured on the GPU their folder names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from astra_kernels.tools.errors import AstraError

PREFIX = "recorded"


@dataclass(frozen=True)
class Recording:
    kernel: str
    session: str  # "<device>-<date>", e.g. "h200-2026-11-23"
    path: Path


def _root() -> Path:
    return Path(str(resources.files("astra_kernels.kernels_sglang").joinpath(PREFIX)))


def session_age(session: Path) -> tuple[str, str, str]:
    """A session folder's sort key: its date (the name's "-YYYY-MM-DD" end), the letter after it
    of a later session of that day (h200-2026-11-26b), then its name, so an h100 recording of a
    later day or session is newer than an h200 one of an earlier one (by name alone, every
    "h100-..." sorted before every "h200-...")."""
    dated = re.search(r"(\d{4}-\d{2}-\d{2})([a-z]?)$", session.name)
    return (dated.group(1), dated.group(2), session.name) if dated else ("", "", session.name)


def shipped() -> list[Recording]:
    """Every recording here, oldest session first (by the date its folder names): a checkout holds
    every session, an installed wheel the newest of each kernel per GPU kind (pyproject.toml)."""
    root = _root()
    if not root.is_dir():
        return []
    return [Recording(store.name.removesuffix(".sqlite.gz"), session.name, store)
            for session in sorted((s for s in root.iterdir() if s.is_dir()), key=session_age)
            for store in sorted(session.glob("*.sqlite.gz"))]


def find(kernel: str, session: str | None = None) -> Recording:
    """The newest shipped recording of `kernel` (or the one of `session`); names what exists if none."""
    matches = [r for r in shipped() if r.kernel == kernel and (session is None or r.session == session)]
    if not matches:
        have = ", ".join(f"{r.session}/{r.kernel}" for r in shipped()) or "none"
        where = f" from {session}" if session else ""
        raise AstraError(f"no shipped recording of {kernel}{where}; shipped recordings: {have}. "
                         "Record one with `astra tune KERNEL` on a GPU and pass its results store as --replay STORE")
    return matches[-1]


def resolve(spec: str, kernel: str) -> Path:
    """`--replay`'s argument as a store path: `recorded`, `recorded:SESSION` or a file path."""
    if spec == PREFIX or spec.startswith(PREFIX + ":"):
        session = spec.partition(":")[2] or None
        return find(kernel, session).path
    return Path(spec)
