"""An on-disk cache of compiled modules, so a repeated compile costs a file read.

The key covers everything that changes the binary: the source, every option, the target arch,
the NVRTC version and the header directory. Entries are written to a temporary name and renamed,
so parallel compilers and a killed process never leave a half-written entry behind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path


def default_cache_dir() -> Path:
    root = os.environ.get("ASTRA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "astra-kernels"
    )
    return Path(root) / "compile"


def default_cache() -> "CompileCache | None":
    """The on-disk cache at default_cache_dir() (read at each call: ASTRA_CACHE_DIR may change
    within a process), or None where that folder cannot be made or written (a read-only HOME,
    ASTRA_CACHE_DIR under a file): a cache is only a saving, so every compile then runs from
    scratch, said once per process and folder on stderr, instead of ending the command in a
    traceback from the first compile."""
    return _writable(str(default_cache_dir()))


@functools.cache
def _writable(directory: str) -> "CompileCache | None":
    cache = CompileCache(directory)
    try:
        cache.directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=cache.directory, prefix=".tmp-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        print(f"warning: the compile cache {cache.directory} cannot be written ({exc.strerror or exc}): every "
              "compile runs from scratch; set ASTRA_CACHE_DIR to a folder that can be", file=sys.stderr, flush=True)
        return None
    return cache


def cache_key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


class CompileCache:
    """Maps a key to (metadata JSON, binary blob) under one directory."""

    def __init__(self, directory: Path | str | None = None):
        self.directory = Path(directory) if directory else default_cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.directory / key[:2]
        return folder / f"{key}.json", folder / f"{key}.bin"

    def get(self, key: str) -> tuple[dict, bytes] | None:
        meta_path, blob_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            blob = blob_path.read_bytes()
        except (OSError, ValueError):
            return None
        if hashlib.sha256(blob).hexdigest() != meta.get("blob_sha256"):
            return None
        return meta, blob

    def put(self, key: str, meta: dict, blob: bytes) -> None:
        meta_path, blob_path = self._paths(key)
        meta = {**meta, "blob_sha256": hashlib.sha256(blob).hexdigest()}
        try:
            meta_path.parent.mkdir(parents=True, exist_ok=True)
            # Blob first, metadata last: a reader that sees the metadata sees a complete blob.
            for path, data in ((blob_path, blob), (meta_path, json.dumps(meta).encode())):
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
                try:
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(data)
                    os.replace(tmp, path)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except OSError:  # a full disk, a folder gone read-only: the compile stands, uncached
            return
