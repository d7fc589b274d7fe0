"""`astra tune --ray` on a real GPU: a local Ray cluster's run measures what a run without Ray
measures, and its table equals that run's within the timing spread. The workers are Ray actors
whose child processes own the GPU; the driver alone writes the results store.
"""

from __future__ import annotations

import json

import pytest

from astra_kernels import cli
from astra_kernels.tools.measuring.results import ResultsStore

from support.cluster_replay import need_ray

pytestmark = pytest.mark.gpu

ray = need_ray()
KERNEL = "merge_attn_states"  # its astra shapes' float64 checks take well under a second each
ARGS = [KERNEL, "--set", "astra", "--strategy", "random", "--budget", "6", "--seed", "0", "--json"]


def _best(out) -> dict:
    """Shape label -> (best configuration, its median, its spread) from a run's report and store."""
    report = json.loads((out / "stdout.json").read_text())
    with ResultsStore(out / "results.sqlite", read_only=True) as store:
        rows = store.rows(kernel=KERNEL, which="template", status="ok")
        assert store.count(status="lost") == 0
    found = {}
    for shape in report["shapes"]:
        best = shape["search"]["best_config"]
        row = next(r for r in rows if r["shape"] == shape["shape"] and r["config"] == best)
        found[shape["label"]] = (best, row["median_us"], row["spread"], row["result"]["gpu"], row["result"]["host"])
    return found


def test_a_ray_run_s_table_equals_a_local_run_s(tmp_path, capsys):
    runs = {}
    for name, extra in (("local", []), ("ray", ["--ray", "--workers", "1"])):
        out = tmp_path / name
        code = cli.main(["tune", *ARGS, "--out", str(out), *extra])
        (out / "stdout.json").write_text(capsys.readouterr().out)
        assert code == 0, (out / "stdout.json").read_text()[-2000:]
        runs[name] = _best(out)
    assert runs["local"].keys() == runs["ray"].keys() and len(runs["local"]) == 5
    for label, (config, us, spread, _, _) in runs["local"].items():
        ray_config, ray_us, ray_spread, gpu, host = runs["ray"][label]
        # the same seeded proposals were measured; the picks may differ only within the spread
        assert abs(ray_us / us - 1) <= spread + ray_spread + 0.05, (label, config, us, ray_config, ray_us)
        assert gpu not in ("", "-") and host  # the actor names the GPU Ray gave it
