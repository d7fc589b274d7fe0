"""The SQLite results store: every evaluated candidate, so re-runs reuse it and reports read it.

A row is keyed by a hash of everything that decides the measurement (evaluation_key), holds the
full EvaluationResult as JSON, and copies the figures reports sort and filter on into indexed
columns. Tuner workers in several processes write to one file at once: WAL mode lets readers and
one writer proceed together, the busy timeout queues writers instead of failing them, and each
write is its own short transaction, so a killed process loses at most the row it was writing.
A file that is not this store is an error, never overwritten: it may hold someone's results.
The store keeps only what callers hand it and reads nothing from the environment, so no secret
can reach it by accident.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.toolchain.nvrtc import folder_digest
from .evaluation import EvaluationRequest, EvaluationResult

SCHEMA_VERSION = 1
DEVICE_FACTS = "device_facts:"  # a meta row's name prefix: the facts recorded about one GPU (device_facts)
BUSY_TIMEOUT_MS = 30_000

# (column, SQL type); every column but `result` is also a filter for rows() and count().
_COLUMNS = [
    ("key", "TEXT PRIMARY KEY"), ("kernel", "TEXT"), ("which", "TEXT"), ("config", "TEXT"),
    ("shape", "TEXT"), ("dtype", "TEXT"), ("variant", "TEXT"), ("device", "TEXT"), ("arch", "TEXT"),
    ("status", "TEXT"), ("median_us", "REAL"), ("spread", "REAL"),
    ("fraction_of_copy_bandwidth", "REAL"), ("registers", "INTEGER"), ("spills", "INTEGER"),
    ("occupancy", "INTEGER"), ("source_sha256", "TEXT"), ("run_id", "TEXT"), ("created_at", "TEXT"),
    ("result", "TEXT"),
]
_NAMES = [name for name, _ in _COLUMNS]
_FILTERS = set(_NAMES) - {"result"}
_JSON_COLUMNS = ("config", "shape")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results ({", ".join(f"{n} {t}" for n, t in _COLUMNS)});
CREATE INDEX IF NOT EXISTS results_lookup ON results (kernel, dtype, variant, device, status);
CREATE INDEX IF NOT EXISTS results_run ON results (run_id);
CREATE INDEX IF NOT EXISTS results_created ON results (created_at);
"""


class ResultsStoreError(AstraError):
    """The results file is unreadable, corrupt, foreign, or from a newer schema."""


