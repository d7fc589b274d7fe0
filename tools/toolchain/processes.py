"""Starting a Python child process of this package (the compiler process, the sanitizer's run):
the same interpreter, the same import path, never the working directory; and making sure no
child outlives the command that started it.

The command owns Ctrl-C and SIGTERM: it stops its children itself (killing them, since NVRTC
cannot be cancelled) and says what was saved. A child that took Ctrl-C too would print a
traceback of its own, and one left running after its parent died (a SIGKILL, say) would
compile for nobody and keep multiprocessing's resource tracker alive with it. So children are
started with those two signals blocked (`interrupts_blocked`) and ask the kernel to kill them
when their parent dies (`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def python_command(module: str) -> list[str]:
    """`python -P -m module`: never the working directory on the child's import path. The child
    imports what this process imports (child_environment passes our import path on), wherever
    the command was started: a checkout's astra_kernels/ folder, which holds only part of the
    package, must not shadow the installed package (`-m` alone would put it first)."""
    return [sys.executable, "-P", "-m", module]


def child_environment() -> dict[str, str]:
    """This process's environment, with its import path, so the child imports what we import
    (a source checkout, a test folder) and not only what is installed."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    return env


@contextlib.contextmanager
def interrupts_blocked(multiprocessing: bool = False) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back from this thread while the block runs, then deliver them.

    A child started inside inherits the blocked mask through fork and exec (multiprocessing starts
    its resource tracker the same way) and so never takes the signals its parent handles: a
    terminal's Ctrl-C reaches the whole process group, and the parent alone must answer it. Also
    used around the parent's own clean-up, so that a second Ctrl-C does not cut it short; only
    mostly, in a process with other threads: the kernel may hand the signal to one of them, and
    Python then runs its handler in the main thread all the same.

    `multiprocessing`: the block starts multiprocessing children. Their resource tracker is then
    started first, outside the block: starting it unblocks these signals on its way out, which
    would leave the children started after it in the block taking them after all."""
    if multiprocessing:
        start_resource_tracker()
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# The -W option multiprocessing's resource tracker is started with (it passes this process's
# warning options on to its command line): its "leaked semaphore objects" warning off.
_TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, if it is not running, without its warnings.

    The tracker is a process of its own that unlinks what this process's multiprocessing objects
    leave behind when it ends without their finalizers (a compile pool's queue semaphores, after a
    Ctrl-C whose clean-up raced the pool's creation: about one stop in ten on a loaded machine).
    It still does that; it no longer also prints two warnings, each with a source line, after the
    command's two lines of what was saved and how to resume. Call before creating a pool or a
    queue: the first one starts the tracker otherwise, with the warnings on."""
    if os.name != "posix":
        return
    from multiprocessing import resource_tracker

    added = _TRACKER_QUIET not in sys.warnoptions
    if added:
        sys.warnoptions.append(_TRACKER_QUIET)
    try:
        resource_tracker.ensure_running()
    finally:
        if added:
            sys.warnoptions.remove(_TRACKER_QUIET)


def die_with_parent(parent_pid: int | None = None) -> None:
    """In a child: be killed when the parent dies, however it dies (Linux's PR_SET_PDEATHSIG; the
    parent may be SIGKILLed, with no chance to clean up). A parent that already died before this
    call (while the child was starting) is noticed by `parent_pid` no longer being our parent,
    and the child exits at once. Elsewhere than Linux only that check is made. (Linux counts the
    parent's death as that of the thread that started the child: start children from a thread
    that outlives them.)"""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
