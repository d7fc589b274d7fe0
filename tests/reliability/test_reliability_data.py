"""Nothing already measured or written is lost, and no value a run cannot honour is taken silently
(issue 38's items 5-8 and 11): a failed tune leaves an earlier result byte for byte; a second
import keeps a user's edits; two runs never share an output folder; an export never writes over a
file it did not write, nor exports a table the template's constraints refuse; sizes, digits,
architectures, duplicate entries, times and repeated options no run can honour are one line each.

Every case runs without a GPU (replays of the shipped recordings, shipped tables, a stand-in for
SGLang's sources) in about a second."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.jobs import benchmark
from astra_kernels import suite
from astra_kernels.suite import tuned_tables

TUNE = ["tune", "rmsnorm", "--replay", "recorded", "--sample", "2"]
LOCK = ".astra.lock"  # docs/cli.md: the file a run holds in its output folder


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- item 5: a failed tune replaces nothing -----------------------------------------------------


def test_a_failed_tune_leaves_an_earlier_result_byte_for_byte(tmp_path, capsys):
    out = tmp_path / "tuned"
    assert cli.main([*TUNE, "--shapes", "128x4096", "--out", str(out)]) == 0
    before = _snapshot(out)
    assert {"dispatch.json", "best.json", "report.md", "report.json", "launcher.py"} <= set(before)
    capsys.readouterr()
    # 1x4095: a shape the recording never measured, so the run ends with "nothing was measured"
    assert cli.main([*TUNE, "--shapes", "1x4095", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "nothing was measured" in text and f"{out} keeps its earlier result" in text, text
    assert _snapshot(out) == before, "a failed run replaced files of a good one"
    assert not [p for p in tmp_path.rglob("*") if "staging" in p.name], "the failed run's files are left nowhere"


def test_a_failed_tune_into_a_new_folder_still_writes_its_report(tmp_path, capsys):
    """Nothing to lose there: the report says what failed."""
    out = tmp_path / "fresh"
    assert cli.main([*TUNE, "--shapes", "1x4095", "--out", str(out)]) == 1
    assert (out / "report.md").is_file() and "1x4095" in (out / "report.md").read_text()


def test_a_good_tune_replaces_an_earlier_one(tmp_path, capsys):
    out = tmp_path / "tuned"
    assert cli.main([*TUNE, "--shapes", "128x4096", "--out", str(out)]) == 0
    assert cli.main([*TUNE, "--shapes", "16x4096", "--out", str(out)]) == 0
    table = json.loads((out / "dispatch.json").read_text())
    assert [e["shape"] for e in table["entries"]] == [{"T": 16, "H": 4096}]
    assert not (out / LOCK).exists() and not [p for p in out.iterdir() if p.name.startswith(".")]


# --- item 6: a second import keeps a user's edits ------------------------------------------------


@pytest.fixture
def sglang_sources(tmp_path) -> Path:
    """A stand-in for SGLang's JIT tree and TVM-FFI's headers: what `import-sglang --from DIR` reads
    (the folders it writes are the same whatever the sources hold; nothing is compiled here)."""
    root = tmp_path / "sources"
    (root / "sglang/kernels/jit/csrc/elementwise").mkdir(parents=True)
    (root / "sglang/kernels/jit/include/sgl").mkdir(parents=True)
    (root / "tvm_ffi/include/tvm").mkdir(parents=True)
    (root / "sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh").write_text("// SGLang's rmsnorm\n")
    return root


def test_import_sglang_again_keeps_an_edited_spec_unless_forced(sglang_sources, tmp_path, capsys):
    dest = tmp_path / "kernels"
    argv = ["import-sglang", str(dest), "--from", str(sglang_sources), "--kernel", "rmsnorm"]
    assert cli.main(argv) == 0
    spec = dest / "sglang_rmsnorm" / "spec.py"
    spec.write_text(spec.read_text() + "# my edit\n")
    edited = _snapshot(dest)
    capsys.readouterr()
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert str(dest / "sglang_rmsnorm") in line and "exists already" in line and "--force" in line, line
    assert _snapshot(dest) == edited, "a refused import wrote something"
    assert cli.main([*argv, "--force"]) == 0
    assert "# my edit" not in spec.read_text()


# --- item 7: one run per output folder; export writes over nothing of anyone else's -------------


@pytest.fixture
def held(tmp_path):
    """hold(folder): another run's lock on `folder`, held until the test ends."""
    files = []

    def hold(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        file = open(folder / LOCK, "a+")  # noqa: SIM115 (held until the test ends)
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        files.append(file)

    yield hold
    for file in files:
        file.close()


@pytest.mark.parametrize("argv", [
    [*TUNE, "--shapes", "128x4096"],
    ["export", "--gpu-kind", "h200", "--kernel", "rmsnorm"],
    ["optimize", "rmsnorm", "--replay", "recorded", "--shapes", "128x4096"],
], ids=["tune", "export", "optimize"])
def test_a_second_run_into_a_held_output_folder_is_refused(argv, tmp_path, held, capsys):
    out = tmp_path / "out"
    held(out)
    (out / "dispatch.json").write_text("an earlier run's\n")
    before = _snapshot(out)
    code = cli.main([*argv, "--out", str(out)])
    line = _one_error_line(capsys.readouterr().out)
    assert code == 1 and str(out) in line and "another astra run" in line, line
    assert _snapshot(out) == before


def test_export_keeps_a_readme_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "export"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n")
    argv = ["export", "--gpu-kind", "h200", "--kernel", "rmsnorm", "--out", str(out)]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert str(out / "README.md") in line and "not written by astra export" in line, line
    assert (out / "README.md").read_text() == "# my notes\n" and sorted(p.name for p in out.iterdir()) == ["README.md"]


def test_export_again_replaces_its_own_files(tmp_path, capsys):
    """And those of an export of another kernel into the same folder: its manifest keeps the list."""
    from astra_kernels.jobs.exporting import cuda_file

    out = tmp_path / "export"
    assert cli.main(["export", "--gpu-kind", "h200", "--kernel", "rmsnorm", "--out", str(out)]) == 0
    assert cli.main(["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", str(out)]) == 0
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["kernel"] == "silu_and_mul" and {"rmsnorm.cu", "silu_and_mul.cu", "README.md"} <= set(manifest["files"])
    again = [out / name for name in ("rmsnorm.cu", "rmsnorm_launch.py", "README.md", "export.json", "rmsnorm.h")]
    assert cuda_file._refuse_others_files(out, again) >= {p.name for p in again}  # a third export may replace them


# --- item 8: a table the template refuses is not exported ---------------------------------------


def test_a_table_entry_that_breaks_a_constraint_is_refused_by_shape_parameter_and_constraint(tmp_path, capsys):
    table = json.loads(tuned_tables.table_path("rmsnorm", "h200", "cold").read_text())
    entry = table["entries"][0]
    entry["config"].update(ROW_THREADS=256, ROWS=8)  # 2048 threads a CTA: the template allows 1024
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    assert cli.main(["export", str(tmp_path / "dispatch.json"), "--out", str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys.readouterr().out)
    label = suite.load("rmsnorm").spec.label(entry["shape"])
    for says in (label, "ROW_THREADS=256", "ROWS=8", "ROW_THREADS * ROWS <= 1024", "at most 1024 threads per CTA"):
        assert says in line, (says, line)
    assert not (tmp_path / "out").exists()


def test_every_shipped_table_runs_its_entries_where_they_were_tuned():
    from astra_kernels.jobs.exporting import cuda_file

    for kind in tuned_tables.gpu_kinds():
        for regime in tuned_tables.REGIMES:
            for kernel in tuned_tables.shipped_kernels(kind, regime):
                table = cuda_file.resolve_source(None, kind, kernel, regime).table
                assert table.broken_entry() is None, (kind, regime, kernel)


# --- item 11: values no run can honour ----------------------------------------------------------


@pytest.mark.parametrize("shape, says", [
    ("99999999999999999999x4096", "past the kernels' 32-bit size arguments"),
    ("16x2147483648", "past the kernels' 32-bit size arguments"),
    ("١٦x4096", "is not a rmsnorm shape"),  # Arabic-Indic digits: int() reads them, a kernel never should
    ("16x４０９６", "is not a rmsnorm shape"),  # full-width digits
])
@pytest.mark.parametrize("command", ["tune", "space"])
def test_a_size_past_int32_or_in_other_digits_is_refused(command, shape, says, tmp_path, capsys):
    argv = ([*TUNE, "--out", str(tmp_path / "out"), "--shapes", shape] if command == "tune"
            else ["space", "rmsnorm", "--shape", shape, "--sample", "2"])
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert says in line and repr(shape) in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arch", ["sm_1000", "sm_9", "sm_٩٠", "sm_90x", "90"])
def test_an_arch_that_is_none_is_refused(arch, tmp_path, capsys):
    assert cli.main(["export", "--gpu-kind", "h200", "--kernel", "rmsnorm", "--arch", arch,
                     "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert repr(arch) in line and "sm_90" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100", "sm_120"])
def test_real_archs_are_taken(arch):
    assert suite.compute_capability(arch) == int(arch[3:].rstrip("a"))


def test_a_table_with_duplicate_shapes_is_refused(tmp_path, capsys):
    table = json.loads(tuned_tables.table_path("rmsnorm", "h200", "cold").read_text())
    table["entries"] = table["entries"] + [table["entries"][3]] * 10_000
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    assert cli.main(["export", str(tmp_path / "dispatch.json"), "--out", str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys.readouterr().out)
    label = suite.load("rmsnorm").spec.label(table["entries"][3]["shape"])
    assert f"10001 entries at {label}" in line and "one per shape" in line, line


@pytest.mark.parametrize("field, value, says", [
    ("tuned_us", -3.0, "tuned_us -3.0"),
    ("baseline_us", -1e300, "baseline_us -1e+300"),
    ("baseline_us", 0.0, "baseline_us 0.0"),
    ("tuned_us", 1e300, "tuned_us 1e+300"),
    ("tuned_spread", -0.5, "tuned_spread -0.5"),
])
def test_bench_from_refuses_a_time_no_kernel_takes(field, value, says, tmp_path, capsys):
    row = benchmark.BenchRow(kernel="rmsnorm", label="16x4096", shape={"T": 16, "H": 4096}, dtype="bf16",
                             variant="default", bytes_moved=1, baseline_us=3.0, tuned_us=2.0,
                             baseline_status="ok", tuned_status="ok")
    setattr(row, field, value)
    report = benchmark.BenchReport(device="NVIDIA H200", arch="sm_90", date="2026-11-01", dtype="bf16", rows=[row])
    path = tmp_path / "bench.json"
    path.write_text(report.model_dump_json())
    assert cli.main(["bench", "--from", str(path)]) == 2
    line = _one_error_line(capsys.readouterr().out)
    assert str(path) in line and "rmsnorm 16x4096" in line and says in line, line


def test_space_refuses_two_shapes_rather_than_dropping_one(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["space", "rmsnorm", "--shape", "16x4096", "--shapes", "64x4096"])
    assert raised.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "one shape" in line and "'64x4096'" in line, line
