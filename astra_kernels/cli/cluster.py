"""`--ray`, as `astra tune` and `astra optimize` take it: the cluster and its pool of workers for one
command, and what the command prints of them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from astra_kernels.cli.arguments import positive_factor, positive_int
from astra_kernels.cli.output import cluster_table, cluster_view, console, messages, print_table


def add_cluster_arguments(parser, what: str) -> None:
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help=f"{what} over the GPUs of a Ray cluster, one evaluation worker per GPU, compiles on "
                             "its CPUs: alone, a cluster on this machine for this command; `auto` or HOST:PORT, an "
                             "existing one (needs pip install 'astra-kernels[ray]')")
    parser.add_argument("--workers", type=positive_int,
                        help="with --ray: how many workers (default one per GPU of the cluster; a --replay on a "
                             "cluster without GPUs: 2, or one per GPU kind of its recording)")
    parser.add_argument("--pace", type=positive_factor,
                        help="with --ray --replay: each answer takes PACE times its recorded evaluation's wall time "
                             "(a cluster's evaluation rate, on CPUs)")


def check_cluster_arguments(args) -> None:
    from astra_kernels.tools.errors import UsageError

    if args.ray not in (None, "local", "auto") and ":" not in args.ray:
        # `astra tune --ray silu_and_mul` reads the kernel as --ray's address
        raise UsageError(f"--ray takes nothing, `auto` or HOST:PORT, not {args.ray!r}: name the kernels before "
                         "--ray, or give its address as --ray=HOST:PORT")
    if args.ray is None and (args.workers or args.pace):
        raise UsageError("--workers and --pace are for a run on a Ray cluster (--ray)")
    if args.pace and not args.replay:
        raise UsageError("--pace is for a replay (--replay): a GPU takes the time it takes")


@contextlib.contextmanager
def cluster_pool(args, recordings: list[str] | None, title: str, live: bool = True) -> Iterator:
    """The Ray cluster `args.ray` names (started here when it is "local") and a WorkerPool on it:
    one worker per GPU, or `args.workers`; replay workers over `recordings` when given. Shows the
    workers live on a terminal (unless `live` is False: a command with its own progress bar, since
    a terminal shows one live display at a time), and prints them when done."""
    from astra_kernels.suite import KERNELS_PATH
    from astra_kernels.tools.cluster.pool import WorkerPool
    from astra_kernels.tools.cluster.runtime import connected
    from astra_kernels.tools.errors import UsageError
    from astra_kernels.tools.measuring.replay import recorded_devices

    address = None if args.ray == "local" else args.ray
    say = messages(args)
    with connected(address) as resources:
        gpus = int(resources["GPU"])
        if recordings is None and not gpus:
            raise UsageError(f"the Ray cluster {'on this machine' if address is None else address} has no GPU "
                             "(a replay runs without one: --replay recorded)")
        if gpus and args.workers and args.workers > gpus:
            raise UsageError(f"--workers {args.workers}: the Ray cluster has {gpus} GPU(s), one worker each")
        # A replay answers as every GPU its recordings hold: a recording of two kinds, a mixed cluster.
        devices = sorted({d for r in recordings for d in recorded_devices(r)}) if recordings else None
        count = args.workers or gpus or max(2, len(devices or []))
        environment = {KERNELS_PATH: os.environ[KERNELS_PATH]} if os.environ.get(KERNELS_PATH) else {}
        say.print(f"Ray cluster: {gpus} GPU(s), {int(resources['CPU'])} CPU(s); starting {count} "
                  f"{'replay ' if recordings else ''}worker(s)", highlight=False)
        with WorkerPool(count, recordings=recordings, devices=devices, pace=args.pace or 0.0,
                        gpus_per_worker=1.0 if gpus else 0.0, environment=environment) as pool:
            try:
                with cluster_view(pool.status, title) if live and say is console else contextlib.nullcontext():
                    yield pool
            finally:
                print_table(cluster_table(pool.status(), f"{title}: the workers"), say)
                for line in pool.lost:
                    say.print(f"[yellow]lost:[/yellow] {line}", highlight=False)
