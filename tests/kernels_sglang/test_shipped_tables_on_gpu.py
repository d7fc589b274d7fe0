"""Every configuration a shipped dispatch table can run, on a real GPU, where no tuning timed it.

A table runs each entry's configuration at every shape nearest that entry (DispatchTable.pick),
and its general configuration where none fits; the tuner checked each only at its own shape, in
the table's dtype and variant. Here each is checked (not timed) at its kernel's odd shapes in
every dtype and variant the kernel serves (checking.table_plan, what `astra check K --table
shipped` runs and `astra tune` now runs on every table it makes), for the tables shipped for the
GPU this runs on, both L2 regimes. Run with -s for the counts per kernel.
"""

from __future__ import annotations

import pytest

from astra_kernels.jobs import checking
from astra_kernels.jobs.benchmark import shipped_table
from astra_kernels import suite
from astra_kernels.suite import tuned_tables
from astra_kernels.tools.measuring.worker import EvaluationWorker

pytestmark = pytest.mark.gpu


def test_every_configuration_of_the_shipped_tables_is_correct_at_the_odd_shapes_in_every_dtype_and_variant():
    with EvaluationWorker(timeout_s=600) as worker:
        device = worker.device
        if tuned_tables.device_key(device["name"]) is None:
            pytest.skip(f"no tables are shipped for {device['name']}")
        planned = []
        for name in suite.names():
            folder = suite.load(name)
            for regime in tuned_tables.REGIMES:
                table = shipped_table(name, device["name"], regime)
                if table is not None:
                    planned += checking.table_plan(folder, table, sms=device["multiprocessors"], arch=device["arch"])
        assert planned, f"no shipped table for {device['name']}"
        done = checking.run(planned, worker)
    print(f"\n| kernel | configurations x shapes x dtype/variant pairs | ok | excluded | failed |\n|---|---|---|---|---|")
    for name in sorted({r.kernel for r in done}):
        mine = [r for r in done if r.kernel == name]
        print(f"| {name} | {len(mine)} | {sum(r.status == 'ok' for r in mine)} | "
              f"{sum(r.status == 'excluded' for r in mine)} | {len(checking.failures(mine))} |")
    failures = checking.failures(done)
    assert sum(r.status == "ok" for r in done) > 0
    assert not failures, "\n".join(checking.describe(r) for r in failures[:20])
