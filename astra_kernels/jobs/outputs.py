"""Output folders that no run loses: one run at a time, and a failed run replaces nothing.

`astra tune --out D` run twice at once used to let both write D and the last one win, with both
exiting 0; and a failed run (nothing measured, a table that failed its checks) wrote its files
over a good result. So a command that writes a folder holds `held(D)` for the whole run (a second
run is refused at once, in one line, rather than waiting behind it or mixing its files in), and
writes its files into a staging folder first (`staged(D)`), moving each into place with
os.replace, which no reader ever sees half done, only once the run has succeeded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from astra_kernels.tools.errors import AstraError

try:
    import fcntl
except ImportError:  # not on Windows, where the project's CUDA tooling does not run either
    fcntl = None

LOCK = ".astra.lock"  # in the output folder, while a run holds it (docs/cli.md)


class FolderBusyError(AstraError):
    """Another run holds the output folder."""


@contextlib.contextmanager
def held(folder: str | Path, what: str = "run") -> Iterator[Path]:
    """Hold `folder` (made if missing) for this run, or raise FolderBusyError naming it.

    The lock is flock() on `folder/.astra.lock`, taken without waiting: the kernel lets it go when
    the holder exits in whatever way, so a killed run never leaves the folder locked. The file is
    removed on the way out (taking the lock checks it is still the file at that path, so a run that
    opened it just before it was removed tries again rather than holding a lock no one else sees),
    and so is the folder, where holding it made it and the run wrote nothing there."""
    folder = Path(folder)
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # the folders holding it makes
    # a file of that name, or one above it: the OSError names the path, and the CLI says which part is the file
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield folder
        return
    path = folder / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 100).decode(errors="replace").strip()
            os.close(fd)
            raise FolderBusyError(
                f"another astra run{f' (pid {holder})' if holder.isdigit() else ''} is writing to {folder}: "
                f"wait for it to finish, or give this {what} another output folder") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield folder
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        for made_here in made:  # innermost first; one not empty (the run wrote there) stays, with those above
            try:
                made_here.rmdir()
            except OSError:
                break


@contextlib.contextmanager
def staged(folder: str | Path) -> Iterator[Path]:
    """A fresh staging folder inside `folder` (so os.replace moves within one file system), gone
    on the way out with whatever was not moved from it."""
    stage = Path(folder) / f".astra-staging-{uuid.uuid4().hex[:12]}"
    stage.mkdir(parents=True)
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish(files: list[Path], folder: str | Path) -> list[Path]:
    """Move each of `files` (in a staging folder) into `folder`, each replacing its namesake in one
    step; returns where they went."""
    folder = Path(folder)
    moved = []
    for file in files:
        target = folder / file.name
        os.replace(file, target)
        moved.append(target)
    return moved


def write_whole(path: str | Path, text: str) -> Path:
    """`text` into `path`, replacing it in one step (a temporary file beside it, then os.replace): a
    run stopped mid-write (a time limit's SIGTERM, Ctrl-C) leaves the file as it was, never empty
    or torn; `astra bench --resume` keeps every earlier call's rows in that one file."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def holds_any(folder: str | Path, names: list[str]) -> bool:
    """Whether `folder` holds a file of one of these names (an earlier run's result)."""
    return any((Path(folder) / name).exists() for name in names)
