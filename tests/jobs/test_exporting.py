"""`astra export` without a GPU: the shipped H200 tables exported, the standalone .cu compiled by
NVRTC (device part: every kernel byte for byte the machine code the tuner's own compile of that
configuration gives) and by nvcc (host and device, when nvcc is installed), and its C++ pick run
as a plain host program against dispatch.py's pick at the table's, the spec's and random shapes
on two GPU sizes and two architectures. Bad sources and bad calls fail with errors that say why."""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from astra_kernels.cli import main
from astra_kernels.jobs.exporting import cuda_file as export, guide as export_guide
from astra_kernels import suite
from astra_kernels.suite import tuned_tables
from astra_kernels.runtime import export_format
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.runtime.exported_kernel import load_callable
from astra_kernels.tools.toolchain.compiler import compile_source
from astra_kernels.tools.errors import LaunchArgumentError
from astra_kernels.tools.toolchain.interop import TensorView
from support.mixed_table import mixed_silu_and_mul_table

NVCC = shutil.which("nvcc")
KERNELS = ["rmsnorm", "silu_and_mul", "fused_add_rmsnorm", "merge_attn_states"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    folders = {}
    for kernel in KERNELS:
        folders[kernel] = root / kernel
        export.export(export.resolve_source(None, "h200", kernel), folders[kernel],
                      command=f"astra export --gpu-kind h200 --kernel {kernel}")
    return folders


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "export.json").read_text())


@pytest.mark.parametrize("kernel", KERNELS)
def test_folder_holds_every_configuration_of_the_table(exported, kernel):
    folder = exported[kernel]
    manifest = _manifest(folder)
    table = DispatchTable.model_validate_json((tuned_tables.TUNED_DIR / "h200" / f"{kernel}.json").read_text())
    for name in (f"{kernel}.cu", f"{kernel}.h", f"{kernel}_launch.py", "README.md", "export.json", "dispatch.json"):
        assert (folder / name).is_file(), name
    binaries = manifest["binaries"]
    configs = [(b["source"], b["config"]) for b in binaries]
    for entry in table.entries:
        wanted = ("baseline", {}) if entry.source == "baseline" else ("template", entry.config)
        assert wanted in configs, f"{kernel} {entry.shape}: {wanted} has no kernel in the file"
    if table.general is not None:  # a table rebuilt from a replay may have none
        assert ("template", table.general) in configs
    cu = (folder / f"{kernel}.cu").read_text()
    entry_names = {"template": suite.load(kernel).template.kernel, "baseline": suite.load(kernel).baseline.kernel}
    for b in binaries:  # each kernel is the source text renamed, with its own defines
        assert f"#define {entry_names[b['source']]} {b['name']}\n" in cu, b["name"]
        for name, value in {**b["config"], **b["derived"]}.items():
            assert f"#define {name} {value}\n" in cu
    head = cu[:cu.index("#define DTYPE")]
    assert f"Source table:  kernels_sglang/tuned/h200/{kernel}.json" in head
    assert "Tuned on:      NVIDIA H200" in head and "Exported:      20" in head
    assert f"by `astra export --gpu-kind h200 --kernel {kernel}`" in head
    assert "nvcc -arch=sm_90 -std=c++17 --use_fast_math" in head
    assert f"cudaError_t {kernel}_launch(" in head
    readme = (folder / "README.md").read_text()
    swap = export_guide.swap_in(kernel, "default")
    assert f"sgl_kernel.{swap.op} = {swap.op}" in readme and "nvcc -arch=sm_90" in readme


def _text_sections(cubin: bytes) -> dict[str, bytes]:
    """The ELF sections of a cubin by name (a kernel's machine code is `.text.<kernel>`)."""
    offset, = struct.unpack_from("<Q", cubin, 0x28)
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, offset + i * size) for i in range(count)]
    table = headers[names][4]

    def name(at: int) -> str:
        return cubin[table + at:cubin.index(b"\0", table + at)].decode()

    return {name(h[0]): cubin[h[4]:h[4] + h[5]] for h in headers}


@pytest.mark.parametrize("kernel", KERNELS)
def test_device_part_compiles_to_the_tuners_machine_code(exported, kernel):
    """NVRTC compiles the file's device part (the host part hidden by __CUDACC_RTC__) with each
    group's flags, and each kernel's code equals the tuner's compile of its configuration."""
    _assert_tuners_machine_code(exported[kernel])


def _assert_tuners_machine_code(folder: Path) -> None:
    kernel_export = load_callable(folder)
    modules = kernel_export.compile("sm_90")
    names = set().union(*(m.kernels for m in modules))
    binaries = kernel_export.manifest["binaries"]
    assert names == {b["name"] for b in binaries}
    code = {}
    for module in modules:
        code.update(_text_sections(module.cubin))
    folder = kernel_export.kernel_folder
    for b in binaries:
        request = suite.request(folder, b["source"], folder.spec.parse_shape(b["at"]), kernel_export.dtype,
                                kernel_export.table.variant, b["config"] or None,
                                source=kernel_export.table.source_of(b["source"]))
        tuned = _text_sections(compile_source(request.source, request.options).cubin)[f".text.{request.kernel}"]
        assert code[f".text.{b['name']}"] == tuned, f"{b['name']} differs from the tuner's binary at {b['at']}"


