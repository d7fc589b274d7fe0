"""Compiling with NVRTC: one source with a deadline, or many across the CPU cores.

Compiling needs no GPU and no CUDA toolkit (the pip NVRTC and runtime-header wheels suffice), so
CI compiles every kernel and the tuner prunes configurations by registers and spills before any
launch. Results are cached on disk; `compile_many` spreads variants over the CPU cores.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from pydantic import BaseModel, Field

from astra_kernels.tools.errors import CompileError, ToolchainError

from .compile_cache import CompileCache, default_cache
from .compiler_process import compile_in_child
from .headers import cuda_include_dir
from .nvrtc import (
    CompiledModule, CompileOptions, Diagnostic, compile_here, from_cache, key_and_flags, resolve_arch, to_cache,
)
from .processes import die_with_parent, interrupts_blocked, start_resource_tracker


def compile_source(
    source: str,
    options: CompileOptions | None = None,
    *,
    name: str = "kernel.cu",
    cache: CompileCache | None | bool = True,
    timeout_s: float | None = None,
) -> CompiledModule:
    """Compile CUDA C++ to a cubin for one architecture, or raise CompileError with the log.

    `cache=True` uses the default on-disk cache, a CompileCache uses that one, False none.
    Compile errors are cached too: the same source and options fail the same way. With
    `timeout_s`, a compile the cache cannot answer runs in a child process that is killed at
    that deadline (compiler_process.py), raising CompileTimeoutError; a timeout is never
    cached, since a less loaded machine may finish.
    """
    options = options or CompileOptions()
    store = default_cache() if cache is True else (cache or None)
    if timeout_s is None:
        return compile_here(source, options, name=name, cache=store)
    key, _, arch = key_and_flags(source, options, name)
    if store is not None and (module := from_cache(store, key, source)) is not None:
        return module
    return compile_in_child(source, options.model_copy(update={"arch": arch}), name=name,
                            cache_dir=str(store.directory) if store is not None else None,
                            timeout_s=timeout_s)


class CompileOutcome(BaseModel):
    """One variant's result from `compile_many`: a module, or the error that stopped it."""

    index: int
    module: CompiledModule | None = None
    error: str | None = None
    error_type: str | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)


def _compile_one(index: int, source: str, options: CompileOptions, cache_dir,
                 timeout_s: float | None = None) -> CompileOutcome:
    """One variant compiled (or read from the cache in `cache_dir`) as an outcome."""
    cache = CompileCache(cache_dir) if cache_dir is not None else False
    try:
        module = compile_source(source, options, cache=cache, timeout_s=timeout_s)
    except CompileError as exc:
        return _failed(index, exc)
    return CompileOutcome(index=index, module=module)


def _cached(index: int, store: CompileCache, key: str, source: str) -> CompileOutcome | None:
    """The cache's outcome for a variant whose key is `key` (a cached compile error too), None on a miss."""
    try:
        module = from_cache(store, key, source)
    except CompileError as exc:
        return _failed(index, exc)
    return None if module is None else CompileOutcome(index=index, module=module)


def _failed(index: int, exc: CompileError) -> CompileOutcome:
    return CompileOutcome(index=index, error=str(exc), error_type=type(exc).__name__, diagnostics=exc.diagnostics)


