"""multiprocessing's resource tracker, as tools/toolchain/processes.py starts it: a process that
ends without its finalizers (a Ctrl-C racing a compile pool's creation) leaves a named semaphore,
which the tracker still unlinks, without printing "leaked semaphore objects" after the command's
own last lines."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

LEAKS = textwrap.dedent("""
    import multiprocessing, os, sys
    if sys.argv[1] == "quiet":
        from astra_kernels.tools.toolchain.processes import start_resource_tracker
        start_resource_tracker()
    lock = multiprocessing.get_context("spawn").Lock()  # a named semaphore, registered with the tracker
    print(lock._semlock.name, flush=True)
    os._exit(130)  # as the CLI leaves after Ctrl-C: no finalizers
""")


def run(mode: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", LEAKS, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    return done.stdout.strip(), done.stderr  # stderr's end: the tracker has exited once it is closed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX named semaphores in /dev/shm")
def test_the_tracker_unlinks_what_a_stopped_process_leaves_and_says_nothing():
    name, err = run("quiet")
    assert err == ""
    assert name and not any(n.endswith(name.lstrip("/")) for n in os.listdir("/dev/shm"))

    _, err = run("plain")  # started by multiprocessing itself: the two warnings this module turns off
    assert "leaked semaphore objects" in err
