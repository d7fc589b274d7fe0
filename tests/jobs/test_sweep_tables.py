"""scripts/sweep_tables.py without a GPU: --install puts a finished tune's table and store where the
shipped ones live, only for the GPU kind and regime it was tuned on; and the per-GPU queue runs each
kernel's tune once, on a replay here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from support.scripts import load_script


def module():
    return load_script("scripts/sweep_tables.py")


def finished(out: Path, l2: str, kernel: str, device: str = "NVIDIA H200") -> Path:
    folder = out / l2 / kernel
    folder.mkdir(parents=True)
    (folder / "dispatch.json").write_text('{"kernel": "%s"}' % kernel)
    (folder / "report.json").write_text(json.dumps({"device": device, "l2": l2, "date": "2026-11-29T01:02:03"}))
    (folder / "results.sqlite").write_bytes(b"store " + kernel.encode())
    return folder


def test_install_puts_tables_and_cold_stores_where_the_shipped_ones_live(tmp_path, monkeypatch):
    sweep = module()
    repo = tmp_path / "repo"
    monkeypatch.setattr(sweep, "ROOT", repo)
    out = tmp_path / "out"
    finished(out, "cold", "rmsnorm")
    finished(out, "warm", "rmsnorm")
    (out / "cold" / "silu_and_mul").mkdir(parents=True)  # stopped before its table: left out
    assert sweep.install(out, "h200") == 0
    assert json.loads((repo / "kernels_sglang/tuned/h200/rmsnorm.json").read_text()) == {"kernel": "rmsnorm"}
    assert (repo / "kernels_sglang/tuned/h200/warm/rmsnorm.json").is_file()
    assert gzip.decompress((repo / "kernels_sglang/recorded/h200-2026-11-29/rmsnorm.sqlite.gz").read_bytes()) \
        == b"store rmsnorm"
    assert not (repo / "kernels_sglang/tuned/h200/silu_and_mul.json").exists()
    assert sorted(p.name for p in (repo / "kernels_sglang/recorded").iterdir()) == ["h200-2026-11-29"]


def store_of(path: Path, rows: dict[str, float], older: tuple[str, ...] = ()) -> Path:
    """A results store of the real schema holding `rows` (key -> median us), a silu_and_mul row each
    of today's template (the keys in `older`: of another template text)."""
    import hashlib
    import sqlite3

    from astra_kernels import suite
    from astra_kernels.tools.measuring.results import ResultsStore

    today = hashlib.sha256(suite.load("silu_and_mul").template.code.encode()).hexdigest()
    ResultsStore(path).close()  # the schema
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO results (key, kernel, which, median_us, source_sha256, result) VALUES "
                   "(?, 'silu_and_mul', 'template', ?, ?, '{}')",
                   [(key, us, "0" * 64 if key in older else today) for key, us in rows.items()])
    db.commit()
    db.close()
    return path


def medians(recording: Path, tmp_path: Path) -> dict[str, float]:
    import sqlite3

    copy = tmp_path / "read.sqlite"
    copy.write_bytes(gzip.decompress(recording.read_bytes()))
    db = sqlite3.connect(copy)
    try:
        return dict(db.execute("SELECT key, median_us FROM results"))
    finally:
        db.close()