def _canonical(value) -> str:
    """One spelling per value, so equal configs and shapes hash and compare equal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))  # numpy scalars


def evaluation_key(request: EvaluationRequest, device: str) -> str:
    """Hash what decides the measurement; the case factory is named by the problem's label and
    parameters (its object identity differs in every process)."""
    problem, launch = request.problem, request.launch
    # Parsed and re-dumped with sorted keys: defines in another order build the same binary.
    options = json.loads(request.options.model_dump_json())
    # A build of the suite's kind (NVRTC, no included folders) keys as before those options existed,
    # so every measurement recorded before stays valid; included folders key by their contents.
    if options.pop("compiler") != "nvrtc":
        options["compiler"] = request.options.compiler
    if included := options.pop("include_dirs"):
        options["includes"] = [folder_digest(d) for d in included]
    parts = {
        "source": request.source, "kernel": request.kernel,
        "options": options,
        "launch": [list(launch.grid), list(launch.block), launch.shared_bytes],
        "problem": problem.label,
        "params": [[p.name, p.role, p.dtype, list(p.shape), p.value] for p in problem.params],
        "seeds": list(request.seeds), "check": request.check, "time": request.time,
        "replays": request.replays, "layout": request.input_layout, "device": device,
    }
    if request.pdl:  # only then: keys of every measurement recorded before PDL existed stay valid
        parts["pdl"] = True
    if request.l2 != "cold":  # likewise for the L2 regime
        parts["l2"] = request.l2
    if request.retime:  # a finalist's re-timing is a measurement of its own; unset, keys are as before
        parts["retime"] = request.retime
    return hashlib.sha256(_canonical(parts).encode()).hexdigest()


class ResultsStore:
    """One SQLite file of evaluation results, safe to share between processes."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        """`read_only`: for a reader (a report), which must neither create the schema nor switch
        the journal, and whose errors on a damaged file are then about reading it, as they are."""
        self.path = Path(path)
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not bound to its creating thread: a graph's nodes may run on another thread than the one
        # that opened the store, and the process closes it at exit. Threads may share it (a
        # cluster's driver searches several shapes at once): each use holds the lock, so one
        # connection never interleaves two transactions.
        self._lock = threading.RLock()
        target = f"{self.path.resolve().as_uri()}?mode=ro" if read_only else self.path
        self._db = sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False, uri=read_only)
        try:
            with self._guard("read" if read_only else "open"):
                self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._refuse_foreign()
                if read_only:
                    self._check_version()
                else:
                    self._use_wal()
                    self._setup()
        except BaseException:
            self._db.close()
            raise

    def _use_wal(self) -> None:
        """WAL persists in the file, so only the first opener switches; the switch fails at once
        (no busy handler) while another fresh opener holds the file, hence the retry."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _refuse_foreign(self) -> None:
        """Before anything writes (even the switch to WAL), so a foreign file stays untouched."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and not {"meta", "results"} <= tables:
            raise ResultsStoreError(f"{self.path} is an SQLite database but not a results store "
                                    f"(it has tables {sorted(tables)}); it is left as it is")

    def _setup(self) -> None:
        with self._write():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        self._check_version()

    def _check_version(self) -> None:
        version = self.schema_version
        if version != SCHEMA_VERSION:
            raise ResultsStoreError(f"{self.path} has results schema version {version}; this code "
                                    f"reads version {SCHEMA_VERSION}")

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """SQLite says 'file is not a database' without saying which file; this does. Holds the
        store's lock for the whole use (a write's transaction included)."""
        try:
            with self._lock:
                yield
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, read-only
            raise ResultsStoreError(f"results store {self.path}: {doing} failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise ResultsStoreError(f"results store {self.path}: {doing} failed: {exc} "
                                    "(a corrupt or foreign file is left as it is; move it aside)") from exc

    @contextmanager
    def _write(self) -> Iterator[None]:
        """BEGIN IMMEDIATE takes the write lock up front, so waiting happens in the busy
        handler rather than as a deadlock-error halfway through."""
        with self._guard("write"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @property
    def schema_version(self) -> int | None:
        with self._guard("read"):
            row = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        return int(row[0]) if row else None

    def put(self, key: str, request: EvaluationRequest, result: EvaluationResult, *, kernel: str = "",
            which: str = "", config: dict | None = None, shape: dict | None = None, dtype: str = "",
            variant: str = "", run_id: str = "") -> None:
        """Insert or replace: re-measuring a candidate supersedes its old figures."""
        timing, info = result.timing, result.kernel_info
        row = {
            "key": key, "kernel": kernel, "which": which, "config": _canonical(config or {}),
            "shape": _canonical(shape or {}), "dtype": dtype, "variant": variant,
            "device": result.device, "arch": result.arch, "status": result.status,
            "median_us": timing.median_us if timing else None,
            "spread": timing.spread if timing else None,
            "fraction_of_copy_bandwidth": result.fraction_of_copy_bandwidth,
            "registers": info.resources.registers if info else None,
            "spills": int(info.resources.spills) if info else None,
            "occupancy": result.occupancy_blocks_per_sm,
            "source_sha256": hashlib.sha256(request.source.encode()).hexdigest(),
            "run_id": run_id, "created_at": datetime.now(UTC).isoformat(),
            "result": result.model_dump_json(),
        }
        with self._write():
            self._db.execute(f"INSERT OR REPLACE INTO results ({', '.join(_NAMES)}) "
                             f"VALUES ({', '.join('?' * len(_NAMES))})", [row[n] for n in _NAMES])

    def move(self, moves: list[tuple[str, str, dict, EvaluationRequest, EvaluationResult]]) -> None:
        """Rewrite rows under new keys, in one transaction: each (old key, new key, configuration,
        request, result) keeps its row's measurement, device, run and date, and takes the new
        key, configuration, source digest and result (its label). For a recording carried over a
        template change that compiles every recorded configuration to the same binary
        (scripts/rekey_recording.py, which proves that first); a key that holds no row, or a new
        key already taken, is a ResultsStoreError and nothing is written."""
        with self._write():
            for old, new, config, request, result in moves:
                if new != old and self._db.execute("SELECT 1 FROM results WHERE key = ?", (new,)).fetchone():
                    raise ResultsStoreError(f"results store {self.path}: key {new} is already taken")
                changed = self._db.execute(
                    "UPDATE results SET key = ?, config = ?, source_sha256 = ?, result = ? WHERE key = ?",
                    (new, _canonical(config), hashlib.sha256(request.source.encode()).hexdigest(),
                     result.model_dump_json(), old)).rowcount
                if changed != 1:
                    raise ResultsStoreError(f"results store {self.path}: no row under key {old}")

    def device_facts(self, device: str) -> dict:
        """What was recorded beside the measurements about the GPU named `device`
        (record_device_facts): its multiprocessors, its launch floor, where each came from; {}
        where nothing was. A replay reads them, so a recording judges its shapes as the run did."""
        with self._guard("read"):
            row = self._db.execute("SELECT value FROM meta WHERE name = ?", (DEVICE_FACTS + device,)).fetchone()
        if row is None:
            return {}
        try:
            facts = json.loads(row[0])
        except ValueError:
            raise ResultsStoreError(f"{self.path}: the facts recorded about {device} are not JSON") from None
        if not isinstance(facts, dict):
            raise ResultsStoreError(f"{self.path}: the facts recorded about {device} are not a JSON object")
        return facts

    def record_device_facts(self, device: str, facts: dict) -> None:
        """Keep `facts` about the GPU named `device` with the store, over those recorded before."""
        merged = {**self.device_facts(device), **facts}
        with self._write():
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (DEVICE_FACTS + device, json.dumps(merged)))

    def has(self, key: str) -> bool:
        """Whether a result is stored under `key` (without reading it)."""
        with self._guard("read"):
            return self._db.execute("SELECT 1 FROM results WHERE key = ?", (key,)).fetchone() is not None

    def get(self, key: str) -> EvaluationResult | None:
        with self._guard("read"):
            row = self._db.execute("SELECT result FROM results WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        with self._damaged_row(key):
            return EvaluationResult.model_validate_json(row[0])

    @contextmanager
    def _damaged_row(self, key: str) -> Iterator[None]:
        """A file cut short can still open and pass SQLite's checks: its last page reads back
        zero-filled, so a row's JSON breaks off. Name the file and the row."""
        try:
            yield
        except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError alike
            raise ResultsStoreError(f"results store {self.path}: row {key} is damaged "
                                    f"({str(exc).splitlines()[0][:200]}); the file is left as it is") from exc

    def _where(self, filters: dict) -> tuple[str, list]:
        unknown = set(filters) - _FILTERS
        if unknown:
            raise ValueError(f"cannot filter results on {sorted(unknown)}; filters are {sorted(_FILTERS)}")
        values = [_canonical(v) if n in _JSON_COLUMNS else v for n, v in filters.items()]
        clause = " AND ".join(f"{n} IS ?" for n in filters)
        return (f" WHERE {clause}" if clause else ""), values

    def rows(self, **filters) -> list[dict]:
        """Rows matching every equality filter, oldest first; config, shape and the full result
        come back as dicts, so a report needs no second query."""
        where, values = self._where(filters)
        with self._guard("read"):
            cursor = self._db.execute(f"SELECT {', '.join(_NAMES)} FROM results{where} "
                                      "ORDER BY created_at, rowid", values)
            found = [dict(zip(_NAMES, r)) for r in cursor]
        for row in found:
            with self._damaged_row(row["key"]):
                for name in _JSON_COLUMNS:
                    row[name] = json.loads(row[name])
                row["result"] = json.loads(row["result"])
            row["spills"] = None if row["spills"] is None else bool(row["spills"])
        return found

    def count(self, **filters) -> int:
        where, values = self._where(filters)
        with self._guard("read"):
            return self._db.execute(f"SELECT COUNT(*) FROM results{where}", values).fetchone()[0]

    def best(self, kernel: str, shape: dict, dtype: str, variant: str, device: str,
             which: str | None = None) -> dict | None:
        """The fastest correct candidate measured so far; incorrect or untimed rows never win."""
        filters = {"kernel": kernel, "shape": shape, "dtype": dtype, "variant": variant,
                   "device": device, "status": "ok"}
        if which is not None:
            filters["which"] = which
        where, values = self._where(filters)
        with self._guard("read"):
            row = self._db.execute(f"SELECT key FROM results{where} AND median_us IS NOT NULL "
                                   "ORDER BY median_us, created_at LIMIT 1", values).fetchone()
        return self.rows(key=row[0])[0] if row else None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