PICK_MAIN = r"""
#include <cstdio>
#include "KERNEL.h"
int main() {
    long long shape[SYMBOLS];
    int sms, sm;
    while (scanf("%d %d", &sms, &sm) == 2) {
        for (int s = 0; s < SYMBOLS; ++s) scanf("%lld", &shape[s]);
        KERNEL_plan plan;
        if (KERNEL_pick(shape, sms, sm, &plan) != 0) { printf("error\t%s\n", plan.error); continue; }
        printf("%s\t%s\t%u,%u,%u\t%u,%u,%u\t%llu\t%d\t", plan.kernel ? plan.kernel : "-", plan.picked_by,
               plan.grid[0], plan.grid[1], plan.grid[2], plan.block[0], plan.block[1], plan.block[2], plan.shared_bytes,
               plan.source);
        for (int p = 0; p < PARAMS; ++p) printf("%lld,", plan.config[p]);
        printf("\n");
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def built(exported, tmp_path_factory) -> dict[str, Path]:
    """Each .cu built by nvcc as its header says (host and device), and a host program around its pick."""
    if NVCC is None:
        pytest.skip("nvcc is not installed here: the whole-file build and the C++ pick are not checked")
    root = tmp_path_factory.mktemp("nvcc")
    return {kernel: _pick_program(folder, root) for kernel, folder in exported.items()}


def _pick_program(folder: Path, root: Path) -> Path:
    """The exported folder's .cu built by nvcc per its header, linked into a program that reads
    queries (sms, sm, the shape) and prints the C++ pick of each."""
    manifest = _manifest(folder)
    kernel = manifest["kernel"]
    objects = []
    for args, name in export.object_builds(kernel, [export_format.Group(**g) for g in manifest["groups"]], "sm_90"):
        build = subprocess.run([NVCC, *args], cwd=folder, capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, f"nvcc {' '.join(args)}:\n{build.stderr[-3000:]}"
        objects.append(str(folder / name))
    main_cu = root / f"{kernel}_pick.cu"
    params = export.plan_array_sizes(DispatchTable.model_validate(manifest["table"]))[0]
    main_cu.write_text(PICK_MAIN.replace("KERNEL", kernel).replace("SYMBOLS", str(len(suite.load(kernel).spec.symbols)))
                       .replace("PARAMS", str(params)))
    program = root / f"{kernel}_pick"
    link = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", f"-I{folder}", str(main_cu), *objects, "-o", str(program)],
                          capture_output=True, text=True, timeout=600)
    assert link.returncode == 0, f"linking the pick program of {kernel}:\n{link.stderr[-3000:]}"
    return program


def _queries(kernel: str, count: int = 60, seed: int = 11, table: DispatchTable | None = None) -> list[tuple[int, int, dict]]:
    """The table's and the spec's shapes, the sweep's (its held-out widths, where the pick weighs the
    work per thread, among them) and random ones (odd sizes among them), at two GPU sizes and on
    sm_90 and sm_80 (where cluster configurations are excluded, so picks move)."""
    spec = suite.load(kernel).spec
    table = table or DispatchTable.model_validate_json((tuned_tables.TUNED_DIR / "h200" / f"{kernel}.json").read_text())
    shapes = export.covered_shapes(table, suite.load(kernel), spec.sweep_shapes())
    rng = random.Random(seed)
    for _ in range(count):
        shape = {}
        for symbol in spec.symbols:
            typical = sorted({s[symbol] for s in spec.all_shapes()})
            base = rng.choice(typical)
            shape[symbol] = max(1, rng.choice([base, base + rng.randint(-3, 3), int(base * rng.uniform(0.3, 3))]))
        shapes.append(shape)
    return [(sms, sm, shape) for shape in shapes for sms, sm in ((132, 90), (114, 90), (132, 80)) if rng.random() < 0.5
            or (sms, sm) == (132, 90)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_sweep_shape_s_pick_is_a_kernel_of_the_file(exported, kernel):
    """The sweep's held-out widths included: at 3584 the norms' picks move the exact-row entries of
    4096 to STATIC_ROW 1, a binary with the row length 3584 compiled in, which the file must hold
    (a server meets every token count of its width; KERNEL_launch would refuse the shape)."""
    kernel_export = load_callable(exported[kernel])
    spec = suite.load(kernel).spec
    assert [spec.label(s) for s in spec.sweep_shapes() if kernel_export.plan(s).kernel is None] == []


@pytest.mark.parametrize("kernel", KERNELS)
def test_cpp_pick_is_dispatch_py_pick(exported, built, kernel):
    _assert_cpp_pick_is_python_pick(exported[kernel], built[kernel], _queries(kernel))


def _assert_cpp_pick_is_python_pick(folder: Path, program: Path, queries: list[tuple[int, int, dict]]) -> None:
    kernel_export = load_callable(folder)
    kernel = kernel_export.name
    spec = kernel_export.spec
    params = export.plan_array_sizes(kernel_export.table)[0]
    text = "".join(f"{sms} {sm} {' '.join(str(shape[s]) for s in spec.symbols)}\n" for sms, sm, shape in queries)
    run = subprocess.run([str(program)], input=text, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == len(queries)
    missing = 0
    for (sms, sm, shape), line in zip(queries, lines):
        where = f"{kernel} {spec.label(shape)} sms={sms} sm_{sm}"
        try:
            plan = kernel_export.plan(shape, sms, f"sm_{sm}")
        except suite.AstraError as exc:
            assert line.startswith("error"), f"{where}: Python says {exc}, C++ says {line}"
            continue
        assert not line.startswith("error"), f"{where}: C++ says {line}, Python picks {plan}"
        name, picked_by, grid, block, shared, source, config = line.split("\t")
        assert picked_by == plan.picked_by, where
        assert name == (plan.kernel or "-"), f"{where}: C++ launches {name}, Python {plan.kernel}"
        assert grid == ",".join(str(d) for d in (*plan.grid, 1, 1)[:3]), where
        assert block == ",".join(str(d) for d in (*plan.block, 1, 1)[:3]), where
        assert int(shared) == plan.shared_bytes, where
        assert int(source) == kernel_export.table.source_names().index(plan.source), where
        values = [plan.config[n] for n in kernel_export.table.source_of(plan.source).names]
        assert config == "".join(f"{v}," for v in values + [0] * (params - len(values))), where
        missing += plan.kernel is None
    assert missing < len(queries)  # most random shapes find their kernel in the file


def test_cpp_launch_without_a_kernel_for_the_pick_says_which_shape(exported, built):
    """merge_attn_states derives defines from D: a D the export never covered has no binary, and
    the C pick says so (launch returns cudaErrorNotSupported with that message)."""
    kernel_export = load_callable(exported["merge_attn_states"])
    shape = {"N": 64, "HD": 8, "D": 88}
    assert kernel_export.plan(shape).kernel is None
    run = subprocess.run([str(built["merge_attn_states"])], input="132 90 64 8 88\n", capture_output=True,
                         text=True, timeout=60)
    assert run.stdout.startswith("-\t"), run.stdout


def test_a_width_the_file_does_not_cover_runs_the_files_nearest_kernel_that_runs_there(exported, built):
    """silu_and_mul's STATIC_D picks compile the row length in, so at a width none of the covered
    shapes has (13824, Llama-2-13B's) the pick's binary is not in the file; the launch, which cannot
    compile one, runs the file's binary that runs there nearest the pick (fewest value steps: at
    4x13824 the same launch with the row length read at run time), and the C pick and the Python
    callable say the same. merge_attn_states' uncovered D (the test above) has no such binary: still refused."""
    kernel_export = load_callable(exported["silu_and_mul"])
    binaries = _manifest(exported["silu_and_mul"])["binaries"]
    shapes = [{"T": 4, "D": 13824}, {"T": 300, "D": 8960}, {"T": 5000, "D": 9728}]
    for shape in shapes:
        pick = kernel_export.table.pick(shape, 132, "sm_90")
        plan = kernel_export.plan(shape, 132, "sm_90")
        assert pick.config["STATIC_D"] == 1 and plan.kernel is not None, shape
        assert plan.picked_by == pick.picked_by + "; not in this file, so its nearest kernel that runs here"
        assert plan.config != pick.config and plan.config in [b["config"] for b in binaries], shape
    # where the file holds the pick's configuration with the row length read at run time, that one
    assert kernel_export.plan(shapes[0], 132, "sm_90").config == {**kernel_export.table.pick(shapes[0]).config,
                                                                  "STATIC_D": 0}
    _assert_cpp_pick_is_python_pick(exported["silu_and_mul"], built["silu_and_mul"],
                                    [(132, 90, shape) for shape in shapes])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """The agent-like table (tests/support/mixed_table.py) exported from a folder holding its dispatch.json."""
    root = tmp_path_factory.mktemp("mixed")
    (root / "agent").mkdir()
    (root / "agent" / "dispatch.json").write_text(mixed_silu_and_mul_table().model_dump_json(indent=2))
    export.export(export.resolve_source(root / "agent"), root / "out")
    return root / "out"