def compile_many(
    variants: Iterable[tuple[str, CompileOptions]],
    *,
    workers: int | None = None,
    cache: CompileCache | None | bool = True,
    timeout_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[CompileOutcome]:
    """Compile many (source, options) pairs across CPU cores, in input order.

    NVRTC holds the interpreter for the whole compile, so processes, not threads, give the
    parallelism. A compile error is an outcome, not an exception: one bad variant must not stop
    a search. Toolchain errors (no NVRTC, bad arch) still raise, since every variant would fail.
    With `timeout_s`, a variant still compiling at that deadline is stopped and becomes a
    CompileTimeoutError outcome (compile_source). `progress(done, total)` hears of each one
    finished (cache hits at once), for a bar over what can take minutes on a small machine.
    """
    items: Sequence[tuple[str, CompileOptions]] = list(variants)
    if not items:
        return []
    resolved = [(src, opts.model_copy(update={"arch": resolve_arch(opts.arch)})) for src, opts in items]
    cuda_include_dir()  # fail once, here, rather than in every worker
    store = default_cache() if cache is True else (cache or None)
    cache_dir = str(store.directory) if store is not None else None
    # Each variant's key once (an included folder's files are stat-ed for it: milliseconds a variant),
    # for the cache, the claims below and the cluster's results.
    keys = [key_and_flags(s, o, "kernel.cu")[0] for s, o in resolved]
    # Cache hits are file reads: answer them here, and start processes only for real compiles.
    outcomes = {}
    if store is not None:
        for i, (s, _) in enumerate(resolved):
            if (hit := _cached(i, store, keys[i], s)) is not None:
                outcomes[i] = hit
    misses = [i for i in range(len(resolved)) if i not in outcomes]
    claims: dict[int, tuple[tuple, futures.Future]] = {}

    def finished(index: int, outcome: CompileOutcome) -> None:
        outcomes[index] = outcome
        if (claim := claims.get(index)) is not None:  # in the cache by now: a later call reads it there
            _settle(*claim, outcome)
            del claims[index]
        if progress is not None:
            progress(len(outcomes), len(resolved))

    if progress is not None and outcomes:
        progress(len(outcomes), len(resolved))
    # Another thread's compile_many may be compiling the same binary now: a tune's shapes build their
    # spaces side by side, and every shape of one width asks for the same binaries (240 topk_softmax
    # shapes on 2026-11-28's four H200s: the cluster's 64 cores compiled for about three minutes, the
    # GPUs mostly idle, while the cache kept 1,043 s of topk_softmax's NVRTC). The first call to ask
    # compiles each binary; the others wait for its outcome, and where that call failed, claim it again.
    stopped: BaseException | None = None
    try:
        pending = misses
        while pending:
            own, waits = _claim({i: (keys[i], timeout_s, cache_dir) for i in pending}, claims)
            if store is not None:  # finished by another call since this one read the cache
                for i in own:
                    if (hit := _cached(i, store, keys[i], resolved[i][0])) is not None:
                        finished(i, hit)
            _compile_misses([i for i in own if i not in outcomes], resolved, keys, store, cache_dir, workers,
                            timeout_s, finished)
            pending = []
            for i, answer in waits.items():
                try:
                    outcome = answer.result()
                except _Stopped:
                    raise KeyboardInterrupt from None  # that call was interrupted, and with it the command
                except Exception:  # that call failed (its task lost, say): claimed again, by one call
                    pending.append(i)
                else:
                    finished(i, outcome.model_copy(update={"index": i}))
    except BaseException as exc:
        stopped = exc
        raise
    finally:
        # stopped before their outcome: an interrupt stops the calls waiting too (stop_compiles has
        # already killed the pools it could see); any other failure lets them claim the binary again
        interrupted = isinstance(stopped, KeyboardInterrupt)
        for claim in claims.values():
            _settle(*claim, None, interrupted=interrupted)
    return [outcomes[i] for i in range(len(resolved))]


def _compile_misses(misses: list[int], resolved, keys: list[str], store, cache_dir, workers, timeout_s,
                    finished: Callable[[int, CompileOutcome], None]) -> None:
    """Compile `misses` (indices into `resolved`) on a cluster's CPUs, this process or a pool of this
    host's processes, each module in the cache before `finished(index, outcome)` hears of it."""
    if not misses:
        return
    workers = max(1, min(workers or os.cpu_count() or 1, len(misses)))
    if _EXECUTOR is not None:
        # A cluster's CPUs (tools/cluster/compiling.py): each compile a task on any node's cores,
        # its outcome sent back here, and each module kept in this host's cache (compile errors are
        # not: they are compiled again next time).
        jobs = {_EXECUTOR.submit(_compile_one, i, *resolved[i], None, timeout_s=timeout_s): i for i in misses}
        try:
            for job in futures.as_completed(jobs):
                outcome = job.result()
                if store is not None and outcome.module is not None:
                    to_cache(store, keys[jobs[job]], outcome.module)
                finished(jobs[job], outcome)
        except BaseException:
            for job in jobs:
                job.cancel()
            raise
    elif workers == 1 or len(misses) <= 2:
        for i in misses:
            finished(i, _compile_one(i, *resolved[i], cache_dir, timeout_s=timeout_s))
    else:
        # spawn: the parent may hold a CUDA context, which a forked child must never inherit.
        context = multiprocessing.get_context("spawn")
        start_resource_tracker()  # before the pool's queues register their semaphores with it
        pool = futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                           initializer=_pool_worker_started, initargs=(os.getpid(),))
        _LIVE_POOLS[pool] = False
        try:
            # The workers start during submit; started here, they never take Ctrl-C themselves.
            with interrupts_blocked(multiprocessing=True):
                jobs = {i: pool.submit(_compile_one, i, *resolved[i], cache_dir, timeout_s=timeout_s)
                        for i in misses}
            index_of = {job: i for i, job in jobs.items()}
            for job in futures.as_completed(index_of):
                finished(index_of[job], job.result())
            pool.shutdown(wait=True)
        except BaseException as exc:
            _stop_pool(pool)
            saved = f"every finished compile, in the compile cache {cache_dir}" if cache_dir else None
            if _LIVE_POOLS.get(pool) and isinstance(exc, futures.BrokenExecutor):
                # stop_compiles killed the workers (Ctrl-C, with this compile in another thread):
                # an interrupt here too, not a broken pool that a caller might report as a failure.
                interrupt = KeyboardInterrupt()
                if saved:
                    interrupt.add_note(saved)
                raise interrupt from None
            if isinstance(exc, KeyboardInterrupt) and saved:
                exc.add_note(saved)
            raise
        finally:
            _LIVE_POOLS.pop(pool, None)


