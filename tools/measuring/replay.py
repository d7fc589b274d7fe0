"""A worker with no GPU behind it: it answers evaluations from a recorded results store.

Every number the project reports comes from a real GPU, but notebooks, LangGraph Studio, CI and
a laptop have none. A results store written by a GPU run (`astra tune`, `astra optimize`) holds
real measurements, each with its device and date; replaying it lets the tuner, the dispatch
table and the agent walk their whole logic anywhere. The store is consulted first by
`StoredEvaluator`, so what reaches this worker is exactly what the recording lacks: it is refused
with status "unrecorded", never estimated, and never written back as a measurement.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
import zlib
from pathlib import Path

from astra_kernels.tools.errors import AstraError, WorkerError
from astra_kernels.tools.toolchain.compile_cache import default_cache_dir
from .evaluation import EvaluationRequest, EvaluationResult
from .results import ResultsStore, evaluation_key
from .worker import NothingToStart


# The device facts a replay takes from its recording (ResultsStore.device_facts): none of them
# names the replay or its date, which the worker sets itself.
REPLAYED_FACTS = ("multiprocessors", "launch_floor_us", "launch_floor_from")


class ReplayWorker(NothingToStart):
    """Stands where an EvaluationWorker would; `device` is the recording's GPU."""

    def __init__(self, store_path: str | Path, device: str | None = None, recording: str | Path | None = None):
        """`recording` names where the store came from when `store_path` is a working copy of it."""
        self.store_path = Path(store_path)
        if not self.store_path.is_file():
            raise AstraError(f"no results store at {self.store_path} to replay")
        try:
            devices = self.recorded_devices(self.store_path)
        except sqlite3.DatabaseError as exc:
            raise AstraError(f"{recording or self.store_path} is not a readable results store ({exc})") from exc
        if not devices:
            raise AstraError(f"{self.store_path} holds no measurement to replay")
        if device is None and len(devices) > 1:
            raise AstraError(f"{self.store_path} holds measurements from {len(devices)} GPUs "
                             f"({', '.join(d for d, _ in devices)}); name one")
        chosen = [(d, a) for d, a in devices if device is None or d == device]
        if not chosen:
            raise AstraError(f"{self.store_path} has no measurement from {device!r}; it has "
                             + ", ".join(d for d, _ in devices))
        name, arch = chosen[0]
        # What the recording holds about the GPU beside its measurements (ResultsStore.device_facts:
        # its multiprocessors, its launch floor and where that was measured), so that a replay judges
        # its shapes against the floors as the run did. Without a multiprocessor count, callers fall
        # back to their default (132, an H100 or H200), and a candidate whose launch depends on it
        # differently simply finds no record.
        with ResultsStore(self.store_path, read_only=True) as store:
            facts = {k: v for k, v in store.device_facts(name).items() if k in REPLAYED_FACTS}
        self.device = {"name": name, "arch": arch, "replay": str(recording or self.store_path), **facts,
                       **({"recorded": when} if (when := self.recorded_date(self.store_path, name)) else {})}
        self.restarts = 0
        self._answers_from: ResultsStore | None = None

    def answers(self, request: EvaluationRequest) -> bool:
        """Whether this replay holds a measurement of `request`. A search over a replay asks it of
        each configuration before compiling any, so it compiles the few hundred configurations a
        recording holds, not the thousands of the space it would answer "unrecorded" (rmsnorm's
        two-shape agent replay: 2,000 compiles and two minutes on 2 cores, before)."""
        if self._answers_from is None:
            self._answers_from = ResultsStore(self.store_path)
        return self._answers_from.has(evaluation_key(request, self.device["name"]))

    def close(self) -> None:
        if self._answers_from is not None:
            self._answers_from.close()
            self._answers_from = None

    @classmethod
    def from_recording(cls, recording: str | Path, store_path: str | Path,
                       device: str | None = None) -> "ReplayWorker":
        """A replay over a working copy of `recording` (a store, or one gzipped as shipped) at
        `store_path`, the run's own store: the recording itself is never opened for writing.

        A store already at `store_path` is replaced only when the recording holds every result it
        holds (an earlier copy of it): a GPU run's measurements, or a file that is not a results
        store, are refused, never overwritten.
        """
        recording, store_path = Path(recording), Path(store_path)
        if not recording.is_file():
            raise AstraError(f"no results store at {recording} to replay")
        if store_path.exists() and store_path.resolve() == recording.resolve():
            raise AstraError(f"{store_path} is the recording itself; a replay works on a copy, so give it "
                             "another results path")
        store_path.parent.mkdir(parents=True, exist_ok=True)
        # Copied beside the target and renamed into place: a reader of an earlier copy keeps its
        # file, and no half-written store is ever at `store_path`.
        fresh = store_path.with_name(f".{store_path.name}.{uuid.uuid4().hex}.copy")
        try:
            opener = gzip.open if recording.suffix == ".gz" else open
            try:
                with opener(recording, "rb") as source, open(fresh, "xb") as target:
                    shutil.copyfileobj(source, target)
                with contextlib.closing(sqlite3.connect(fresh)) as db:  # a damaged recording must not
                    db.execute("SELECT count(*), max(result) FROM results").fetchone()  # replace a good copy
            except (gzip.BadGzipFile, EOFError, zlib.error, sqlite3.DatabaseError) as exc:
                raise AstraError(f"{recording} is not a readable results store ({exc}); "
                                 "it is left as it is") from exc
            if store_path.exists():
                _refuse_to_lose(store_path, fresh, recording)
            os.replace(fresh, store_path)
        except BaseException:
            for path in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
                path.unlink(missing_ok=True)
            raise
        for leftover in ("-wal", "-shm"):  # the replaced store's journal would be applied to the copy
            Path(f"{store_path}{leftover}").unlink(missing_ok=True)
        return cls(store_path, device=device, recording=recording)

    @staticmethod
    def recorded_devices(path: Path) -> list[tuple[str, str]]:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return [tuple(r) for r in db.execute(
                "SELECT DISTINCT device, arch FROM results WHERE device != '' ORDER BY device")]

    @staticmethod
    def recorded_date(path: Path, device: str) -> str | None:
        """The day (UTC) of the recording's last measurement on `device`: when its times were
        measured, for a report that would otherwise date them the day they were replayed."""
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            last = db.execute("SELECT max(created_at) FROM results WHERE device = ?", (device,)).fetchone()[0]
        return str(last)[:10] if last else None

    def evaluate(self, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        return EvaluationResult(
            status="unrecorded", label=request.label, kernel=request.kernel, device=self.device["name"],
            arch=self.device["arch"], bytes_moved=request.problem.bytes_moved,
            message=f"{self.store_path} has no measurement of this candidate on {self.device['name']}; "
                    "a replay answers only what a GPU run recorded")

    def call(self, function, *args, timeout_s: float | None = None):
        raise WorkerError(f"a replay of {self.store_path} runs nothing on a GPU ({getattr(function, '__name__', function)})")


def _refuse_to_lose(existing: Path, copy: Path, recording: Path) -> None:
    """Raise unless every result in `existing` is also in `copy` (so replacing it loses nothing)."""
    with contextlib.closing(sqlite3.connect(copy)) as db:
        try:
            db.execute("ATTACH DATABASE ? AS existing", (str(existing),))
            tables = {r[0] for r in db.execute("SELECT name FROM existing.sqlite_master WHERE type = 'table'")}
            if not tables:
                return  # an empty file: nothing to lose
            if "results" not in tables:
                raise AstraError(f"{existing} is not a results store (tables {sorted(tables)}); a replay of "
                                 f"{recording} will not overwrite it: give the replay another results path")
            lost = db.execute("SELECT count(*) FROM existing.results "
                              "WHERE key NOT IN (SELECT key FROM main.results)").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise AstraError(f"{existing} is not a readable results store ({exc}); a replay of {recording} "
                             "will not overwrite it: give the replay another results path") from exc
    if lost:
        raise AstraError(f"{existing} holds {lost} result(s) that {recording} lacks (a GPU run's, or another "
                         "recording's); a replay will not overwrite them: give it another results path, or "
                         "delete that store")


class RecordedWorker(NothingToStart):
    """A stand-in GPU that answers each evaluation from a recording, as the GPU it recorded did.

    A ReplayWorker sits behind a working copy of the recording, which the StoredEvaluator consults
    first, so it is only ever asked what the recording lacks. This one is asked everything, by a
    caller whose own results store starts empty: a cluster's driver (tools/cluster/), whose store
    must end up holding what the workers answered. Its answers are the recording's own results,
    after `pace` times each one's recorded wall time (0: at once), so a replayed cluster keeps the
    GPU's share of the time and its evaluation rate can be measured on CPUs. The recording is read
    only; a gzipped one is read from its unpacked copy in the cache (unpacked_copy).
    """

    def __init__(self, recording: str | Path, device: str | None = None, pace: float = 0.0):
        recording = Path(recording)
        if pace < 0:
            raise ValueError(f"pace must be 0 or more, not {pace}")
        self.path = unpacked_copy(recording)
        self._replay = ReplayWorker(self.path, device=device, recording=recording)
        self.device = self._replay.device
        self.restarts = 0
        self.pace = pace
        self._store = ResultsStore(self.path, read_only=True)

    def close(self) -> None:
        self._store.close()

    def answers(self, request: EvaluationRequest) -> bool:
        """Whether the recording holds `request` (ReplayWorker.answers says why a search asks)."""
        return self._store.has(evaluation_key(request, self.device["name"]))

    def evaluate(self, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        found = self._store.get(evaluation_key(request, self.device["name"]))
        if found is None:
            refused = self._replay.evaluate(request)
            return refused.model_copy(update={"message": refused.message.replace(
                str(self._replay.store_path), self.device["replay"])})
        if self.pace:
            time.sleep(found.wall_seconds * self.pace)
        return found

    def call(self, function, *args, timeout_s: float | None = None):
        return self._replay.call(function, *args, timeout_s=timeout_s)


def recorded_devices(recording: str | Path) -> list[str]:
    """The GPUs (by name) whose measurements `recording` holds (a store, or one gzipped as shipped)."""
    try:
        return [name for name, _ in ReplayWorker.recorded_devices(unpacked_copy(Path(recording)))]
    except sqlite3.DatabaseError as exc:
        raise AstraError(f"{recording} is not a readable results store ({exc})") from exc


def unpacked_copy(recording: Path) -> Path:
    """`recording` itself, or for a gzipped one its unpacked copy under the cache folder, named by
    the packed file's hash: made once (whole, by a rename) and shared by every reader after, so
    replay workers in many processes, killed ones included, leave nothing behind in /tmp."""
    if recording.suffix != ".gz":
        return recording
    try:
        digest = hashlib.sha256(recording.read_bytes()).hexdigest()[:32]
    except OSError as exc:
        raise AstraError(f"cannot read the recording {recording} ({exc})") from exc
    folder = default_cache_dir().parent / "recordings"
    target = folder / f"{digest}.sqlite"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".sqlite")
    except OSError as exc:  # a read-only HOME, ASTRA_CACHE_DIR under a file
        raise AstraError(f"cannot unpack the recording {recording.name} into {folder} ({exc.strerror or exc}): "
                         "set ASTRA_CACHE_DIR to a folder that can be written") from exc
    os.close(handle)
    try:
        with gzip.open(recording, "rb") as source, open(name, "wb") as out:
            shutil.copyfileobj(source, out)
        os.replace(name, target)
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        raise AstraError(f"{recording} is not a readable results store ({exc})") from exc
    finally:
        Path(name).unlink(missing_ok=True)
    return target