def test_a_table_with_rewrites_and_model_templates_exports_each_to_the_tuners_code(mixed):
    """A table whose shapes are held by a rewrite, a model's template, the suite's template and the
    baseline: the file holds a kernel of each at their shapes, each NVRTC-compiled to the machine
    code of the tuner's own compile of that source, and the pick names the source at its shapes."""
    manifest = _manifest(mixed)
    sources = {b["source"] for b in manifest["binaries"]}
    assert {"candidate-3", "candidate-5", "template"} <= sources
    _assert_tuners_machine_code(mixed)
    kernel_export = load_callable(mixed)
    assert kernel_export.plan({"T": 16, "D": 4096}).picked_by == "tuned: candidate-3"
    plan = kernel_export.plan({"T": 16, "D": 12288})
    assert (plan.source, plan.config, plan.picked_by) == ("candidate-5", {"THREADS": 256, "SPLIT": 2}, "tuned: candidate-5")
    assert plan.grid == (32,) and plan.block == (256,)
    # 16x4095 is nearest 16x4096, whose rewrite needs an even D: the next nearest entry's source runs
    assert kernel_export.plan({"T": 16, "D": 4095}).source != "candidate-3"
    cu = (mixed / "silu_and_mul.cu").read_text()
    assert "candidate-3: kernel silu_flat" in cu and "candidate-5 THREADS=256 SPLIT=2" in cu


