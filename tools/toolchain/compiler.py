"""Compiling with NVRTC: one source with a deadline, or many across the CPU cores.

Compiling needs no GPU and no CUDA toolkit (the pip NVRTC and runtime-header wheels suffice), so
CI compiles every kernel and the tuner prunes configurations by registers and spills before any
launch. Results are cached on disk; `compile_many` spreads variants over the CPU cores.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from astra_kernels.tools.errors import CompileError

from .compile_cache import CompileCache
from .compiler_process import compile_in_child
from .headers import cuda_include_dir
from .nvrtc import (
    CompiledModule, CompileOptions, Diagnostic, compile_here, from_cache, key_and_flags, resolve_arch,
)


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
    store = CompileCache() if cache is True else (cache or None)
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
                 cache_only: bool = False, timeout_s: float | None = None) -> CompileOutcome | None:
    """One variant as an outcome; with `cache_only`, None unless the cache already has it."""
    cache = CompileCache(cache_dir) if cache_dir is not None else False
    try:
        if cache_only:
            module = from_cache(cache, key_and_flags(source, options, "kernel.cu")[0], source)
            if module is None:
                return None
        else:
            module = compile_source(source, options, cache=cache, timeout_s=timeout_s)
    except CompileError as exc:
        return CompileOutcome(index=index, error=str(exc), error_type=type(exc).__name__,
                              diagnostics=exc.diagnostics)
    return CompileOutcome(index=index, module=module)


def compile_many(
    variants: Iterable[tuple[str, CompileOptions]],
    *,
    workers: int | None = None,
    cache: CompileCache | None | bool = True,
    timeout_s: float | None = None,
) -> list[CompileOutcome]:
    """Compile many (source, options) pairs across CPU cores, in input order.

    NVRTC holds the interpreter for the whole compile, so processes, not threads, give the
    parallelism. A compile error is an outcome, not an exception: one bad variant must not stop
    a search. Toolchain errors (no NVRTC, bad arch) still raise, since every variant would fail.
    With `timeout_s`, a variant still compiling at that deadline is stopped and becomes a
    CompileTimeoutError outcome (compile_source).
    """
    items: Sequence[tuple[str, CompileOptions]] = list(variants)
    if not items:
        return []
    resolved = [(src, opts.model_copy(update={"arch": resolve_arch(opts.arch)})) for src, opts in items]
    cuda_include_dir()  # fail once, here, rather than in every worker
    store = CompileCache() if cache is True else (cache or None)
    cache_dir = str(store.directory) if store is not None else None
    # Cache hits are file reads: answer them here, and start processes only for real compiles.
    outcomes = {}
    if store is not None:
        for i, (s, o) in enumerate(resolved):
            if (hit := _compile_one(i, s, o, cache_dir, cache_only=True)) is not None:
                outcomes[i] = hit
    misses = [i for i in range(len(resolved)) if i not in outcomes]
    workers = max(1, min(workers or os.cpu_count() or 1, len(misses)))
    if workers == 1 or len(misses) <= 2:
        outcomes.update({i: _compile_one(i, *resolved[i], cache_dir, timeout_s=timeout_s) for i in misses})
    else:
        # spawn: the parent may hold a CUDA context, which a forked child must never inherit.
        context = multiprocessing.get_context("spawn")
        with futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            jobs = {i: pool.submit(_compile_one, i, *resolved[i], cache_dir, timeout_s=timeout_s) for i in misses}
            outcomes.update({i: job.result() for i, job in jobs.items()})
    return [outcomes[i] for i in range(len(resolved))]