def test_install_keeps_the_previous_recordings_rows_the_new_tune_did_not_measure(tmp_path, monkeypatch, capsys):
    """A tune of the sweep onto the shipped table leaves the table's other entries as the previous
    tune picked them: the recording that replaces the previous one keeps their measurements (a
    replay of the shipped table still answers there), and the new measurement of a key both made;
    an older template's rows, which no replay reaches, stay behind in the older recording."""
    sweep = module()
    repo = tmp_path / "repo"
    monkeypatch.setattr(sweep, "ROOT", repo)
    older, previous = (repo / "kernels_sglang/recorded" / s for s in ("h200-2026-11-26b", "h200-2026-11-28"))
    for folder in (older, previous, repo / "kernels_sglang/recorded/h100-2026-11-29"):
        folder.mkdir(parents=True)
    for folder, rows in ((older, {"gone": 9.0}), (previous, {"kept": 1.0, "again": 2.0, "an older template's": 5.0}),
                         (repo / "kernels_sglang/recorded/h100-2026-11-29", {"an h100's": 3.0})):
        raw = store_of(tmp_path / f"{folder.name}.sqlite", rows, older=("an older template's",)).read_bytes()
        (folder / "silu_and_mul.sqlite.gz").write_bytes(gzip.compress(raw))
    tune = finished(tmp_path / "out", "cold", "silu_and_mul")
    (tune / "results.sqlite").unlink()
    store_of(tune / "results.sqlite", {"again": 2.5, "new": 4.0})
    assert sweep.install(tmp_path / "out", "h200") == 0
    installed = repo / "kernels_sglang/recorded/h200-2026-11-29/silu_and_mul.sqlite.gz"
    # the newest h200 recording's row of today's template the tune lacks, the tune's own where both have
    # one; no older template's, no other recording's
    assert medians(installed, tmp_path) == {"kept": 1.0, "again": 2.5, "new": 4.0}
    assert "with 1 row of h200-2026-11-28's it did not measure again" in capsys.readouterr().out
    assert gzip.decompress((previous / "silu_and_mul.sqlite.gz").read_bytes()) == \
        (tmp_path / "h200-2026-11-28.sqlite").read_bytes()  # the previous recording as it was


def test_install_refuses_a_table_tuned_on_another_gpu_kind(tmp_path, monkeypatch, capsys):
    sweep = module()
    monkeypatch.setattr(sweep, "ROOT", tmp_path / "repo")
    finished(tmp_path / "out", "cold", "rmsnorm", device="NVIDIA H100 80GB HBM3")
    assert sweep.install(tmp_path / "out", "h200") == 2
    assert "not a h200" in capsys.readouterr().err and not (tmp_path / "repo").exists()


def test_each_kernel_is_tuned_once_by_the_gpu_that_takes_it(tmp_path):
    sweep = module()
    result = sweep.tune_all(tmp_path / "out", ["merge_attn_states"], "cold", [0, 1], budget=1, seconds=600,
                            extra=["--replay", "recorded", "--sample", "1"])
    facts = result["kernels"]["merge_attn_states"]
    assert facts["ended"] == "finished", (tmp_path / "out/logs/merge_attn_states-cold.log").read_text()[-2000:]
    log = (tmp_path / "out/logs/merge_attn_states-cold.log").read_text()
    assert log.count("$ ") == 1 and "--set sweep,astra,serving " in log and f"--gpu {facts['gpu']}" in log
    assert json.loads((tmp_path / "out/sweep-cold.json").read_text())["kernels"] == result["kernels"]
    again = sweep.tune_all(tmp_path / "out", ["rmsnorm"], "cold", [0], budget=1, seconds=0, extra=[])
    assert again["kernels"] == {"rmsnorm": {"gpu": 0, "ended": "not started (out of time)"}}
    kept = json.loads((tmp_path / "out/sweep-cold.json").read_text())["kernels"]  # the earlier run's kernel kept
    assert kept == {**result["kernels"], **again["kernels"]}
    late = sweep.tune_all(tmp_path / "out", ["merge_attn_states"], "cold", [0], budget=1, seconds=0, extra=[])
    assert late["kernels"]["merge_attn_states"]["ended"] == "not started (out of time)"
    kept = json.loads((tmp_path / "out/sweep-cold.json").read_text())["kernels"]  # finished stays finished
    assert kept["merge_attn_states"] == facts and not list((tmp_path / "out").glob(".sweep-cold.json.*"))


def test_the_bench_of_a_kernel_takes_the_table_tuned_here_when_there_is_one(tmp_path):
    sweep = module()
    argv = sweep.bench_command(tmp_path, "rmsnorm", "warm", 2, 6, [])
    assert "--tuned" not in argv and argv[argv.index("--gpu") + 1] == "2" and argv[argv.index("--l2") + 1] == "warm"
    finished(tmp_path, "warm", "rmsnorm")
    argv = sweep.bench_command(tmp_path, "rmsnorm", "warm", 2, 6, [])
    assert argv[argv.index("--tuned") + 1] == str(tmp_path / "warm" / "rmsnorm")
    assert argv[argv.index("--out") + 1] == str(tmp_path / "bench-warm" / "rmsnorm") and "--set" in argv
    assert "--resume" in argv  # run again, a cut benchmark goes on from its bench.json
