"""scripts/rekey_recording.py: a recording carried over a template change only where every row is
proven a measurement of a binary the new template still builds (compiled here with NVRTC, no GPU).

The rows come from the shipped H200 recording of fused_add_rmsnorm, keyed by today's template; the
"new" template of each test is today's with one more parameter, whose default either leaves the
compiled code as it was or changes it."""

from __future__ import annotations

import dataclasses
import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from astra_kernels import suite
from astra_kernels.tools.measuring.results import ResultsStore, evaluation_key
from astra_kernels.tools.templating.template import parse_template
from support.scripts import load_script

KERNEL = "fused_add_rmsnorm"
RECORDING = Path(suite.folder_path(KERNEL)).parent / "recorded" / "h200-2026-11-28" / f"{KERNEL}.sqlite.gz"
AFTER_POLICIES = "    HINT_POLICIES\n"


def module():
    return load_script("scripts/rekey_recording.py")


def small_recording(tmp_path: Path, rows: int = 3, name: str = "recording") -> Path:
    """A gzipped store of the shipped recording's device facts, its first few timed template rows
    at 4096 wide, 64 tokens or fewer (each compiles in well under a second), and one baseline row."""
    full = tmp_path / "full.sqlite"
    with gzip.open(RECORDING, "rb") as source, open(full, "wb") as out:
        shutil.copyfileobj(source, out)
    small = tmp_path / f"{name}.sqlite"
    ResultsStore(small).close()  # the schema
    db = sqlite3.connect(small)  # closed, not only committed: the store keeps a write-ahead log
    db.execute("ATTACH DATABASE ? AS full", (str(full),))
    db.execute("INSERT OR REPLACE INTO meta SELECT * FROM full.meta")
    db.execute("INSERT INTO results SELECT * FROM full.results WHERE which = 'template' AND status = 'ok' "
               "AND json_extract(shape, '$.H') = 4096 AND json_extract(shape, '$.T') <= 64 "
               "ORDER BY created_at LIMIT ?", (rows,))
    db.execute("INSERT INTO results SELECT * FROM full.results WHERE which = 'baseline' LIMIT 1")
    db.commit()
    db.close()
    recording = tmp_path / f"{name}.sqlite.gz"
    with open(small, "rb") as source, gzip.open(recording, "wb") as out:
        shutil.copyfileobj(source, out)
    return recording


def with_new_template(monkeypatch, tmp_path: Path, code_at_default: str) -> Path:
    """Make today's template the old one (written to a file) and a variant with parameter EXTRA
    (default 0; `code_at_default` compiled in where EXTRA == 0) the kernel's template."""
    folder = suite.load(KERNEL)
    old = folder.template.source
    assert AFTER_POLICIES in old
    new = old.replace("//@ default: ", "//@ param EXTRA: 0, 1  -- a test's parameter\n//@ default: EXTRA=0 ", 1)
    new = new.replace(AFTER_POLICIES, AFTER_POLICIES + f"#if EXTRA == 0\n{code_at_default}#endif\n", 1)
    template = parse_template(new, "template.cu", suite.template_symbols(folder.spec))
    changed = dataclasses.replace(folder, template=template)
    monkeypatch.setattr(suite, "load", lambda name: changed if name == KERNEL else folder)
    path = tmp_path / "old-template.cu"
    path.write_text(old)
    return path


def rows(recording: Path, tmp_path: Path) -> list[dict]:
    copy = tmp_path / "read.sqlite"
    with gzip.open(recording, "rb") as source, open(copy, "wb") as out:
        shutil.copyfileobj(source, out)
    store = ResultsStore(copy)
    try:
        return store.rows()
    finally:
        store.close()