def test_cpp_pick_of_a_table_with_rewrites_is_dispatch_py_pick(mixed, tmp_path):
    if NVCC is None:
        pytest.skip("nvcc is not installed here: the whole-file build and the C++ pick are not checked")
    queries = _queries("silu_and_mul", table=mixed_silu_and_mul_table())
    queries += [(132, 90, {"T": 16, "D": 4095}), (132, 90, {"T": 31, "D": 5121})]
    _assert_cpp_pick_is_python_pick(mixed, _pick_program(mixed, tmp_path), queries)


def test_a_table_source_that_is_not_a_kernel_is_refused_by_name(tmp_path):
    table = mixed_silu_and_mul_table().model_dump()
    table["sources"]["candidate-3"] = table["sources"]["candidate-3"].replace("//@ kernel: silu_flat\n", "")
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    with pytest.raises(export_format.ExportError, match="the table's source candidate-3"):
        export.export(export.resolve_source(tmp_path / "dispatch.json"), tmp_path / "out")
    table = mixed_silu_and_mul_table().model_dump()
    table["entries"][0]["source"] = "candidate-9"
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    with pytest.raises(export_format.ExportError, match="runs source 'candidate-9'"):
        export.resolve_source(tmp_path / "dispatch.json")
    table = mixed_silu_and_mul_table().model_dump()
    table["entries"][0]["config"] = {"THREADS": 96, "SPLIT": 1}
    table["entries"][0]["source"] = "candidate-5"
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    with pytest.raises(export_format.ExportError, match="THREADS=96 is not among the candidate-5's values"):
        export.export(export.resolve_source(tmp_path / "dispatch.json"), tmp_path / "out")


def test_exports_from_a_tuning_folder_and_with_extra_shapes(tmp_path):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(tuned_tables.TUNED_DIR / "h200" / "merge_attn_states.json", tuned / "dispatch.json")
    (tuned / "report.json").write_text(json.dumps({"device": "NVIDIA H200", "arch": "sm_90", "date": "2026-11-23"}))
    source = export.resolve_source(tuned)
    assert source.device == "NVIDIA H200 (sm_90)" and source.tuned_date == "2026-11-23"
    result = export.export(source, tmp_path / "out", shapes=[{"N": 64, "HD": 8, "D": 88}])
    kernel_export = load_callable(tmp_path / "out")
    assert kernel_export.plan({"N": 64, "HD": 8, "D": 88}).kernel in {b.name for b in result.binaries}
    assert "Tuned on:      NVIDIA H200 (sm_90), 2026-11-23" in (tmp_path / "out" / "merge_attn_states.cu").read_text()


