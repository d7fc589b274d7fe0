"""The agent's checkpoints on disk: read back in strict mode, and never holding a secret.

A checkpoint file is input like any other. With LangGraph's default serializer, whoever can write
one can make the run that resumes from it import and call whatever the file names: a pickle
(when the pickle fallback is on) or a msgpack constructor record of any module (allowed, with a
warning, in langgraph-checkpoint 4). The agent's state is plain JSON by design (nodes/state.py),
so it needs none of that: this saver reads only msgpack, builds only the types on LangGraph's
safe list (its interrupts and commands among them; anything else comes back as inert data and
is logged as blocked) and refuses any other format, pickles included, with an error naming it.

LangGraph also copies every string of `configurable` into each checkpoint's metadata, so a key
passed that way (a common LangChain pattern) would be written to disk in clear; such entries
are left out of what the saver writes.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from astra_kernels.redaction import redact
from astra_kernels.tools.errors import AstraError

READABLE = ("null", "bytes", "bytearray", "msgpack")  # what LangGraph writes; json is a legacy format
_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|credential|authorization")


class CheckpointError(AstraError):
    """A checkpoint file that cannot be read, or holds what strict mode refuses."""


class StrictSerializer(JsonPlusSerializer):
    """No pickle fallback, no JSON constructors, msgpack constructors for the safe types only."""

    def __init__(self):
        super().__init__(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None)

    def loads_typed(self, data: tuple[str, bytes]):
        kind = data[0]
        if kind not in READABLE:
            raise CheckpointError(f"a checkpoint value is stored as {kind!r}; strict mode reads only "
                                  f"{', '.join(READABLE)} (a pickle is never loaded)")
        return super().loads_typed(data)


class _SecretFreeSaver(SqliteSaver):
    def put(self, config, checkpoint, metadata, new_versions):
        configurable = {k: v for k, v in config.get("configurable", {}).items()
                        if not (isinstance(v, str) and (_SECRET_NAME.search(k) or redact(v) != v))}
        return super().put({**config, "configurable": configurable}, checkpoint, metadata, new_versions)


def sqlite_checkpointer(path: str | Path) -> SqliteSaver:
    """A SQLite saver on `path` with the strict serializer; CheckpointError names a file that is
    not a database instead of failing at the first step."""
    if Path(path).is_dir():  # sqlite's own word for it is "unable to open database file"
        raise CheckpointError(f"checkpoints {path}: a directory, not a checkpoint file; pass --checkpoints "
                              "a file's path (it is made if it is not there)")
    try:
        connection = sqlite3.connect(path, check_same_thread=False)
    except sqlite3.Error as exc:  # under a file, or a folder that cannot be written
        raise CheckpointError(f"checkpoints {path}: {exc}; pass --checkpoints a file in a folder that can be "
                              "written") from exc
    try:
        connection.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise CheckpointError(f"checkpoints {path}: {exc} (a damaged or foreign file is left as it is; "
                              "move it aside or pass --checkpoints elsewhere)") from exc
    return _SecretFreeSaver(connection, serde=StrictSerializer())