def test_a_parameter_whose_default_compiles_the_old_code_moves_every_row_to_its_new_key(tmp_path, monkeypatch):
    script = module()
    recording = small_recording(tmp_path)
    before = rows(recording, tmp_path)
    old_file = with_new_template(monkeypatch, tmp_path, "")
    assert script.rekey(KERNEL, old_file, [recording]) == [f"{recording}: 3 rows moved to the new template's keys "
                                                            "(3 builds compiled alike)"]
    after = rows(recording, tmp_path)
    assert len(after) == len(before) == 4
    assert [r for r in after if r["which"] == "baseline"] == [r for r in before if r["which"] == "baseline"]
    folder = suite.load(KERNEL)
    before, after = ([r for r in rs if r["which"] == "template"] for rs in (before, after))
    for was, now in zip(before, after):
        assert now["key"] != was["key"]
        assert now["config"] == {**was["config"], "EXTRA": 0}
        # the measurement, its run and its date are the recorded ones
        assert (now["median_us"], now["spread"], now["created_at"], now["run_id"]) == \
            (was["median_us"], was["spread"], was["created_at"], was["run_id"])
        request = suite.request(folder, "template", now["shape"], now["dtype"], now["variant"], now["config"],
                                sms=132, arch=now["arch"], stream_timing=False)  # the H200's, as recorded
        assert evaluation_key(request, now["device"]) == now["key"]  # what a replay of the new template asks
        assert "EXTRA=0" in now["result"]["label"]


def test_a_default_that_changes_the_compiled_code_moves_nothing(tmp_path, monkeypatch):
    script = module()
    recording = small_recording(tmp_path, rows=2)
    original = recording.read_bytes()
    old_file = with_new_template(monkeypatch, tmp_path, "    __threadfence();\n")
    with pytest.raises(script.RekeyError, match="other code than the old one"):
        script.rekey(KERNEL, old_file, [recording])
    assert recording.read_bytes() == original


def test_a_row_no_rebuilt_request_keys_like_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    """...in any recording given: the first, which would move, stays as it was too."""
    script = module()
    first = small_recording(tmp_path, rows=2, name="first")
    first_bytes = first.read_bytes()
    recording = small_recording(tmp_path, rows=2)
    unpacked = tmp_path / "tampered.sqlite"
    with gzip.open(recording, "rb") as source, open(unpacked, "wb") as out:
        shutil.copyfileobj(source, out)
    db = sqlite3.connect(unpacked)  # a row measured otherwise than any request the script rebuilds
    db.execute("UPDATE results SET key = ? WHERE rowid = (SELECT MIN(rowid) FROM results WHERE which = 'template')",
               ("0" * 64,))
    db.commit()
    db.close()
    with open(unpacked, "rb") as source, gzip.open(recording, "wb") as out:
        shutil.copyfileobj(source, out)
    original = recording.read_bytes()
    old_file = with_new_template(monkeypatch, tmp_path, "")
    with pytest.raises(script.RekeyError, match="no request rebuilt with the old template has this key"):
        script.rekey(KERNEL, old_file, [first, recording])
    assert recording.read_bytes() == original and first.read_bytes() == first_bytes
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staged file left


@pytest.mark.parametrize("kernel, kinds", [
    (KERNEL, (("h200", "NVIDIA H200", "h200-2026-11-29"), ("h100", "NVIDIA H100 80GB HBM3", "h100-2026-11-27"))),
    ("silu_and_mul", (("h200", "NVIDIA H200", "h200-2026-11-29"),)),
])
def test_the_shipped_recordings_answer_the_shipped_tables_picks_in_todays_template(tmp_path, kernel, kinds):
    """A replay of today's template finds every template pick of the shipped cold tables in the
    newest recording of its GPU kind: fused_add_rmsnorm's H100 one carried over RELOAD (2026-11-27,
    re-keyed), its H200 one measured with it (2026-11-29, the table re-tuned); silu_and_mul's H200
    one measured with STATIC_D at the sweep's tuned widths, with the re-keyed rows of 2026-11-28 at
    the table's other shapes (sweep_tables --install)."""
    from astra_kernels.runtime.dispatch import DispatchTable

    folder = suite.load(kernel)
    for kind, device, recorded in kinds:
        table = DispatchTable.model_validate_json(
            (Path(suite.folder_path(kernel)).parent / "tuned" / kind / f"{kernel}.json").read_text())
        with gzip.open(Path(suite.folder_path(kernel)).parent / "recorded" / recorded / f"{kernel}.sqlite.gz") as f:
            data = f.read()
        copy = tmp_path / f"{recorded}.sqlite"
        copy.write_bytes(data)
        store = ResultsStore(copy)
        try:
            sms = store.device_facts(device)["multiprocessors"]
            keys = {r["key"] for r in store.rows(kernel=kernel, which="template", device=device)}
        finally:
            store.close()
        picks = [e for e in table.entries if e.source == "template"]
        assert picks
        for entry in picks:
            request = suite.request(folder, "template", entry.shape, table.dtype, table.variant, entry.config,
                                    sms=sms, arch="sm_90", stream_timing=False, l2=table.l2)
            assert evaluation_key(request, device) in keys, (kind, entry.shape)


