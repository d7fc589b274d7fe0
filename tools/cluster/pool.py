"""The cluster's GPUs as one pool of workers: an evaluation goes to an idle worker of its GPU kind.

One actor per GPU (host.py). Callers on many threads (a driver searching several shapes and
kernels at once) each call `evaluate` and block until a worker of the kind they tune for is free
and has answered; so work queued for the cluster goes to a GPU as one frees, and a lost
node's share simply goes to the others. Only measurements of one GPU kind are ever compared: a
caller holds a `KindView`, whose device is that kind's and whose evaluations go to it alone. A
worker draws each problem's inputs and reference (ahead, when a tune hands the pool its problems:
`prefetch`; else when it first meets it), so a problem goes back to the worker that drew it where
that is cheaper than drawing it again (`match`).

Faults. A kernel that faults or hangs is the actor's EvaluationWorker's to survive (its child
dies, the result says crashed or timeout, as it does locally). An actor that dies itself (its
process killed, its node gone) is found when its answer fails: a replacement actor is started in
the background wherever a GPU (and a CPU: CPUS_PER_GPU_WORKER) is free, and the evaluation it held
is asked again of another worker (KindView, LOST_RETRIES times) before it comes back as status "lost" (no verdict on the candidate,
so no results store keeps it and a re-run measures it). One
that cannot be placed within `start_timeout_s` (a node lost with its GPUs) is given up; when a
kind has no worker left and none starting, its callers get a WorkerError naming it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from astra_kernels.tools.errors import WorkerError
from astra_kernels.tools.measuring.evaluation import EvaluationRequest, EvaluationResult
from astra_kernels.tools.measuring.replay import unpacked_copy
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.measuring.worker import EVALUATION_TIMEOUT_S, NothingToStart
from .host import EvaluationHost
from .runtime import ray_module

# How long past the worker's own evaluation deadline the driver waits for an actor's answer: the
# worker kills a hung kernel itself, so an actor silent this long is itself stuck, and is replaced.
ANSWER_GRACE_S = 120.0
LOST_RETRIES = 2  # an evaluation whose worker was lost is asked again this many times
# A GPU worker's host share: its child process draws each problem's inputs and float64 reference
# (NumPy, seconds at the largest shapes: the bound of run G, docs/scaling.md) and launches, on a CPU
# (the checks, half of an evaluation on two H200s before, now run on the GPU: device_checks.py).
# Ray counts it against the node's CPUs, so the compile tasks
# (tools/cluster/compiling.py, one CPU each) leave a core per GPU worker; what that changes was not
# measured apart from the rest. A node needs a CPU per GPU for all its GPUs to get a worker. A
# replay worker only sleeps: it holds none.
CPUS_PER_GPU_WORKER = 1
# What drawing a problem's inputs and float64 reference on one core costs, in bytes kept a second
# (draws.draw_bytes): silu_and_mul 16384x28672's two draws, 11.3 GB, took 39 s on an H200's host
# (run G); a waiter for a problem drawn ahead by a busy worker takes another after that long.
DRAW_BYTES_PER_S = 290e6


@dataclass
class Slot:
    """One GPU's worker as the driver sees it."""

    index: int
    handle: object  # the Ray actor
    device: dict  # name, arch, multiprocessors, ..., host, gpu, pid
    doing: str = ""  # what it measures now ("" when idle)
    done: int = 0
    alive: bool = True
    replaces: int | None = None  # the slot whose lost actor this one replaced
    drawn: set[str] = field(default_factory=set)  # the problems (labels) whose draws its worker holds
    problem: str = ""  # the problem it evaluates now
    ahead: list = field(default_factory=list)  # (problem, seed) pairs its worker was asked to draw ahead
    ahead_labels: set[str] = field(default_factory=set)  # their problems' labels, not met yet
    ahead_sent: int = 0  # the lists of draws ahead sent to its worker, numbered

    def holds(self, problem: str) -> bool:
        """Whether its worker has drawn `problem`, or is drawing it ahead."""
        return problem in self.drawn or problem in self.ahead_labels

    @property
    def kind(self) -> str:
        return self.device["name"]

    @property
    def where(self) -> str:
        return f"{self.device.get('host', '?')} GPU {self.device.get('gpu', '?')}"


