"""Connecting to a Ray cluster, or starting one on this machine, for one command's duration.

`--ray` alone starts a local cluster (this machine's GPUs and cores) that ends with the command;
`--ray auto` joins the cluster this machine is part of, `--ray HOST:PORT` a given one; either is
left running. Ray is imported here and only here, so that without `--ray` it is never needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from astra_kernels.tools.errors import AstraError

INSTALL = "pip install 'astra-kernels[ray]'"


def ray_module():
    """The `ray` package, or an AstraError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise AstraError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


@contextlib.contextmanager
def connected(address: str | None, *, num_gpus: int | None = None, num_cpus: int | None = None) -> Iterator[dict]:
    """Ray initialised for the block; yields the cluster's resources (GPU, CPU counts). A cluster
    this call starts (no `address`) is shut down at the end, one it joins is left as it was, and
    a Ray the caller had already initialised is used and left alone. `num_gpus`/`num_cpus` size a
    local cluster (a test's stand-in GPUs); they are refused with an address."""
    ray = ray_module()
    if address and (num_gpus is not None or num_cpus is not None):
        raise AstraError("a cluster's size is its own: num_gpus and num_cpus are only for a local one")
    if ray.is_initialized():
        yield _resources(ray)
        return
    with _ray_messages_on_stderr(ray):
        try:
            # "local": a new cluster on this machine even where RAY_ADDRESS or a `ray start` one is
            # about (ray.init(None) would join those, and take their GPUs for this command's)
            ray.init(address=address or "local", num_gpus=num_gpus, num_cpus=num_cpus, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise AstraError(f"cannot connect to {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
        try:
            yield _resources(ray)
        finally:
            ray.shutdown()


def _resources(ray) -> dict:
    return {name: ray.cluster_resources().get(name, 0) for name in ("GPU", "CPU")}


@contextlib.contextmanager
def _ray_messages_on_stderr(ray) -> Iterator[None]:
    """Ray's driver prints what its raylets report ("A worker died or was killed ...") to stdout,
    whatever log_to_driver says (ray._private.worker.listen_error_messages marks them not errors).
    A command's stdout is its output, `--json`'s JSON above all, so for the block they are printed
    to stderr instead: the same lines, marked as errors. Where a Ray version lacks the function,
    nothing changes."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    printing = getattr(module, "print_to_stdstream", None)
    if printing is None:
        yield
        return

    def to_stderr(data, *args, **kwargs):
        return printing({**data, "is_err": True}, *args, **kwargs)

    module.print_to_stdstream = to_stderr
    try:
        yield
    finally:
        module.print_to_stdstream = printing
