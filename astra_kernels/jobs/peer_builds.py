"""The torch.compile peers of a benchmark built ahead, in child processes, before its first row.

A benchmark times each shape's torch.compile peer after compiling it there (torch_peers.measure_peer),
one shape after another in the evaluation worker while the GPU idles: on an H200 the compiles took
92 of per_token_group_quant_fp8's 222 s sweep (2026-11-29), and most of topk_softmax's 7.5 s a shape.
The compiles are CPU work, and Inductor's FX-graph cache and Triton's kernel cache are on disk and
shared by the user's processes: so the shapes are first built by a few children side by side
(torch_peers.build_peer), and the worker's compile of each then loads what they built. The code timed
is the same (the cache is keyed by the graph, the inputs' shapes, strides and dtypes and the
compiler's settings); only the wait goes. One thing is left to the worker on purpose: the launch
configurations Inductor picks by timing its Triton kernels at their first call, which a child would
pick on a GPU shared with the other children (torch_peers.build_peer keeps none). Building ahead
only saves time: a child that fails or runs past the deadline leaves its shapes to be compiled as
they come, and a build ahead that cannot start leaves them all so.

The children are ours to stop (processes.py): each runs in a session of its own, so a terminal's
Ctrl-C reaches only the command, dies with it, and is killed with its group (a compiler it started
too) once the deadline passes or the command stops.

`python -P -m astra_kernels.jobs.peer_builds` is the child (`serve`, with torch_peers.build_peer): it
reads its shapes, as JSON, from stdin, and writes one JSON line per shape it built or failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel

from astra_kernels.tools.measuring.draws import host_gpus
from astra_kernels.tools.toolchain.processes import child_environment, die_with_parent, python_command

# For the whole build: what is left then compiles in the worker as it comes. Under a call's time
# limit (scripts/sweep_tables.py --seconds) the build must leave time for rows.
DEADLINE_S = 300.0


def processes() -> int:
    """Children building side by side, each compiling on one core (Inductor's own pool off): one per
    core this process may run on, shared with the benchmarks of the host's other GPUs, which build
    at the same time (sweep_tables.py --bench runs one per GPU). On an H200 host's 16 cores, 8
    built topk_softmax's 148 sweep shapes in 288 s, 16 its 79 others in 88 s (2026-11-29)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // host_gpus())

Item = tuple[str, dict[str, int], str, str]  # kernel, shape, dtype, variant


class BuiltAhead(BaseModel):
    """What a build ahead did: shapes built, shapes failed (each failure's first line kept), shapes
    left unanswered (the deadline passed, or a child ended early), and the wall seconds it took."""
    built: int = 0
    failed: list[str] = []
    left: int = 0
    deadline_passed: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        why = "the deadline passed" if self.deadline_passed else "a child ended before them"
        return (f"torch.compile peers built ahead: {self.built} shape(s) in {self.seconds:.0f} s"
                + (f", {len(self.failed)} failed (first: {self.failed[0]})" if self.failed else "")
                + (f", {self.left} left to compile as they come ({why})" if self.left else ""))


def build_ahead(items: Sequence[Item], device_index: int = 0, children: int | None = None,
                deadline_s: float = DEADLINE_S, child: str = __name__) -> BuiltAhead:
    """Build each of `items` once, dealt round-robin to up to `children` (else `processes()`)
    children on GPU `device_index`; returns within about `deadline_s`, no child left running.
    `child` is the module the children run (`python -P -m`): this one, or a test's, which calls
    `serve` with a builder of its own."""
    started = time.perf_counter()
    result = BuiltAhead()
    items = list(items)
    if not items:
        return result
    count = max(1, min(children or processes(), len(items)))
    env = child_environment()
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # one core each: the parallelism is the children's
    started_children = []
    try:
        for i in range(count):
            request = {"device_index": device_index, "parent": os.getpid(),
                       "items": [list(item) for item in items[i::count]]}
            process = subprocess.Popen([*python_command(child)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env=env, start_new_session=True)
            started_children.append(process)
            try:
                process.stdin.write(json.dumps(request).encode())
                process.stdin.close()
            except BrokenPipeError:  # it died before reading: its shapes are left
                pass
        for process in started_children:
            remaining = max(0.0, deadline_s - (time.perf_counter() - started))
            try:
                if _wait(process, remaining):
                    output = process.stdout.read()
                else:
                    result.deadline_passed = True
                    output = _kill(process)
            finally:
                process.stdout.close()
            _tally(result, output)
    finally:
        for process in started_children:
            if process.poll() is None:
                _kill(process)
    result.left = len(items) - result.built - len(result.failed)
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def _wait(child: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the child ended within `timeout_s` (its output, one short line a shape, fits the
    pipe: `serve` sends whatever else it prints to stderr, which is discarded)."""
    try:
        child.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _kill(child: subprocess.Popen) -> bytes:
    """Kill the child's whole group (a compiler it started too); what it wrote before."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
    return child.stdout.read() if not child.stdout.closed else b""


def _tally(result: BuiltAhead, output: bytes) -> None:
    for line in output.decode(errors="replace").splitlines():
        try:
            done = json.loads(line)
        except ValueError:
            continue
        if not isinstance(done, dict):
            continue
        if done.get("ok"):
            result.built += 1
        else:
            result.failed.append(str(done.get("error", "")))


def serve(build: Callable[[str, dict[str, int], str, str, int], None]) -> None:
    """The child's loop: `build(kernel, shape, dtype, variant, device_index)` for each shape of the
    request on stdin, one JSON line out per shape."""
    request = json.load(sys.stdin)
    die_with_parent(request["parent"])
    # The answers go out on a copy of stdout; what else is printed (a library's warnings) goes where
    # stderr goes, so it can neither fill the answers' pipe nor run into a line of them.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for kernel, shape, dtype, variant in request["items"]:
        try:
            build(kernel, shape, dtype, variant, request["device_index"])
            done = {"ok": True}
        except Exception as exc:  # one shape's failure is measure_peer's to report; the next goes on
            done = {"ok": False, "error": f"{kernel} {shape}: {type(exc).__name__}: {exc}".splitlines()[0][:300]}
        print(json.dumps(done), file=answers, flush=True)


if __name__ == "__main__":
    from astra_kernels.jobs.torch_peers import build_peer

    serve(build_peer)