@dataclass(eq=False)
class Waiter:
    """A caller waiting in `WorkerPool._acquire` for a worker."""

    kind: str
    problem: str  # the label of the problem it evaluates ("" for none)
    since: float  # time.monotonic() when it began to wait
    label: str = ""  # what it measures, for the worker's status
    slot: Slot | None = None  # the worker `match` handed it
    first: bool = False  # whether that worker meets its problem for the first time (so draws it)


def steal_at(waiter: Waiter, draw_s: dict[str, float]) -> float:
    """When `waiter` stops waiting for the busy worker that drew its problem and takes another:
    once it has waited as long as the checks of the problem's first evaluation took (the draw is
    in them), an upper bound of what drawing it again costs. Never while that first evaluation
    runs (its draw is not known yet, and is over when it ends)."""
    return waiter.since + draw_s.get(waiter.problem, float("inf"))


def match(idle: list[Slot], waiting: list[Waiter], live: list[Slot], draw_s: dict[str, float],
          now: float) -> dict[Waiter, Slot]:
    """Which waiter takes which idle worker now, all of one GPU kind; `idle` longest idle first,
    `waiting` in arrival order. In turn: a worker goes to a waiter whose problem it has drawn;
    then to one whose problem is drawn on fewer live workers than evaluations of it want one now
    (none has drawn it; or a shape searched several configurations at a time); then to one past
    `steal_at`. A waiter whose problem a busy worker holds waits for it until then: at 16384
    tokens a draw (10-40 s) outlasts the drawer's evaluation many times, while at small shapes
    (checks of milliseconds) it hardly waits. At each step the oldest waiter that no other free
    worker could take; a worker nobody may take stays idle."""
    # Counted once: with every shape of seven kernels waiting at once (640 on 2026-11-28), counting
    # per waiter made each matching quadratic in the waiters, and the driver's one core the bound.
    drawers = Counter(p for s in live for p in s.drawn | s.ahead_labels)
    wanting = Counter(w.problem for w in waiting) + Counter(s.problem for s in live)
    # drawn on as many live workers as evaluations of it want one now
    held = {w.problem for w in waiting if w.problem and drawers[w.problem] >= wanting[w.problem]}
    steps = (lambda w, s: bool(w.problem) and s.holds(w.problem),
             lambda w, s: w.problem not in held,
             lambda w, s: now >= steal_at(w, draw_s))
    chosen: dict[Waiter, Slot] = {}
    free = list(idle)
    for may_take in steps:
        for slot in list(free):
            takers = [w for w in waiting if w not in chosen and may_take(w, slot)]
            # a waiter no other free worker could take first: a worker that drew p and q goes to q's
            # waiter where another free worker drew p
            others = [s for s in free if s is not slot]
            taker = next((w for w in takers if not any(may_take(w, s) for s in others)), takers[0] if takers else None)
            if taker is not None:
                chosen[taker] = slot
                free.remove(slot)
    return chosen