# The binaries some compile_many in this process is compiling now, by cache key, deadline and cache:
# the outcome's future, which the claiming call settles once the module is in the cache (or with
# None, stopped first). One binary asked for by several threads at once is compiled once.
_COMPILING: dict[tuple, futures.Future] = {}
_COMPILING_LOCK = threading.Lock()


def _claim(keys: dict[int, tuple], claims: dict[int, tuple[tuple, futures.Future]]
           ) -> tuple[list[int], dict[int, futures.Future]]:
    """Split `keys` (index -> binary) into the indices this call compiles, whose futures go into
    `claims`, and those it waits for: another call's, or an earlier index of its own, same binary."""
    own: list[int] = []
    waits: dict[int, futures.Future] = {}
    with _COMPILING_LOCK:
        for i, key in keys.items():
            if (answer := _COMPILING.get(key)) is not None:
                waits[i] = answer
            else:
                answer = _COMPILING[key] = futures.Future()
                claims[i] = (key, answer)
                own.append(i)
    return own, waits


class _Stopped(Exception):
    """A claimed compile's call was interrupted (Ctrl-C, SIGTERM): the calls waiting on it stop too."""


def _settle(key: tuple, claim: futures.Future, outcome: CompileOutcome | None, *, interrupted: bool = False) -> None:
    """Release a claimed binary: later calls read the cache; those waiting take `outcome` (None: they
    claim it again, or stop if the claiming call was `interrupted`)."""
    with _COMPILING_LOCK:
        if _COMPILING.get(key) is claim:
            del _COMPILING[key]
    if claim.done():
        return
    if outcome is not None:
        claim.set_result(outcome)
    elif interrupted:
        claim.set_exception(_Stopped("the compile's call was interrupted"))
    else:
        claim.set_exception(ToolchainError("the compile was stopped before it finished"))


# Where compile_many sends the compiles the cache cannot answer, instead of a pool of this host's
# processes: an executor whose submit() returns a concurrent.futures.Future (compiling_with).
_EXECUTOR: futures.Executor | None = None


@contextlib.contextmanager
def compiling_with(executor: futures.Executor) -> Iterator[None]:
    """Every compile_many in this process, in any thread, sends its compiles to `executor` meanwhile
    (a Ray cluster's tasks: tools/cluster/compiling.py), and its results into this host's cache.
    Process-wide, for a command's duration: a server running several graphs at once would send
    every graph's compiles there."""
    global _EXECUTOR
    before, _EXECUTOR = _EXECUTOR, executor
    try:
        yield
    finally:
        _EXECUTOR = before
        # what is still compiling there is not waited for: a thread waiting on it gets an error
        executor.shutdown(wait=False, cancel_futures=True)


# Pools compiling now, in any thread, each with whether stop_compiles has killed its workers.
_LIVE_POOLS: dict[futures.ProcessPoolExecutor, bool] = {}


def stop_compiles() -> None:
    """Kill the workers of every pool compiling now, whichever thread waits on it; for a signal
    handler, which runs in the main thread while another may be compiling (`astra optimize`
    runs the tune step in one of LangGraph's threads, and exits only once that thread is done).
    The thread's compile_many then raises KeyboardInterrupt at once. No locks and no waiting:
    only kill signals are sent; compile_many's own clean-up joins the processes."""
    for pool in list(_LIVE_POOLS):
        _LIVE_POOLS[pool] = True
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                process.kill()
            except (OSError, ValueError):  # already gone, or already closed
                pass


def _pool_worker_started(parent_pid: int) -> None:
    """A compile worker's first act: die with the process that started the pool (processes.py)."""
    die_with_parent(parent_pid)


def _stop_pool(pool: futures.ProcessPoolExecutor) -> None:
    """Stop a pool now, not when its queue is done: Ctrl-C, SIGTERM or an error in the caller.

    Leaving the pool's `with` would wait for every queued compile (about a minute of them on a
    small machine) and only then raise. NVRTC cannot be cancelled, so the workers are killed:
    compiles already cached stay cached (entries are renamed into place whole), and the rest are
    the next run's work. Killed workers also close their end of multiprocessing's resource
    tracker pipe, so the tracker exits with them. Signals are held back from this thread
    meanwhile (a second Ctrl-C is delivered once the workers are gone)."""
    with interrupts_blocked():
        kill_workers = getattr(pool, "kill_workers", None)  # Python 3.14
        if kill_workers is not None:
            kill_workers()
        else:
            processes = list((getattr(pool, "_processes", None) or {}).values())
            for process in processes:
                if process.is_alive():
                    process.kill()
            for process in processes:
                process.join(5)
        # Not waiting: after its workers are killed, the pool's manager thread can wedge on the
        # queue they shared (seen once in ten interrupts on a loaded machine); the CLI's main
        # leaves without such a thread after a short grace (cli._leave_if_a_thread_holds_on).
        pool.shutdown(wait=False, cancel_futures=True)