def test_kernels_needing_different_flags_build_per_group(tmp_path):
    """A table whose configurations differ in fast math: one flag group each, compiled apart by
    NVRTC to the tuner's code, and by nvcc into objects that link with every kernel resolved."""
    table = json.loads((tuned_tables.TUNED_DIR / "h200" / "silu_and_mul.json").read_text())
    entry = {json.dumps(e["shape"], sort_keys=True): e for e in table["entries"]}
    entry['{"D": 5120, "T": 32}']["config"]["FAST_MATH"] = 0
    entry['{"D": 14336, "T": 16384}'].update(config={}, source="baseline")  # SGLang's kernel kept at a shape
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    result = export.export(export.resolve_source(tmp_path / "dispatch.json"), tmp_path / "out")
    # the template with and without fast math, and the baseline (at the shapes the table keeps it) with its register cap
    assert {(g.fast_math, g.max_registers) for g in result.groups} == {(True, 0), (False, 0), (True, 128)}
    _assert_tuners_machine_code(tmp_path / "out")
    assert load_callable(tmp_path / "out").plan({"T": 32, "D": 5120}).kernel in \
        {b.name for b in result.binaries if not b.fast_math}
    if NVCC is None:
        pytest.skip("nvcc is not installed here: the per-group build is not checked")
    objects = []
    for args, name in export.object_builds("silu_and_mul", result.groups, "sm_90"):
        build = subprocess.run([NVCC, *args], cwd=tmp_path / "out", capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, build.stderr[-3000:]
        objects.append(tmp_path / "out" / name)
    assert len(objects) == 3 and f"nvcc {' '.join(args)}" in (tmp_path / "out" / "silu_and_mul.cu").read_text()
    library = tmp_path / "libsilu_and_mul.so"
    link = subprocess.run([NVCC, "-shared", *map(str, objects), "-o", str(library)], capture_output=True, text=True,
                          timeout=600)
    assert link.returncode == 0, link.stderr[-3000:]
    if shutil.which("nm"):
        undefined = subprocess.run(["nm", "-u", str(library)], capture_output=True, text=True).stdout
        assert "silu_and_mul_" not in undefined, undefined


def test_bad_sources_say_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(suite.UnknownKernelError, match="unknown kernel 'nosuch'"):
        export.resolve_source(None, "h200", "nosuch")
    with pytest.raises(export_format.ExportError, match="no tables are shipped for GPU kind 'a100'"):
        export.resolve_source(None, "a100", "rmsnorm")
    with pytest.raises(export_format.ExportError, match="no h200 table tuned with cold L2 is shipped for topk_softmax; h200 cold has: rmsnorm"):
        shipped = tmp_path / "shipped"
        (shipped / "h200").mkdir(parents=True)
        (shipped / "h200" / "rmsnorm.json").write_text((tuned_tables.TUNED_DIR / "h200" / "rmsnorm.json").read_text())
        monkeypatch.setattr(tuned_tables, "TUNED_DIR", shipped)
        export.resolve_source(None, "h200", "topk_softmax")
    monkeypatch.undo()
    with pytest.raises(export_format.ExportError, match="has no dispatch.json"):
        export.resolve_source(tmp_path)
    with pytest.raises(export_format.ExportError, match="does not exist"):
        export.resolve_source(tmp_path / "missing")
    with pytest.raises(export_format.ExportError, match="--gpu-kind with --kernel"):
        export.resolve_source(None, "h200", None)
    (tmp_path / "dispatch.json").write_text("{}")
    with pytest.raises(export_format.ExportError, match="holds no dispatch table"):
        export.resolve_source(tmp_path)
    table = json.loads((tuned_tables.TUNED_DIR / "h200" / "rmsnorm.json").read_text())
    table["entries"][0]["config"]["ROW_THREADS"] = 48
    (tmp_path / "dispatch.json").write_text(json.dumps(table))
    with pytest.raises(export_format.ExportError, match="ROW_THREADS=48 is not among the template's values"):
        export.export(export.resolve_source(tmp_path), tmp_path / "out")
    with pytest.raises(export_format.ExportError, match="a table of rmsnorm, not silu_and_mul"):
        export.resolve_source(tmp_path, kernel="silu_and_mul")


def test_the_l2_regime_picks_the_shipped_table_and_checks_a_given_one(tmp_path, monkeypatch, capsys):
    shipped = tmp_path / "shipped"
    for folder, l2 in ((shipped / "h100", "cold"), (shipped / "h100" / "warm", "warm")):
        folder.mkdir(parents=True)
        table = json.loads((tuned_tables.TUNED_DIR / "h200" / "rmsnorm.json").read_text())
        (folder / "rmsnorm.json").write_text(json.dumps({**table, "l2": l2}))
    (shipped / "h100" / "silu_and_mul.json").write_text((tuned_tables.TUNED_DIR / "h200" / "silu_and_mul.json").read_text())
    monkeypatch.setattr(tuned_tables, "TUNED_DIR", shipped)
    assert export.resolve_source(None, "h100", "rmsnorm").table.l2 == "cold"
    warm = export.resolve_source(None, "h100", "rmsnorm", l2="warm")
    assert warm.table.l2 == "warm" and warm.path == shipped / "h100" / "warm" / "rmsnorm.json"
    with pytest.raises(export_format.ExportError,
                       match="no h100 table tuned with warm L2 is shipped for silu_and_mul; h100 warm has: rmsnorm"):
        export.resolve_source(None, "h100", "silu_and_mul", l2="warm")
    with pytest.raises(export_format.ExportError, match="unknown L2 regime 'hot'"):
        export.resolve_source(None, "h100", "rmsnorm", l2="hot")
    with pytest.raises(export_format.ExportError, match="rmsnorm.json was tuned with cold L2, not warm"):
        export.resolve_source(shipped / "h100" / "rmsnorm.json", l2="warm")
    assert main(["export", "--gpu-kind", "h100", "--kernel", "rmsnorm", "--l2", "warm", "--out", str(tmp_path / "w")]) == 0
    assert "tuned with warm L2" in capsys.readouterr().out
    guide = (tmp_path / "w" / "README.md").read_text()
    assert "with warm L2" in guide and "timed with the inputs resident in L2" in guide
    assert "(times with warm L2)" in (tmp_path / "w" / "rmsnorm.cu").read_text()
    assert main(["export", "--gpu-kind", "h100", "--kernel", "silu_and_mul", "--l2", "warm"]) == 1
    assert "error: no h100 table tuned with warm L2 is shipped for silu_and_mul" in capsys.readouterr().out


def test_cli_export_build_without_a_cuda_pytorch_is_one_line_and_keeps_the_folder(tmp_path, capsys):
    """--build builds the op's library after the folder is written; where it cannot (here: no CUDA in
    this PyTorch, or no PyTorch), one line says why and the written folder stays."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.version.cuda is not None:
        pytest.skip("a CUDA build of PyTorch would build the op: tests/jobs/test_torch_op_on_gpu.py covers that")
    assert main(["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", str(tmp_path / "b"),
                 "--build"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "error:" in out and ("has no CUDA" in out or "--build needs PyTorch" in out), out
    assert "Traceback" not in out and (tmp_path / "b" / "silu_and_mul.cu").is_file()


def test_cli_export(tmp_path, capsys):
    assert main(["export", "--gpu-kind", "h200", "--kernel", "silu_and_mul", "--out", str(tmp_path / "s"),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["kernels"]) == {b["name"] for b in _manifest(tmp_path / "s")["binaries"]}
    cu = (tmp_path / "s" / "silu_and_mul.cu").read_text()
    assert f"by `astra export --gpu-kind h200 --kernel silu_and_mul --out {tmp_path / 's'} --json`" in cu
    assert main(["export", str(tmp_path / "nothing-here")]) == 1
    assert "nothing-here does not exist" in " ".join(capsys.readouterr().out.split())


def _view(shape, dtype="bf16", ptr=1 << 20, strides=None, readonly=False):
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    return TensorView(ptr, tuple(shape), tuple(strides), dtype, "cuda", 0, readonly)


def test_callable_checks_each_argument(exported):
    """The checks run before any GPU work, so they are exercised here on described tensors."""
    rms = load_callable(exported["rmsnorm"])
    x, w, out = _view((4, 4096)), _view((4096,)), _view((4, 4096))
    eps = {"eps": 1e-5}
    assert rms._shape_and_scalars([x, w, out], eps) == (
        {"T": 4, "H": 4096}, {"eps": np.float32(1e-5), "tokens": 4, "hidden": 4096})
    cases = [
        ([_view((4, 4096), "fp16"), w, out], "argument x is fp16; this export takes bf16"),
        ([x, _view((4095,)), out], r"argument w has shape \(4095,\); with T = 4, H = 4096 it must be \(4096,\)"),
        ([x, w, _view((4, 4096), strides=(1, 4))], "argument out is not contiguous"),
        ([x, _view((4096,), ptr=(1 << 20) + 2), out], "not 16-byte aligned"),
        ([x, w, _view((4, 4096), readonly=True)], "argument out is read-only"),
        ([_view((4, 4096, 1)), w, out], "argument x has 3 dimensions; it takes 2"),
        ([x, w, _view((5, 4096))], r"argument out has shape \(5, 4096\); with T = 4"),
    ]
    for views, message in cases:
        with pytest.raises(LaunchArgumentError, match=message):
            rms._shape_and_scalars(views, eps)
    with pytest.raises(LaunchArgumentError, match="needs eps="):
        rms._shape_and_scalars([x, w, out], {})
    with pytest.raises(LaunchArgumentError, match="has no scalar epsilon"):
        rms._shape_and_scalars([x, w, out], {"epsilon": 1e-6})
    with pytest.raises(LaunchArgumentError, match="tokens=3, but the tensors say 4"):
        rms._shape_and_scalars([x, w, out], {"eps": 1e-6, "tokens": 3})
    with pytest.raises(LaunchArgumentError, match=r"eps=\[1\] is not a fp32"):
        rms._shape_and_scalars([x, w, out], {"eps": [1]})
    # the second call at a shape reads what the first worked out: the same answer, nothing parsed
    assert rms._shape_and_scalars([x, w, out], eps)[1] is rms._shape_and_scalars([x, w, out], eps)[1]
    with pytest.raises(LaunchArgumentError, match="takes 3 tensors"):
        rms(object(), object())
    silu = load_callable(exported["silu_and_mul"])
    assert silu._shape_and_scalars([_view((3, 2000)), _view((3, 1000))], {})[0] == {"T": 3, "D": 1000}
    with pytest.raises(LaunchArgumentError, match=r"argument x has shape \(3, 2001\)"):
        silu._shape_and_scalars([_view((3, 2001)), _view((3, 1000))], {})
    with pytest.raises(export_format.ExportError, match="no export.json"):
        load_callable(exported["rmsnorm"].parent)


def test_the_rotary_callable_takes_q_and_k_as_views_into_a_qkv_output(tmp_path):
    """q and k carry row strides: rows apart by a 16-byte multiple are taken and their strides passed
    as q_stride and k_stride (never the caller's); rows not contiguous, overlapping or misaligned
    are one-line errors; the other tensors must still be contiguous; the scalars follow the strides."""
    export.export(export.resolve_source(None, "h200", "rotary_embedding"), tmp_path / "r")
    rope = load_callable(tmp_path / "r")
    heads = {"num_q_heads": 32, "num_k_heads": 8, "head_dim": 128}
    positions, cache = _view((4,), "int64"), _view((4096, 128), "fp32")
    q, k = _view((4, 4096), strides=(6144, 1)), _view((4, 1024), strides=(6144, 1), ptr=(1 << 20) + 8192)
    shape, values = rope._shape_and_scalars([positions, q, k, cache], heads)
    assert shape == {"N": 4, "HQ": 32, "HK": 8, "D": 128, "R": 128, "P": 4096}
    assert (values["q_stride"], values["k_stride"]) == (6144, 6144)
    _, contiguous = rope._shape_and_scalars([positions, _view((4, 4096)), _view((4, 1024)), cache], heads)
    assert (contiguous["q_stride"], contiguous["k_stride"]) == (4096, 1024)
    single = rope._shape_and_scalars([_view((1,), "int64"), _view((1, 4096), strides=(3, 1)), _view((1, 1024)), cache],
                                     heads)[1]
    assert single["q_stride"] == 4096  # one row: its stride is never used
    cases = [
        ([positions, _view((4, 4096), strides=(1, 4)), k, cache], "argument q has strides .* rows must be contiguous"),
        ([positions, q, _view((4, 1024), strides=(512, 1)), cache], "argument k has strides .* its rows overlap"),
        ([positions, q, _view((4, 1024), strides=(1028, 1)), cache], "argument k has rows 1028 elements apart, not a "
                                                                      "multiple of 16 bytes"),
        ([positions, q, k, _view((4096, 128), "fp32", strides=(256, 1))], "argument cos_sin_cache is not contiguous"),
    ]
    for views, message in cases:
        with pytest.raises(LaunchArgumentError, match=message):
            rope._shape_and_scalars(views, heads)
    with pytest.raises(LaunchArgumentError, match="has no scalar q_stride"):
        rope._shape_and_scalars([positions, q, k, cache], {**heads, "q_stride": 6144})
    # contiguous rows of a width that is no multiple of 16 bytes: taken as any contiguous tensor is
    narrow = {"num_q_heads": 3, "num_k_heads": 1, "head_dim": 20}
    small_cache = _view((64, 20), "fp32")
    got = rope._shape_and_scalars([_view((2,), "int64"), _view((2, 60)), _view((2, 20)), small_cache], narrow)[1]
    assert (got["q_stride"], got["k_stride"]) == (60, 20)


def test_row_strides_need_a_folder_of_format_4_and_a_table_of_the_folders_own_kernels(tmp_path):
    """A rotary folder written before its kernels took q_stride and k_stride (format 3) is refused by
    name (its kernels would index q and k as contiguous); a table carrying an agent's rewrite takes
    q and k contiguous only (nothing checks that a rewrite honours the stride), in the op's C++ too."""
    from astra_kernels.jobs.exporting import torch_op as torch_op_source

    export.export(export.resolve_source(None, "h200", "rotary_embedding"), tmp_path / "r")
    manifest = _manifest(tmp_path / "r")
    manifest["format"] = 3
    (tmp_path / "r" / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(export_format.ExportError, match="export format 3, written before rotary_embedding's kernels "
                                                         "took q_stride and k_stride: export the table again"):
        load_callable(tmp_path / "r")
    source = export.resolve_source(None, "h200", "rotary_embedding")
    folder = suite.load("rotary_embedding")
    carrying = source.table.model_copy(update={"sources": {"candidate-7": folder.template.source}})
    assert export_format.rows_apart_allowed(folder.spec, source.table)
    assert not export_format.rows_apart_allowed(folder.spec, carrying)
    text = torch_op_source.render(carrying, folder)
    assert "ASTRA_TENSOR(q, at::kBFloat16, 2);" in text and "ASTRA_ROWS_APART" not in text.split("void rotary")[1]
    assert "ASTRA_ROW_STRIDE(stride_q_stride, q);" in text  # the contiguous stride, passed as before


def test_callable_refuses_cpu_tensors(exported):
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, 4096, dtype=torch.bfloat16)
    with pytest.raises(LaunchArgumentError, match="argument x is on cpu; the kernel needs CUDA tensors"):
        load_callable(exported["rmsnorm"])(x, x[0], x, eps=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
def test_guide_wrapper_falls_back_to_sgl_kernel_outside_the_export(kernel):
    """The README's drop-in hands what the export does not cover (another dtype) to the original op."""
    torch = pytest.importorskip("torch")
    swap = export_guide.swap_in(kernel, "default")
    calls = []
    namespace = {"torch": torch, "_tuned": lambda *a, **k: calls.append("tuned"),
                 "_original": lambda *a, **k: calls.append("original") or "from sgl_kernel"}
    exec(swap.wrapper.replace("{torch_dtype}", "torch.bfloat16"), namespace)
    wrapper = namespace[swap.op]
    x = torch.zeros(4, 64, dtype=torch.float16)
    args = {"rmsnorm": (x, x[0], 1e-6), "fused_add_rmsnorm": (x, x.clone(), x[0], 1e-6), "silu_and_mul": (x,),
            "merge_attn_states": (x.view(4, 2, 32), torch.zeros(4, 2), x.view(4, 2, 32), torch.zeros(4, 2))}[kernel]
    assert wrapper(*args) == "from sgl_kernel" and calls == ["original"]


def test_export_json_names_its_format_and_a_newer_format_is_refused_by_name(tmp_path):
    """export.json carries the format version the writer used; a folder from a newer writer is
    one clear error, and a folder from before the field (format 1) still loads."""
    source = export.resolve_source(None, gpu_kind="h200", kernel="rmsnorm")
    export.export(source, tmp_path / "out")
    manifest_path = tmp_path / "out" / "export.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["format"] == export_format.FORMAT_VERSION
    del manifest["format"]
    manifest_path.write_text(json.dumps(manifest))
    assert load_callable(tmp_path / "out").name == "rmsnorm"
    manifest["format"] = export_format.FORMAT_VERSION + 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(export_format.ExportError, match=f"export format {export_format.FORMAT_VERSION + 1}"):
        load_callable(tmp_path / "out")


def test_the_rotary_drop_in_takes_sglangs_qkv_views_and_falls_back_where_the_export_does_not_run():
    """SGLang's q and k are column slices of the fused QKV output: rows apart, each row contiguous,
    which the kernel takes (its row strides); a view whose rows are not contiguous, rows apart by
    other than a 16-byte multiple, a GPT-J call under a NeoX export and another dtype go to the
    original op; an idle batch of 0 tokens is nothing to do, for either."""
    torch = pytest.importorskip("torch")
    swap = export_guide.swap_in("rotary_embedding", "default")
    calls = []
    namespace = {"torch": torch, "_tuned": lambda *a, **k: calls.append(("tuned", a[1].stride(), k)),
                 "_original": lambda *a, **k: calls.append(("original",))}
    exec(swap.wrapper.replace("{torch_dtype}", "torch.bfloat16"), namespace)
    rope = namespace[swap.op]
    positions, cache = torch.arange(4), torch.zeros(64, 128)
    qkv = torch.zeros(4, (4 + 2 * 2) * 128, dtype=torch.bfloat16)
    q, k = qkv[:, :512], qkv[:, 512:768]
    rope(positions, q, k, 128, cache, True)
    assert calls == [("tuned", (1024, 1), {"num_q_heads": 4, "num_k_heads": 2, "head_dim": 128})]
    calls.clear()
    rope(positions, q, k, 128, cache, False)
    rope(positions, q.half(), k.half(), 128, cache, True)
    rope(positions, q.t().contiguous().t(), k, 128, cache, True)  # columns contiguous, rows not
    odd = torch.zeros(4, 1028, dtype=torch.bfloat16)  # rows 2056 bytes apart
    rope(positions, odd[:, :512], odd[:, 512:768], 128, cache, True)
    shifted = torch.zeros(4 * 1024 + 1, dtype=torch.bfloat16)[1:].view(4, 1024)  # 2 bytes past an aligned start
    rope(positions, shifted[:, :512], shifted[:, 512:768], 128, cache, True)
    assert calls == [("original",)] * 5
    calls.clear()
    empty = torch.zeros(0, 512, dtype=torch.bfloat16)
    assert rope(torch.arange(0), empty, empty[:, :256], 128, cache, True) is None and calls == []

def test_the_header_says_where_and_how_long_ago_a_shipped_table_was_tuned(tmp_path):
    """Issue 42: a table's age and device in the export's header. A shipped table has no tuning
    report beside it, so the table carries them (tuned_on, tuned_date); a table with neither says so."""
    from astra_kernels.jobs.exporting.cuda_file import _age

    source = export.resolve_source(None, gpu_kind="h200", kernel="topk_softmax", l2="warm")
    assert source.device == "NVIDIA H200 (sm_90)" and source.tuned_date.startswith("2026-11-29T")
    export.export(source, tmp_path / "out")
    head = (tmp_path / "out" / "topk_softmax.cu").read_text().split("#define DTYPE")[0]
    assert re.search(r"Tuned on:      NVIDIA H200 \(sm_90\), 2026-11-29T\S+(, the day of this export|, 1 day before|, \d+ days "
                     r"before this export) \(times with warm L2\)", head), head
    assert _age("2026-11-26", "2026-11-29T10:00:00+00:00") == ", 3 days before this export"
    assert _age("2026-11-29T23:59:00+00:00", "2026-11-29T00:01:00+00:00") == ", the day of this export"
    assert _age("not recorded", "2026-11-29T00:01:00+00:00") == _age("2026-11-30", "2026-11-29T00:00:00+00:00") == ""
    bare = json.loads((tuned_tables.TUNED_DIR / "h200" / "merge_attn_states.json").read_text())
    del bare["tuned_on"], bare["tuned_date"]
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    assert export.resolve_source(tmp_path / "bare.json").tuned_date == "not recorded"
    for folder in tuned_tables.TUNED_DIR.iterdir():  # every shipped table says where and when
        for table in folder.rglob("*.json"):
            data = json.loads(table.read_text())
            assert data["tuned_on"].startswith("NVIDIA " + folder.name.upper()) and data["tuned_date"][:4] == "2026", table