class WorkerPool:
    """Actors on `count` GPUs (see the module docstring); use as a context manager."""

    def __init__(self, count: int, *, recordings: list[str] | None = None, devices: list[str] | None = None,
                 pace: float = 0.0, gpus_per_worker: float = 1.0, timeout_s: float = EVALUATION_TIMEOUT_S,
                 start_timeout_s: float = 120.0, environment: dict[str, str] | None = None):
        """`recordings`: replay workers answering from these instead of GPUs (`pace`: times their
        recorded wall time), worker i as the GPU `devices[i % len(devices)]` of them (a recording
        of several GPU kinds replays a mixed cluster); `gpus_per_worker`: each actor's GPU share, 0
        for replay workers on a cluster without GPUs; `environment`: variables the actors set (the
        kernel path)."""
        if count < 1:
            raise WorkerError("the cluster has no GPU to put an evaluation worker on (Ray lists none); "
                              "a replay on a cluster without GPUs takes --workers N")
        self._ray = ray_module()
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._actor_class = self._ray.remote(EvaluationHost).options(
            num_gpus=gpus_per_worker, num_cpus=0 if recordings else CPUS_PER_GPU_WORKER, max_restarts=0,
            max_concurrency=2)
        self._arguments = dict(recordings=recordings, pace=pace, timeout_s=timeout_s, environment=environment)
        self._devices = list(devices or [None])
        self._lock = threading.Condition()
        self.slots: list[Slot] = []
        self._idle: dict[str, deque[Slot]] = {}
        self._waiting: list[Waiter] = []  # callers waiting for a worker, in arrival order
        self._changed: set[str] = set()  # GPU kinds whose waiters and idle workers must be matched again
        self._next_match: dict[str, float] = {}  # kind -> when a waiter of it may next steal (steal_at)
        self._draw_s: dict[str, float] = {}  # problem -> the wall time of its first evaluation on a worker
        self._starting = 0
        self._closed = False
        self.lost: list[str] = []  # what was lost, in words, for the report
        handles = [self._start(self._devices[i % len(self._devices)]) for i in range(count)]
        try:
            devices = self._ray.get([h.describe.remote() for h in handles], timeout=start_timeout_s)
        except Exception as exc:
            for handle in handles:
                try:
                    self._ray.kill(handle)
                except Exception:
                    pass
            needs = (("no GPU" if not gpus_per_worker else f"{gpus_per_worker:g} GPU") if recordings else
                     f"{gpus_per_worker:g} GPU and {CPUS_PER_GPU_WORKER} CPU of one node")
            why = (f"not all placed within {start_timeout_s:.0f} s (each worker takes {needs}: too few free?)"
                   if isinstance(exc, self._ray.exceptions.GetTimeoutError) else _first_line(getattr(exc, "cause", None) or exc))
            raise WorkerError(f"the cluster's {count} evaluation worker(s) did not start: {why}") from None
        for handle, device in zip(handles, devices):
            self._add(handle, device)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add(self, handle, device: dict, replaces: int | None = None) -> Slot | None:
        with self._lock:
            if self._closed:  # a replacement that started after close(): not kept
                self._ray.kill(handle)
                return None
            slot = Slot(index=len(self.slots), handle=handle, device=device, replaces=replaces)
            self.slots.append(slot)
            self._idle.setdefault(slot.kind, deque()).append(slot)
            self._changed.add(slot.kind)
            self._lock.notify_all()
        return slot

    @property
    def kinds(self) -> list[str]:
        """The GPU kinds of the live workers, by name."""
        with self._lock:
            return sorted({s.kind for s in self.slots if s.alive})

    def view(self, kind: str, recording: str | None = None) -> "KindView":
        """The `kind` workers as one evaluator; for a replay, `recording` is what its reports name
        (the workers may hold several kernels' recordings)."""
        return KindView(self, kind, recording)

    def live(self, kind: str | None = None) -> list[Slot]:
        with self._lock:
            return [s for s in self.slots if s.alive and (kind is None or s.kind == kind)]

    def _acquire(self, kind: str, label: str, problem: str = "") -> tuple[Slot, bool]:
        """An idle `kind` worker for an evaluation of `problem` (a problem's label), waiting for one
        as `match` decides; with whether the worker meets the problem for the first time (so draws
        it). A worker draws each problem's inputs and float64 reference on the host the first time
        it meets it (10-40 s at 16384 tokens), and on two H100s, each caller taking the longest
        idle worker, every worker drew every problem, 114 draws for 57 (docs/scaling.md, run G).

        The matching runs once per change (a waiter arrives or leaves, a worker frees or starts, a
        waiter's steal time comes), by whichever waiter wakes first, and hands workers to the
        waiters it chose; the others only look whether they were chosen. With every waiter matching
        for itself, a whole suite's 640 waiters made the driver's core the bound (run J)."""
        with self._lock:
            me = Waiter(kind, problem, time.monotonic(), label)
            self._waiting.append(me)
            self._changed.add(kind)
            self._lock.notify_all()  # one more evaluation of a problem can hand an idle worker to an older waiter
            try:
                while me.slot is None:
                    if self._closed:
                        raise WorkerError("the cluster's workers were stopped")
                    if not self.live(kind) and not self._starting:
                        raise WorkerError(f"no {kind} worker is left in the cluster (lost: {'; '.join(self.lost)})")
                    now = time.monotonic()
                    if kind in self._changed or now >= self._next_match.get(kind, float("inf")):
                        self._match(kind, now)
                        continue
                    # until the next waiter may steal (one past it waits for a worker to free: a notify)
                    self._lock.wait(max(0.01, min(1.0, self._next_match.get(kind, float("inf")) - now)))
            except BaseException:
                if me.slot is not None:  # handed a worker as it gave up (Ctrl-C): the worker goes back
                    me.slot.doing = me.slot.problem = ""
                    if me.slot.alive:
                        self._idle.setdefault(kind, deque()).append(me.slot)
                raise
            finally:
                self._waiting.remove(me)
                self._changed.add(kind)  # the matching changed for the others
                self._lock.notify_all()
            return me.slot, me.first

    def _match(self, kind: str, now: float) -> None:
        """Hand `kind`'s idle workers to its waiters as `match` decides (under the lock), and note
        when a waiter left waiting may next steal a worker; nothing to do while none is idle (a
        worker freeing is a change)."""
        self._changed.discard(kind)
        idle = list(self._idle.get(kind, ()))
        waiting = [w for w in self._waiting if w.kind == kind and w.slot is None]
        if not idle or not waiting:
            self._next_match[kind] = float("inf")
            return
        chosen = match(idle, waiting, self.live(kind), self._draw_s, now)
        for waiter, slot in chosen.items():
            self._idle[kind].remove(slot)
            slot.doing, slot.problem = waiter.label, waiter.problem
            waiter.first = bool(waiter.problem) and waiter.problem not in slot.drawn
            if waiter.problem:
                slot.drawn.add(waiter.problem)
                slot.ahead_labels.discard(waiter.problem)
            waiter.slot = slot
        later = [t for t in (steal_at(w, self._draw_s) for w in waiting if w.slot is None) if t > now]
        self._next_match[kind] = min(later, default=float("inf"))
        if chosen:
            self._lock.notify_all()

    def _release(self, slot: Slot) -> None:
        with self._lock:
            slot.doing = slot.problem = ""
            slot.done += 1
            if slot.alive:
                self._idle.setdefault(slot.kind, deque()).append(slot)
            self._changed.add(slot.kind)
            self._lock.notify_all()

    def prefetch(self, kind: str, items: list) -> int:
        """Spread the draws `items` ((problem, seed) pairs, in the order they will be needed) over
        `kind`'s live workers, each problem to one worker (the one with the fewest bytes to draw
        so far), which draws it ahead on its host's other cores; `match` then sends the problem's
        evaluations to that worker. A problem a worker holds already stays with it. Until its
        first evaluation says what its draw cost, a waiter for a busy drawer may take another
        worker once it has waited as long as drawing it is estimated to take (DRAW_BYTES_PER_S;
        the longer of the two afterwards: a draw made ahead leaves the first evaluation's checks short).
        Without this, each worker drew a problem on one core when it first met it, its GPU idle
        meanwhile: 62% of the evaluations' time on two H200s (docs/scaling.md, run K). Returns the
        problems handed out; a replay's workers draw nothing, so none."""
        from astra_kernels.tools.measuring.draws import draw_bytes

        if self._arguments["recordings"]:
            return 0
        by_problem: dict[str, list] = {}
        for problem, seed in items:
            by_problem.setdefault(problem.label, []).append((problem, seed))
        with self._lock:
            live = [s for s in self.slots if s.alive and s.kind == kind]
            if not live:
                return 0
            load = {s.index: sum(draw_bytes(p) for p, _ in s.ahead if p.label in s.ahead_labels) for s in live}
            handed, new_labels = 0, set()
            for label, pairs in by_problem.items():
                if any(s.holds(label) for s in live):
                    continue
                new_labels.add(label)
                slot = min(live, key=lambda s: (load[s.index], s.index))
                slot.ahead += pairs
                slot.ahead_labels.add(label)
                load[slot.index] += draw_bytes(pairs[0][0]) * len(pairs)
                self._draw_s.setdefault(label, draw_bytes(pairs[0][0]) * len(pairs) / DRAW_BYTES_PER_S)
                handed += 1
            for slot in live:
                if not any(p.label in new_labels for p, _ in slot.ahead):
                    continue  # nothing new for it: its list stands (a new one would restart its drawing)
                slot.ahead = [(p, seed) for p, seed in slot.ahead if p.label in slot.ahead_labels]
                slot.ahead_sent += 1
                try:  # its whole list, numbered: a list that arrives after a later one is dropped (host.py)
                    slot.handle.prefetch.remote(slot.ahead, slot.ahead_sent)  # not waited for: drawing ahead only saves time
                except Exception:
                    pass
        return handed

    def evaluate(self, kind: str, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        """Run `request` on an idle `kind` worker, waiting for one; always a result, except a
        toolchain failure in the worker (raised, as the local worker raises it), no worker left, or
        the pool closed. A lost worker's evaluation is a "lost" result (KindView asks again)."""
        ray = self._ray
        # a replay worker draws nothing: its evaluations go to whichever is idle
        problem = "" if self._arguments["recordings"] else request.problem.label
        slot, first = self._acquire(kind, request.label or request.kernel, problem)
        started = time.perf_counter()
        deadline = (timeout_s or self.timeout_s) + ANSWER_GRACE_S
        try:
            result = ray.get(slot.handle.evaluate.remote(request), timeout=deadline)
        except ray.exceptions.RayTaskError as exc:  # the worker raised: its compiler cannot run
            self._release(slot)
            raise WorkerError(f"the worker on {slot.where} failed: {_first_line(exc.cause or exc)}") from None
        except BaseException as exc:
            if self._closed:
                raise WorkerError("the cluster's workers were stopped") from None
            if not isinstance(exc, ray.exceptions.RayError):  # Ctrl-C in this thread, say: not the worker's
                self._release(slot)
                raise
            # Its actor or node died, its answer was lost with its owner, or it outran the deadline:
            # the worker cannot be trusted with the next request.
            why = (f"no answer within {deadline:.0f} s" if isinstance(exc, ray.exceptions.GetTimeoutError)
                   else _first_line(exc))
            self._lose(slot, why)
            return EvaluationResult(
                status="lost", label=request.label, kernel=request.kernel, device=slot.kind,
                arch=slot.device.get("arch", ""), bytes_moved=request.problem.bytes_moved,
                host=slot.device.get("host", ""), gpu=str(slot.device.get("gpu", "")),
                wall_seconds=time.perf_counter() - started,
                message=f"the worker on {slot.where} was lost while measuring this ({why}); not stored, so a "
                        "re-run measures it again; a replacement is started where a GPU and a CPU are free")
        with self._lock:
            if result.fatal:  # its child was replaced (a crash, a hung kernel): every draw it held went with it
                slot.drawn.clear()
                slot.ahead, slot.ahead_labels = [], set()
            elif first:  # the draw is in the checks' phase of a problem's first evaluation on a worker
                drawn_s = (result.phase_seconds or {}).get("check", time.perf_counter() - started)
                self._draw_s[problem] = max(self._draw_s.get(problem, 0.0), drawn_s)
        self._release(slot)
        return result

    def _lose(self, slot: Slot, why: str) -> None:
        """Mark `slot` dead, kill what is left of its actor, and start its replacement."""
        with self._lock:
            slot.alive, slot.doing, slot.problem = False, "", ""
            self._changed.add(slot.kind)  # what it held or drew ahead is now nobody's
            self.lost.append(f"{slot.where} ({why})")
            self._starting += 1
            self._lock.notify_all()
        try:
            self._ray.kill(slot.handle)
        except Exception:  # already gone with its node
            pass
        threading.Thread(target=self._replace, args=(slot,), daemon=True, name=f"replace-worker-{slot.index}").start()

    def _start(self, device: str | None):
        """A new actor; for a replay, answering as `device` (None: the recording's only GPU)."""
        return self._actor_class.remote(device=device, **self._arguments)

    def _replace(self, slot: Slot) -> None:
        handle = None
        try:
            handle = self._start(slot.kind if self._arguments["recordings"] else None)
            device = self._ray.get(handle.describe.remote(), timeout=self.start_timeout_s)
            self._add(handle, device, replaces=slot.index)
        except Exception as exc:
            try:
                if handle is not None:
                    self._ray.kill(handle)
            except Exception:
                pass
            with self._lock:
                if not self._closed:
                    self.lost.append(f"no replacement for {slot.where} started within {self.start_timeout_s:.0f} s "
                                     f"({_first_line(exc)}); its work goes to the others")
        finally:
            with self._lock:
                self._starting -= 1
                self._lock.notify_all()

    @property
    def starting(self) -> int:
        """Replacements being started now."""
        with self._lock:
            return self._starting

    def status(self) -> list[dict]:
        """Per worker: where, which GPU, what it measures now, how many done, alive or lost."""
        with self._lock:
            return [{"worker": s.index, "where": s.where, "gpu": s.kind, "doing": s.doing, "done": s.done,
                     "state": "lost" if not s.alive else ("busy" if s.doing else "idle"),
                     "replaces": s.replaces} for s in self.slots]

    def close(self) -> None:
        """Stop every worker. Evaluations waiting for one, or for an answer, raise WorkerError, so
        that threads still searching (a Ctrl-C's) end at once; a replacement starting is not kept."""
        with self._lock:
            self._closed = True
            live = [s for s in self.slots if s.alive]
            for slot in self.slots:
                slot.alive = False
            self._idle.clear()
            self._lock.notify_all()
        idle = [s for s in live if not s.doing]
        try:  # an idle worker closes its own (its EvaluationWorker's child, a recording's copy)
            self._ray.get([s.handle.close.remote() for s in idle], timeout=30)
        except Exception:
            pass
        for slot in live:
            try:
                self._ray.kill(slot.handle)
            except Exception:
                pass


class KindView(NothingToStart):
    """The pool's workers of one GPU kind, standing where an EvaluationWorker would."""

    def __init__(self, pool: WorkerPool, kind: str, recording: str | None = None):
        live = pool.live(kind)
        if not live:
            raise WorkerError(f"the cluster has no {kind} worker")
        self.pool, self.kind = pool, kind
        self.device = {k: v for k, v in live[0].device.items() if k not in ("host", "gpu", "pid")}
        if recording:
            self.device["replay"] = recording
        self.restarts = 0
        self._recording = recording
        self._recorded: ResultsStore | None = None

    def answers(self, request: EvaluationRequest) -> bool:
        """For a replay: whether the recording holds `request`, read here on the driver, so a search
        compiles only what the workers can answer (ReplayWorker.answers says why)."""
        if not self._recording:
            return True
        if self._recorded is None:
            self._recorded = ResultsStore(unpacked_copy(Path(self._recording)), read_only=True)
        return self._recorded.has(evaluation_key(request, self.device["name"]))

    def close(self) -> None:
        if self._recorded is not None:
            self._recorded.close()
            self._recorded = None

    @property
    def parallelism(self) -> int:
        """How many evaluations of this kind can run at once: its live workers."""
        return max(1, len(self.pool.live(self.kind)))

    def evaluate(self, request: EvaluationRequest, timeout_s: float | None = None) -> EvaluationResult:
        """The pool's answer; a worker lost while measuring it (its process or node) is no verdict
        on the candidate, so it is asked again, of the replacement or another worker, LOST_RETRIES
        times before the result says "lost" (which no results store keeps)."""
        for _ in range(LOST_RETRIES):
            result = self.pool.evaluate(self.kind, request, timeout_s)
            if result.status != "lost":
                return result
        return self.pool.evaluate(self.kind, request, timeout_s)

    def prefetch(self, items: list) -> int:
        """The draws `items` made ahead by this kind's workers, each problem by one (WorkerPool.prefetch)."""
        return self.pool.prefetch(self.kind, items)

    def call(self, function: Callable, *args, timeout_s: float | None = None):
        raise WorkerError(f"a cluster's workers run evaluations only, not {getattr(function, '__name__', function)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__
