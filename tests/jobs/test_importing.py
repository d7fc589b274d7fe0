"""`astra import-sglang` without a GPU: SGLang's own kernel sources, read from its wheel as the package
index serves it, written as kernel folders that load, keep the sources byte for byte, and compile
for sm_90 with nvcc; the bench's SGLang JIT column; the errors a user meets."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from astra_kernels import cli
from astra_kernels.jobs import benchmark, importing
from astra_kernels import suite
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.toolchain.timing import Timing

from support import kernel_path

NVCC = shutil.which("nvcc") or os.environ.get("ASTRA_NVCC")


@pytest.fixture(scope="module")
def wheels(request) -> list[Path]:
    return kernel_path.sglang_wheels(request)


@pytest.fixture(scope="module")
def imported(wheels, tmp_path_factory) -> Path:
    return kernel_path.import_sglang(tmp_path_factory.mktemp("imported") / "kernels", wheels)


@pytest.fixture
def on_path(imported, monkeypatch):
    yield from kernel_path.on_kernel_path(monkeypatch, imported)


def test_imported_folders_load_with_their_origin_and_sglangs_shapes(on_path):
    record = json.loads((on_path / importing.VENDORED / "SOURCE.json").read_text())
    assert record["sglang"]["version"] == "0.5.23" and record["apache_tvm_ffi"]["version"] == "0.1.11"
    for port, recipe in importing.RECIPES.items():
        folder = suite.load(recipe.name)
        origin = folder.spec.origin
        assert (origin.project, origin.version, origin.port) == ("sglang", "0.5.23", port)
        assert origin.file == f"sglang/kernels/jit/csrc/{recipe.file}"
        assert folder.baseline.build.compiler == "nvcc" and folder.baseline.kernel == recipe.name
        assert folder.spec.args == suite.load(port).spec.args  # the port's signature: the bench times both alike
        assert "odd" not in folder.spec.shapes and folder.spec.shapes["serving"]
    # SGLang's rmsnorm takes H 11008 in neither path (not a multiple of 512 above 8192); its
    # fused_add_rmsnorm stops at 8192 before Blackwell: those shapes are left out, with the reason said.
    assert {"T": 128, "H": 11008} not in suite.load("sglang_rmsnorm").spec.shapes["astra"]
    assert max(s["H"] for s in suite.load("sglang_fused_add_rmsnorm").spec.shapes["astra"]) == 8192


def test_sources_are_vendored_byte_for_byte_with_the_licences(imported, wheels):
    sglang_wheel = next(w for w in wheels if w.name.startswith("sglang-"))
    record = json.loads((imported / importing.VENDORED / "SOURCE.json").read_text())
    with zipfile.ZipFile(sglang_wheel) as archive:
        for recipe in importing.RECIPES.values():
            name = f"{importing.JIT}/csrc/{recipe.file}"
            shipped = archive.read(name)
            assert (imported / importing.VENDORED / "csrc" / recipe.file).read_bytes() == shipped
            assert record["sglang"]["files"][name] == hashlib.sha256(shipped).hexdigest()
        assert (imported / importing.VENDORED / "include" / "sgl_kernel" / "vec.cuh").read_bytes() == \
            archive.read(f"{importing.JIT}/include/sgl_kernel/vec.cuh")
    assert "Apache License" in (imported / importing.VENDORED / "LICENSE.sglang").read_text()
    assert (imported / importing.VENDORED / "tvm_ffi" / "include" / "tvm" / "ffi" / "container" / "tensor.h").is_file()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here (SGLang's kernels compile with nvcc only)")
def test_every_imported_baseline_compiles_for_sm_90(on_path, tmp_path):
    """At a shape of each kernel path SGLang's host code picks (warp, half-block and CTA rmsnorm),
    in bf16 and fp16: nvcc builds a cubin whose one entry takes the port's arguments."""
    shapes = {"sglang_rmsnorm": [{"T": 4, "H": 128}, {"T": 4, "H": 4096}, {"T": 4, "H": 2304}],
              "sglang_fused_add_rmsnorm": [{"T": 4, "H": 4096}], "sglang_silu_and_mul": [{"T": 4, "D": 14336}],
              "sglang_rotary_embedding": [dict(N=4, HQ=32, HK=8, D=128, R=128, P=4096), dict(N=4, HQ=32, HK=8, D=128, R=64, P=4096)],
              "sglang_per_token_group_quant_fp8": [{"T": 4, "H": 7168}]}
    for name, cases in shapes.items():
        folder = suite.load(name)
        for shape in cases:
            for dtype, variant in [(d, v) for d in folder.spec.dtypes for v in folder.spec.variants]:
                request = suite.request(folder, "baseline", shape, dtype, variant, arch="sm_90")
                module = compile_source(request.source, request.options, cache=False)
                entry = module.kernel(name)
                assert module.arch == "sm_90" and module.nvrtc_version.startswith("nvcc ")
                assert len(entry.params) == len(folder.spec.args) and entry.resources.registers > 0


