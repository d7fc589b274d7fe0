"""The `astra` command line: one module per command under commands/ (its parser and its run), and
this small main that builds the parser from them and turns every project error into one line."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from rich.markup import escape

from astra_kernels import __version__
from astra_kernels.cli.arguments import Parser
from astra_kernels.cli.commands import (
    bench, check, doctor, export, kernels, optimize, report, space, tune, verify,
)
from astra_kernels.cli.commands import compile as compile_command
from astra_kernels.cli.commands import eval_agent, import_fib, import_sglang, new
from astra_kernels.cli.output import console, messages

# In the order `astra --help` lists them: what the machine can do, the suite, then the jobs.
COMMANDS = (doctor, compile_command, kernels, new, import_sglang, import_fib, check, space, tune, optimize, eval_agent,
            bench, verify, export, report)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="astra",
        description="astra-kernels: make SGLang's CUDA kernels faster, with every number measured.",
    )
    parser.add_argument("--version", action="version", version=f"astra-kernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    for name, subparser in sub.choices.items():  # so a misspelled option is named with its command
        subparser.set_defaults(parser_of_command=subparser)
        subparser.add_argument("--kernels-dir", action="append", metavar="DIR", default=[],
                               help="a directory of your own kernel folders, searched beside the shipped suite "
                                    "(repeatable; before those of ASTRA_KERNELS_PATH)")
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt. Being one, it runs the same clean-up
    on its way out (the compile pool's workers killed, the evaluation worker closed, the results
    store closed): the default SIGTERM would end this process on the spot and leave its children
    running."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame) -> None:
    """Ctrl-C or SIGTERM: kill the compile workers at once, then raise in the main thread.

    The kill comes first because the main thread may only be waiting on another one (`astra
    optimize` runs each node in a LangGraph thread, and waits for it before the interrupt can
    leave): that thread's compile then ends at once too, instead of after its whole queue, and its
    search at its next evaluation (concurrency.stop_point)."""
    compiler = sys.modules.get("astra_kernels.tools.toolchain.compiler")  # no pool before its import
    if compiler is not None:
        compiler.stop_compiles()
    concurrency = sys.modules.get("astra_kernels.tools.concurrency")  # and the searches on other threads
    if concurrency is not None:
        concurrency.request_stop()
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    from astra_kernels.tools.errors import AstraError, UsageError

    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        renamed = getattr(args, "renamed_flags", {})
        given = {u.split("=", 1)[0] for u in unknown}
        hints = "; ".join(f"{old} is now {new}" for old, new in renamed.items() if old in given)
        args.parser_of_command.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({hints})" if hints else ""))
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    command = shlex.join(["astra", *(sys.argv[1:] if argv is None else argv)])
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    _handle_signals({signal.SIGINT: _stop, signal.SIGTERM: _stop})
    try:
        with _kernels_dirs(args.kernels_dir):
            return args.run(args)
    except BrokenPipeError:
        # The reader went away (`astra kernels --json | head -1`): what it wanted it has. Nothing
        # more may reach the closed pipe, not even Python's own flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose reader left
    except AstraError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 2 if isinstance(exc, UsageError) else 1
    except OSError as exc:  # a path given that is a file, lies under one, or cannot be written
        console.print(f"[red]error:[/red] {escape(os_error_line(exc))}", highlight=False)
        return 1
    except KeyboardInterrupt as exc:
        code = _interrupted(exc, command, says_how_to_resume=hasattr(args, "resume"),
                            say=messages(args))
        if argv is None:  # the astra process itself, not a caller's (a test's) process
            _leave_now(code)
        return code
    finally:
        _handle_signals(handlers)  # as they were: main may be called in a process that goes on
        if (concurrency := sys.modules.get("astra_kernels.tools.concurrency")) is not None:
            concurrency.clear_stop()


def os_error_line(exc: OSError) -> str:
    """An OSError as one line naming the path and what is wrong with it. Any path a user gives
    (--out, --dir, DIR, --store) may be a file, lie under a file or be read-only, and each place
    that writes would otherwise end in a traceback (Python's own words, `[Errno 20] Not a
    directory: 'x/y'`, say nothing of which part is the file)."""
    path = exc.filename
    if path is None:
        return exc.strerror or str(exc)
    if isinstance(exc, FileExistsError) and os.path.exists(path) and not os.path.isdir(path):
        return f"{path}: a file is there, where a folder is to be made"
    if isinstance(exc, NotADirectoryError):
        parts = [p for p in [str(path), *map(str, Path(path).parents)] if os.path.isfile(p)]
        if parts:
            return f"{path}: {parts[0]} is a file, not a folder"
    what = exc.strerror or type(exc).__name__
    return f"{path}: {what}" + (f" ({exc.filename2})" if exc.filename2 else "")


@contextlib.contextmanager
def _kernels_dirs(dirs: list[str]):
    """--kernels-dir: the directories in front of ASTRA_KERNELS_PATH in this process's environment
    while the command runs (so the evaluation workers and compile processes it starts search them
    too), and the path as it was afterwards (main may be called in a process that goes on)."""
    if not dirs:
        yield
        return
    from astra_kernels import suite
    from astra_kernels.tools.errors import UsageError

    for folder in dirs:
        if not os.path.isdir(folder):
            raise UsageError(f"--kernels-dir {folder}: not a directory")
    before = os.environ.get(suite.KERNELS_PATH)
    rest = [p for p in (before or "").split(os.pathsep) if p.strip()]
    os.environ[suite.KERNELS_PATH] = os.pathsep.join([os.path.abspath(d) for d in dirs] + rest)
    suite.load.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(suite.KERNELS_PATH, None)
        else:
            os.environ[suite.KERNELS_PATH] = before
        suite.load.cache_clear()


def _leave_now(code: int, grace_s: float = 3.0) -> None:
    """After Ctrl-C or SIGTERM, leave the process at once with `code`, as soon as the command's
    other threads have ended with its children (a node of `astra optimize` runs in one of
    LangGraph's threads; its compiles end when the workers are killed, its search at its next
    evaluation). One that does not end would be joined by the interpreter at exit, and the command
    would hang after saying it stopped: past a short grace it leaves without them. Even with none
    left, the interpreter's own clean-up at exit (tearing down LangGraph's and torch's modules)
    took 2-3 s of `astra optimize`'s stop on a loaded machine, so that is skipped too: every
    evaluation is already a committed row of the results store and every finished step a
    checkpoint, each file the command wrote is closed on the exception's way out, and its children
    die with it (processes.die_with_parent)."""
    def others() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t is not threading.main_thread() and not t.daemon and t.is_alive() and not _idle_in_a_pool(t)]

    deadline = time.monotonic() + grace_s
    for thread in others():
        thread.join(max(0.0, deadline - time.monotonic()))
    if others():
        compiler = sys.modules.get("astra_kernels.tools.toolchain.compiler")
        if compiler is not None:
            compiler.stop_compiles()
    # multiprocessing's own exit-time finalizers (priority 0 and up: a killed compile pool's queue
    # semaphores unlinked and unregistered), which os._exit would skip: without them its resource
    # tracker, a process of its own, printed "leaked semaphore objects" after the stop message.
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        with contextlib.suppress(Exception):
            util._run_finalizers(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _idle_in_a_pool(thread: threading.Thread) -> bool:
    """A thread pool's worker waiting for work (LangGraph's, after its node has stopped): it holds
    nothing, and the interpreter's exit wakes and ends it (concurrent.futures' own exit hook), so
    it is no reason to wait out the grace (it made every stop of `astra optimize` take 3 s)."""
    frame = sys._current_frames().get(thread.ident)
    return (frame is not None and frame.f_code.co_name == "_worker"
            and frame.f_code.co_filename.endswith(os.path.join("concurrent", "futures", "thread.py")))


def _handle_signals(handlers: dict) -> None:
    """Install `handlers` ({signal: handler}). Only the main thread may; main called from another
    thread keeps the defaults."""
    if threading.current_thread() is threading.main_thread():
        for signum, handler in handlers.items():
            if handler is not None:  # None: a handler not installed from Python, left alone
                signal.signal(signum, handler)


def _interrupted(exc: KeyboardInterrupt, command: str, *, says_how_to_resume: bool, say=console) -> int:
    """Ctrl-C or SIGTERM: one line of what was saved, one of how to go on, and 128 + the signal
    (130, 143) as a shell reports a process a signal ended; never a traceback. By the time the
    exception gets here the command's children are stopped and its files closed (each layer
    cleans up on the way out). What was saved comes as the exception's notes, added by whoever
    knows it (the results store by `astra tune`, the compile cache by the compile pool);
    `says_how_to_resume`: the command printed that itself (`astra optimize`'s --resume); `say`: where
    to (stderr under --json, whose stdout holds JSON alone)."""
    _handle_signals({signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN})  # one is enough
    signum = getattr(exc, "signum", signal.SIGINT)
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    saved = list(dict.fromkeys(reversed(getattr(exc, "__notes__", []))))  # the command's own first
    say.print(escape(what + ("; saved: " + "; ".join(saved) if saved else "")), highlight=False)
    if saved and not says_how_to_resume:
        say.print(f"to resume, run the same command again: {escape(command)}", highlight=False)
    return 128 + signum