def test_todays_template_as_the_old_one_is_refused_in_one_line(tmp_path):
    script = module()
    recording = small_recording(tmp_path, rows=1)
    today = tmp_path / "today.cu"
    today.write_text(suite.load(KERNEL).template.source)
    assert script.main([KERNEL, "--old", str(today), str(recording)]) == 1
    with pytest.raises(script.RekeyError, match="already today's"):
        script.rekey(KERNEL, today, [recording])


BEFORE_STATIC_D = "1f544600923b48d8a8ede0530bcbe47e5303880e4ed98d38845f8d8d16ad22a9"  # sha256, 9a3dfb9's template.cu


def silu_before_static_d() -> str:
    """silu_and_mul's template.cu as it was before STATIC_D (commit 9a3dfb9), rebuilt from today's by
    taking the parameter out again; the digest proves the rebuild exact."""
    import hashlib
    import re

    text = suite.load("silu_and_mul").template.source
    text = re.sub(r"\. STATIC_D = 1 compiles the row\n(// .*\n){3}", ".\n", text, count=1)
    text = re.sub(r"//@ param STATIC_D:.*\n//@ derive D_LEN.*\n", "", text, count=1).replace(" STATIC_D=0\n", "\n", 1)
    text = re.sub(r"#if STATIC_D\n.*?#endif\n    const int nvec = width / VEC;", "    const int nvec = d / VEC;", text,
                  count=1, flags=re.S)
    for now, then in (("2 * width + width", "2 * d + d"), ("2 * width)", "2 * d)"), ("token * width)", "token * d)")):
        text = text.replace(now, then)
    assert hashlib.sha256(text.encode()).hexdigest() == BEFORE_STATIC_D, "today's template no longer rebuilds the old one"
    return text


def test_a_longer_line_table_that_moves_the_code_segment_still_compiles_alike():
    """silu_and_mul's STATIC_D: with it 0, today's template is the one before it on more source
    lines; the longer line table may move where the program headers and the code segment start in
    the cubin (it did with the NVRTC of the day), so the check compares what they hold, not where
    (its first form refused the re-keying)."""
    from astra_kernels.tools.toolchain.compiler import compile_many

    script = module()
    folder = suite.load("silu_and_mul")
    before = parse_template(silu_before_static_d(), "template.cu", suite.template_symbols(folder.spec))
    config = {"THREADS": 512, "VEC": 2, "CHUNKS": 1, "ROWS": 1, "UNROLL": 1, "FAST_MATH": 0, "FLAT": 1, "STREAM": 0}
    shape = {"T": 1, "D": 14336}
    old = suite.request(folder, "template", shape, "bf16", "default", config, sms=132, arch="sm_90",
                        source=before, stream_timing=False)
    new = suite.request(folder, "template", shape, "bf16", "default", {**config, "STATIC_D": 0}, sms=132,
                        arch="sm_90", stream_timing=False)
    assert old.source != new.source
    a, b = compile_many([(old.source, old.options), (new.source, new.options)])
    assert script.same_code(a.module.cubin, b.module.cubin)
    # the same check still tells other code apart: the row length compiled in
    c, = compile_many([(new.source, suite.request(folder, "template", shape, "bf16", "default",
                                                  {**config, "STATIC_D": 1}, sms=132, arch="sm_90",
                                                  stream_timing=False).options)])
    assert not script.same_code(b.module.cubin, c.module.cubin)