def test_what_is_not_imported_is_said_and_unknown_names_are_refused(imported, wheels, capsys, tmp_path):
    froms = [a for w in wheels for a in ("--from", str(w))]
    assert cli.main(["import-sglang", str(tmp_path / "k"), *froms, "--kernel", "rmsnorm"]) == 0
    out = capsys.readouterr().out
    assert "sglang_rmsnorm" in out and "sglang_silu_and_mul" not in out and "not taken: astra 128x11008" in out
    assert cli.main(["import-sglang", str(tmp_path / "k"), *froms, "--kernel", "merge_attn_states"]) == 2
    err = capsys.readouterr()
    assert "merge_attn_states: SGLang's JIT sources hold no merge_attn_states" in err.out + err.err
    assert "Traceback" not in err.out + err.err


def test_a_missing_source_is_named_with_how_to_get_it(tmp_path, capsys):
    assert cli.main(["import-sglang", str(tmp_path / "k"), "--from", str(tmp_path)]) == 2
    text = "".join(capsys.readouterr())
    assert "no SGLang JIT kernel sources" in text and "pip download --no-deps sglang" in text
    (tmp_path / "not-a.whl").write_text("x")
    assert cli.main(["import-sglang", str(tmp_path / "k"), "--from", str(tmp_path / "not-a.whl")]) == 2
    assert "not a readable wheel" in "".join(capsys.readouterr())


class _Worker:
    """Times a kernel by its folder (the label's first word): SGLang's own kernel 5 us, the port 6, the rest 1."""

    device = {"name": "Scripted GPU", "arch": "sm_90", "multiprocessors": 132}

    def evaluate(self, request):
        us = {"sglang_rmsnorm": 5.0, "rmsnorm": 6.0}.get(request.label.split(" ")[0], 1.0)
        timing = Timing(median_us=us, min_us=us, max_us=us, spread=0.0, samples_us=[us], launches_per_replay=1,
                        input_sets=1, method="graph")
        return EvaluationResult(status="ok", timing=timing)


def _handmade_import(root: Path) -> None:
    """A folder as import-sglang names it, with an origin, made from the port's files (nothing compiles here)."""
    folder = root / "sglang_rmsnorm"
    folder.mkdir(parents=True)
    for name in ("baseline.cu", "template.cu"):
        (folder / name).write_text((suite.SUITE_DIR / "rmsnorm" / name).read_text())
    (folder / "reference.py").write_text("from astra_kernels.kernels_sglang.rmsnorm.reference import make_inputs, "
                                         "reference  # noqa: F401\n")
    (folder / "spec.py").write_text(
        "from astra_kernels.kernels_sglang.rmsnorm.spec import SPEC as PORT\n"
        "from astra_kernels.suite.schema import Origin\n"
        "SPEC = PORT.model_copy(update={'name': 'sglang_rmsnorm', 'anchors': [], 'origin': Origin(project='sglang', "
        "version='0.5.23', file='sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh', op='rmsnorm', port='rmsnorm')})\n")


def test_bench_shows_sglangs_own_kernel_as_a_peer(tmp_path, monkeypatch):
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

    _handmade_import(tmp_path)
    monkeypatch.setenv(suite.KERNELS_PATH, str(tmp_path))
    suite.load.cache_clear()
    try:
        kept = DispatchTable(kernel="rmsnorm", dtype="bf16", variant="default", l2="warm",
                             entries=[DispatchEntry(shape={"T": 16, "H": 4096}, config={}, source="baseline")])
        report = benchmark.bench(_Worker(), {"rmsnorm": [{"T": 16, "H": 4096}], "silu_and_mul": [{"T": 16, "D": 4096}]},
                                 torch_modes=(), tables={"rmsnorm": kept})
    finally:
        suite.load.cache_clear()
    assert report.table_l2 == {"rmsnorm": "warm"}  # the regime of each table the tuned column ran
    norm, act = report.rows
    assert norm.sglang_jit_us == 5.0 and norm.baseline_us == 6.0 and norm.best_peer == ("SGLang JIT", 5.0)
    assert act.sglang_jit_us is None and act.sglang_jit_status == ""  # nothing imported for it: no column value
    assert report.sglang_jit == {"rmsnorm": "SGLang 0.5.23, sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh "
                                            "(sglang_rmsnorm)"}
    text = benchmark.render_markdown(report)
    assert "SGLang JIT column: rmsnorm: SGLang 0.5.23" in text and "| 5.00 |" in text


def test_a_table_of_sglangs_own_kernel_is_not_exported(on_path, tmp_path, capsys):
    """The export inlines every source into one .cu; SGLang's, with its headers and nvcc's C++20, is refused by name."""
    from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable

    table = DispatchTable(kernel="sglang_rmsnorm", dtype="bf16", variant="default",
                          entries=[DispatchEntry(shape={"T": 16, "H": 4096}, config={}, source="baseline")])
    (tmp_path / "table.json").write_text(table.model_dump_json())
    assert cli.main(["export", str(tmp_path / "table.json"), "--out", str(tmp_path / "out")]) == 1
    text = "".join(capsys.readouterr())
    assert "is built with its own compiler settings" in text and "Traceback" not in text
