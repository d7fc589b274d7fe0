"""FlashInfer-Bench in and out (jobs/fib/): definitions read and refused with one line each, the families
matched and proven by the definition's own reference, the imported folder loading as a kernel (its
reference the definition's), and the exported Solution and traces valid under flashinfer-bench's
own pydantic models (where flashinfer-bench is installed: CI installs it without its
flashinfer-python dependency)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from astra_kernels.jobs.fib import importing
from astra_kernels.jobs.fib.definition import DefinitionError, parse_definition, read_workloads
from astra_kernels import suite
from support.fib_definitions import UNSEEN, workloads_file, write_definition
from support.kernel_path import on_kernel_path

torch = pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "flashinfer-bench"

@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """tmp_path/k, on the kernel path."""
    (tmp_path / "k").mkdir()
    yield from on_kernel_path(monkeypatch, tmp_path / "k")


@pytest.mark.parametrize("name, family, constants", [
    ("rmsnorm/rmsnorm_h4096", "rmsnorm", {"eps": 1e-6}),
    ("rmsnorm/fused_add_rmsnorm_h4096", "add_rmsnorm", {"eps": 1e-6}),
    ("silu_and_mul/silu_and_mul_d14336", "gated_activation", {"act": "silu"}),
])
def test_the_examples_import_as_their_family_and_load_as_kernels(kernels, name, family, constants):
    result = importing.import_definition(EXAMPLES / "definitions" / f"{name}.json", kernels,
                                         workloads_path=EXAMPLES / "workloads" / f"{name}.jsonl")
    assert result["family"] == family and result["constants"] == constants
    assert result["proof"]["max_relative_error"] < 1e-5
    kernel = Path(name).name
    folder = suite.load(kernel)
    assert folder.spec.shapes["workloads"][0] == {folder.spec.symbols[0]: 1, folder.spec.symbols[1]: folder.spec.shapes["odd"][0][folder.spec.symbols[1]]}
    assert len(folder.spec.shapes["workloads"]) == 15
    # The folder's reference is the definition's run, in float64: an independent NumPy statement agrees
    shape = folder.spec.shapes["odd"][1]
    inputs = folder.reference.make_inputs(np.random.default_rng(0), shape, "bf16", "default")
    got = next(iter(folder.reference.reference(inputs, shape, "bf16", "default").values()))
    assert got.dtype == np.float64
    arrays = {k: v.astype(np.float64) for k, v in inputs.items()}
    if family == "gated_activation":
        x = arrays["input"]
        d = x.shape[1] // 2
        want = x[:, :d] / (1 + np.exp(-x[:, :d])) * x[:, d:]
    else:
        s = arrays["hidden_states"] + (arrays["residual"] if family == "add_rmsnorm" else 0)
        want = s / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6) * arrays["weight"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and its peer is the same code on torch tensors, in their own dtype
    tensors = {k: torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16) for k, v in inputs.items()}
    out = next(iter(suite.load_peer(kernel).forward(tensors, {}, "default").values()))
    assert out.dtype == torch.bfloat16 and out.shape == got.shape


def test_an_unseen_definition_with_a_scalar_input_imports_with_its_eps(tmp_path):
    path = write_definition(tmp_path, UNSEEN)
    wl = workloads_file(tmp_path / "w.jsonl", UNSEEN["name"], (1, 7, 300), scalars={"epsilon": 1e-5})
    result = importing.import_definition(path, tmp_path / "k", workloads_path=wl)
    assert result["family"] == "add_rmsnorm" and result["constants"] == {"eps": 1e-5}
    record = json.loads((tmp_path / "k" / UNSEEN["name"] / "fib.json").read_text())
    assert record["tensors"] == {"x": "x", "r": "res", "w": "gamma", "out": "y"}
    assert record["scalar_inputs"] == {"eps": "epsilon"} and record["scalars"] == {"epsilon": 1e-5}
    assert [a["name"] for a in record["spec"]["args"]] == ["x", "res", "gamma", "y", "eps", "tokens", "hidden"]
    assert record["spec"]["shapes"]["workloads"] == [{"T": t, "H": 2560} for t in (1, 7, 300)]


def test_the_proof_tells_eps_apart_and_takes_no_family_for_other_math(tmp_path):
    data = copy.deepcopy(UNSEEN)
    data["inputs"].pop("epsilon")
    data["reference"] = data["reference"].replace("def run(x, res, gamma, epsilon)", "def run(x, res, gamma)") \
        .replace("+ epsilon", "+ 1e-5")
    assert importing.import_definition(write_definition(tmp_path, data), tmp_path / "a")["constants"] == {"eps": 1e-5}
    data["reference"] = data["reference"].replace("s.pow(2).mean", "s.abs().mean")  # a mean-abs norm: not an RMS norm
    data["name"] = "not_rms"
    result = importing.import_definition(write_definition(tmp_path, data), tmp_path / "b")
    assert result["family"] is None
    assert "fit the add_rmsnorm family but its reference does not compute it" in result["proof"]["no_family"]


def test_a_gelu_definition_is_the_gated_family_with_its_activation(tmp_path):
    data = json.loads((EXAMPLES / "definitions/silu_and_mul/silu_and_mul_d14336.json").read_text())
    data["name"] = "gelu_tanh_and_mul_d1024"
    data["axes"]["intermediate_size"]["value"], data["axes"]["gate_up_size"]["value"] = 1024, 2048
    data["reference"] = data["reference"].replace("14336", "1024").replace(
        "torch.nn.functional.silu(gate)", "torch.nn.functional.gelu(gate, approximate='tanh')")
    result = importing.import_definition(write_definition(tmp_path, data), tmp_path / "k")
    assert result["constants"] == {"act": "gelu_tanh"}
    assert json.loads((tmp_path / "k" / data["name"] / "fib.json").read_text())["spec"]["variants"] == {"default": {"ACT": 2}}


def _broken(**change):
    data = copy.deepcopy(UNSEEN)
    for key, value in change.items():
        data[key] = value
    return data


@pytest.mark.parametrize("data, message", [
    (_broken(reference="def main(x):\n    return x\n"), "no top-level function run"),
    (_broken(reference="def run(x:\n"), "not Python"),
    (_broken(outputs={"y": {"shape": ["M", "W"], "dtype": "bfloat16"}}), "axis 'W', which the definition does not define"),
    (_broken(outputs={"y": {"shape": ["M", "H"], "dtype": "float8_e4m3fn"}}), "imports bfloat16, float16 and float32"),
    (_broken(outputs={"y": {"shape": ["M", "H"], "dtype": "complex64"}}), "FlashInfer-Bench does not define"),
    (_broken(name="rm;s"), "is not a name"),
    (_broken(inputs={"int": {"shape": ["M", "H"], "dtype": "bfloat16"}}), "is not a name"),
    (_broken(axes={"M": {"type": "var"}, "H": {"type": "static"}}), "must be of type 'var' or 'const'"),
    (_broken(constraints=["H %"]), "is not an expression"),
    ({"name": "x"}, "has no 'op_type'"),
])
def test_each_malformed_definition_is_one_line_naming_it(tmp_path, data, message):
    with pytest.raises(DefinitionError, match=message) as caught:
        parse_definition(data, "def.json")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("def.json")


def test_workload_files_are_checked_line_by_line(tmp_path):
    d = parse_definition(UNSEEN, "def.json")
    missing = tmp_path / "w.jsonl"
    missing.write_text(json.dumps({"definition": UNSEEN["name"], "workload": {"axes": {}, "uuid": "a"}}) + "\n")
    with pytest.raises(DefinitionError, match=r"w.jsonl:1: the workload gives no value for var axis M"):
        read_workloads(missing, d)
    blob = workloads_file(tmp_path / "b.jsonl", UNSEEN["name"], (4,), scalars={"epsilon": 1e-5})
    line = json.loads(blob.read_text())
    line["workload"]["inputs"]["x"] = {"type": "safetensors", "path": "a.safetensors", "tensor_key": "x"}
    blob.write_text(json.dumps(line) + "\n")
    with pytest.raises(DefinitionError, match="safetensors"):
        read_workloads(blob, d)
    two = tmp_path / "two.jsonl"
    two.write_text(workloads_file(tmp_path / "t1", UNSEEN["name"], (1,), scalars={"epsilon": 1e-5}).read_text()
                   + workloads_file(tmp_path / "t2", UNSEEN["name"], (2,), scalars={"epsilon": 1e-6}).read_text())
    with pytest.raises(DefinitionError, match="several values"):
        read_workloads(two, d)


def test_a_definition_no_family_computes_is_a_folder_to_fill_as_astra_new_writes_one(kernels, capsys):
    """Its spec, reference and peer from the definition; its kernel marked ASTRA-TODO, which `astra
    check` lists (exit 1) while it compiles what it can and runs the reference on the CPU."""
    from astra_kernels import cli
    from astra_kernels.jobs.new_kernel import unfinished

    data = _broken(name="softmax_h2560", inputs={"x": {"shape": ["M", "H"], "dtype": "bfloat16"}},
                   reference="import torch\ndef run(x):\n    return torch.softmax(x.float(), -1).to(x.dtype)\n")
    wl = workloads_file(kernels.parent / "w.jsonl", data["name"], (1, 5))
    result = importing.import_definition(write_definition(kernels.parent, data), kernels, workloads_path=wl)
    assert result["family"] is None
    assert "rmsnorm takes 2 tensor input(s)" in result["proof"]["no_family"]
    assert "ASTRA-TODO" in importing.describe(result)
    folder = suite.load("softmax_h2560")
    spec = folder.spec
    assert spec.symbols == ["M", "H"] and spec.shapes["workloads"] == [{"M": 1, "H": 2560}, {"M": 5, "H": 2560}]
    assert [(a.name, a.role) for a in spec.args] == [("x", "in"), ("y", "out"), ("M_size", "scalar"), ("H_size", "scalar")]
    assert spec.bytes_moved == "M * H * ELEM_BYTES + M * H * ELEM_BYTES"
    inputs = folder.reference.make_inputs(np.random.default_rng(0), {"M": 5, "H": 2560}, "bf16", "default")
    y = folder.reference.reference(inputs, {"M": 5, "H": 2560}, "bf16", "default")["y"]
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-6)
    todo = unfinished(folder.path)
    assert any(line.startswith("baseline.cu:") for line in todo) and any(line.startswith("template.cu:") for line in todo)
    assert ("softmax_h2560(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int M_size, int H_size)"
            in (folder.path / "baseline.cu").read_text())
    capsys.readouterr()
    assert cli.main(["check", "softmax_h2560"]) == 1
    assert "ASTRA-TODO" in capsys.readouterr().out


def test_an_import_never_writes_over_a_folder_it_did_not_write(tmp_path):
    path = write_definition(tmp_path, UNSEEN)
    wl = workloads_file(tmp_path / "w.jsonl", UNSEEN["name"], (1,), scalars={"epsilon": 1e-5})
    (tmp_path / "k" / UNSEEN["name"]).mkdir(parents=True)
    (tmp_path / "k" / UNSEEN["name"] / "mine.cu").write_text("// mine")
    with pytest.raises(DefinitionError, match="not written by astra import-fib"):
        importing.import_definition(path, tmp_path / "k", workloads_path=wl)
    assert (tmp_path / "k" / UNSEEN["name"] / "mine.cu").read_text() == "// mine"
    importing.import_definition(path, tmp_path / "j", workloads_path=wl)
    with pytest.raises(DefinitionError, match="--force"):
        importing.import_definition(path, tmp_path / "j", workloads_path=wl)
    importing.import_definition(path, tmp_path / "j", workloads_path=wl, force=True)


def test_a_definition_reference_raising_is_one_line(tmp_path):
    data = _broken(reference="import torch\ndef run(x, res, gamma, epsilon):\n    raise KeyError('nope')\n")
    wl = workloads_file(tmp_path / "w.jsonl", UNSEEN["name"], (1,), scalars={"epsilon": 1e-5})
    with pytest.raises(DefinitionError, match="its reference raised KeyError"):
        importing.import_definition(write_definition(tmp_path, data), tmp_path / "k", workloads_path=wl)


def _tuned_dir(tmp_path: Path, kernel: str, tokens) -> Path:
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    entries = [{"shape": {"T": t, "H": 2560}, "config": {"ROW_THREADS": 128, "ROWS": 1, "VEC": 8, "ITEMS": 4},
                "median_us": 2.0 + t / 100, "source": "template"} for t in tokens[:-1]]
    entries.append({"shape": {"T": tokens[-1], "H": 2560}, "config": {}, "median_us": 9.0, "source": "baseline"})
    (tuned / "dispatch.json").write_text(json.dumps({"kernel": kernel, "dtype": "bf16", "variant": "default",
                                                     "entries": entries, "l2": "cold"}))
    (tuned / "report.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "shapes": [
        {"label": f"{t}x2560", "shape": {"T": t, "H": 2560}, "baseline_us": 4.0} for t in tokens]}))
    return tuned


def test_export_fib_writes_a_trace_set_flashinfer_bench_reads(tmp_path, kernels):
    fib = pytest.importorskip("flashinfer_bench.data")
    path = write_definition(tmp_path, UNSEEN)
    tokens = (1, 7, 300)
    wl = workloads_file(tmp_path / "w.jsonl", UNSEEN["name"], tokens, scalars={"epsilon": 1e-5})
    importing.import_definition(path, kernels, workloads_path=wl)
    from astra_kernels.jobs.exporting import cuda_file
    from astra_kernels.jobs.fib import solution

    source = cuda_file.resolve_source(_tuned_dir(tmp_path, UNSEEN["name"], tokens))
    cuda_file.export(source, tmp_path / "export")
    written = solution.write(source, tmp_path / "export", tmp_path / "ts")
    assert written["traces"] == 3
    ts = fib.TraceSet.from_path(str(tmp_path / "ts"))  # flashinfer-bench's own models validate every file
    assert list(ts.definitions) == [UNSEEN["name"]] and len(ts.workloads[UNSEEN["name"]]) == 3
    sol = ts.get_solution(written["solution"])
    assert sol.spec.entry_point == "binding.cu::run" and sol.spec.destination_passing_style
    assert sol.spec.target_hardware == ["NVIDIA H100 80GB HBM3"] and written["solution"].endswith("_h100_80gb_hbm3_cold")
    assert sol.spec.binding.value == "tvm-ffi" and {s.path for s in sol.sources} == {
        f"{UNSEEN['name']}.cu", f"{UNSEEN['name']}.h", "binding.cu"}
    binding = next(s.content for s in sol.sources if s.path == "binding.cu")
    assert ("void run(tvm::ffi::TensorView x, tvm::ffi::TensorView res, tvm::ffi::TensorView gamma, double epsilon, "
            "tvm::ffi::TensorView y)") in binding
    assert "(float)epsilon" in binding  # the scalar input reaches the kernel, not the import's value
    traces = {t.workload.axes["M"]: t for t in ts.traces[UNSEEN["name"]]}
    assert traces[7].evaluation.performance.latency_ms == pytest.approx(2.07e-3)
    assert traces[7].evaluation.performance.speedup_factor == pytest.approx(4.0 / 2.07)
    # never picked over the evaluator's own traces: their error figures are the evaluator's to give
    assert ts.filter_traces(UNSEEN["name"], atol=1.0, rtol=1.0) == []
    # a second export of another definition never replaces this one's definition file
    other = copy.deepcopy(UNSEEN)
    other["description"] = "changed"
    (tmp_path / "ts" / "definitions" / "rmsnorm" / f"{UNSEEN['name']}.json").write_text(json.dumps(other))
    from astra_kernels.runtime.export_format import ExportError
    with pytest.raises(ExportError, match="holds another definition"):
        solution.write(source, tmp_path / "export", tmp_path / "ts")


def test_export_fib_refuses_a_kernel_not_imported_from_a_definition(tmp_path):
    from astra_kernels.jobs.exporting import cuda_file
    from astra_kernels.jobs.fib import solution
    from astra_kernels.runtime.export_format import ExportError

    source = cuda_file.resolve_source(None, "h100", "rmsnorm")
    cuda_file.export(source, tmp_path / "export")
    with pytest.raises(ExportError, match="was not imported from a FlashInfer-Bench definition"):
        solution.write(source, tmp_path / "export", tmp_path / "ts")


def test_a_definition_of_two_outputs_parses_runs_and_becomes_a_folder_to_fill(tmp_path):
    """Several outputs: read, the reference's tuple returned by name, and no family (each takes one
    output) claims it, each saying so: its folder has both outputs and its scalar input."""
    from astra_kernels.jobs.fib.running import call, run_function

    data = _broken(outputs={"y": {"shape": ["M", "H"], "dtype": "bfloat16"},
                            "sum": {"shape": ["M", "H"], "dtype": "bfloat16"}},
                   reference=("import torch\n\ndef run(x, res, gamma, epsilon):\n    s = x.float() + res.float()\n"
                              "    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + epsilon) * gamma.float()\n"
                              "    return y.to(x.dtype), s.to(x.dtype)\n"))
    d = parse_definition(data, "two.json")
    assert [t.name for t in d.outputs] == ["y", "sum"] and d.var_axes == ["M"] and d.axes["H"] == 2560
    rng = np.random.default_rng(1)
    values = {"x": rng.standard_normal((2, 2560)), "res": rng.standard_normal((2, 2560)),
              "gamma": rng.standard_normal(2560), "epsilon": 1e-5}
    (tmp_path / "ref.py").write_text(d.reference)
    out = call(d, run_function(d, tmp_path / "ref.py"), values)
    assert set(out) == {"y", "sum"} and out["sum"].dtype == np.float64
    np.testing.assert_allclose(out["sum"], values["x"] + values["res"], rtol=1e-6, atol=1e-6)  # its math: float32
    wl = workloads_file(tmp_path / "w.jsonl", data["name"], (1,), scalars={"epsilon": 1e-5})
    result = importing.import_definition(write_definition(tmp_path, data), tmp_path / "k", workloads_path=wl)
    assert "add_rmsnorm takes 3 tensor input(s) and 1 output(s)" in result["proof"]["no_family"]
    record = json.loads((tmp_path / "k" / data["name"] / "fib.json").read_text())
    assert [(a["name"], a["role"]) for a in record["spec"]["args"]] == [
        ("x", "in"), ("res", "in"), ("gamma", "in"), ("y", "out"), ("sum", "out"), ("epsilon", "scalar"),
        ("M_size", "scalar"), ("H_size", "scalar")]
    assert record["scalar_inputs"] == {"epsilon": "epsilon"}
    from astra_kernels.jobs.fib import folder as fib_folder
    from astra_kernels.jobs.fib import solution

    path = tmp_path / "k" / data["name"]
    binding = solution.render_binding(data["name"], fib_folder.spec(path), fib_folder.definition(path),
                                      fib_folder.record(path))
    assert ("void run(tvm::ffi::TensorView x, tvm::ffi::TensorView res, tvm::ffi::TensorView gamma, double epsilon, "
            "tvm::ffi::TensorView y, tvm::ffi::TensorView sum)") in binding
    assert "(float)epsilon, (int)v_M, (int)v_H, stream);" in binding


@pytest.mark.parametrize("data, message", [
    (_broken(inputs={"device": {"shape": ["M", "H"], "dtype": "bfloat16"}}), "is not a name"),  # the binding's own
    (_broken(inputs={"namespace": {"shape": ["M", "H"], "dtype": "bfloat16"}}), "is not a name"),  # C++ keyword
    (_broken(inputs={"v_T": {"shape": ["M", "H"], "dtype": "bfloat16"}}), "is not a name"),  # a symbol's variable
    (_broken(outputs={"y": {"shape": ["M", "H"], "dtype": ["bfloat16"]}}), "FlashInfer-Bench does not define"),
])
def test_names_the_generated_code_declares_and_odd_values_are_one_line(data, message):
    with pytest.raises(DefinitionError, match=message) as caught:
        parse_definition(data, "def.json")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("inputs, message", [
    ("not an object", "inputs must be an object"),
    ({"epsilon": {"type": "scalar", "value": float("nan")}}, "finite number"),
    ({"epsilon": {"type": "scalar", "value": 10 ** 400}}, "finite number"),
    ({"epsilon": {"type": "scalar", "value": True}}, "finite number"),
])
def test_odd_workload_values_are_one_line(tmp_path, inputs, message):
    d = parse_definition(UNSEEN, "def.json")
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"definition": UNSEEN["name"], "workload": {"axes": {"M": 4}, "uuid": "a",
                                                                          "inputs": inputs}}) + "\n")
    with pytest.raises(DefinitionError, match=message):
        read_workloads(path, d)


def test_a_reference_giving_nan_matches_no_family(tmp_path):
    data = _broken(name="nan_norm", reference="import torch\ndef run(x, res, gamma, epsilon):\n"
                                              "    return (x.float() * float('nan')).to(x.dtype)\n")
    wl = workloads_file(tmp_path / "w.jsonl", data["name"], (1,), scalars={"epsilon": 1e-5})
    result = importing.import_definition(write_definition(tmp_path, data), tmp_path / "k", workloads_path=wl)
    assert result["family"] is None and "does not compute it" in result["proof"]["no_family"]


def test_a_mixed_dtype_definition_keeps_each_tensor_s_dtype_in_inputs_and_binding(tmp_path):
    from astra_kernels.jobs.fib import folder as fib_folder
    from astra_kernels.jobs.fib import solution

    data = _broken(name="scale_rows", inputs={"x": {"shape": ["M", "H"], "dtype": "bfloat16"},
                                              "scale": {"shape": ["M"], "dtype": "float32"}},
                   reference="import torch\ndef run(x, scale):\n    return (x.float() * scale[:, None]).to(x.dtype)\n")
    wl = workloads_file(tmp_path / "w.jsonl", data["name"], (3,))
    importing.import_definition(write_definition(tmp_path, data), tmp_path / "k", workloads_path=wl)
    path = tmp_path / "k" / data["name"]
    inputs = fib_folder.Runtime(path).make_inputs(np.random.default_rng(0), {"M": 3, "H": 2560}, "bf16", "default")
    assert inputs["scale"].dtype == np.float32 and inputs["x"].dtype != np.float32
    binding = solution.render_binding(data["name"], fib_folder.spec(path), fib_folder.definition(path),
                                      fib_folder.record(path))
    assert "ASTRA_TENSOR(x, 2, kDLBfloat, 16);" in binding and "ASTRA_TENSOR(scale, 1, kDLFloat, 32);" in binding
    record = json.loads((path / "fib.json").read_text())
    record["scalar_inputs"] = {"M_size": "M); abort(); (void)(0"}  # a hand-edited fib.json
    from astra_kernels.runtime.export_format import ExportError
    with pytest.raises(ExportError, match="scalar_inputs must map"):
        solution.render_binding(data["name"], fib_folder.spec(path), fib_folder.definition(path), record)


def test_an_export_takes_a_trace_set_flashinfer_bench_wrote_compactly(tmp_path):
    from astra_kernels.jobs.fib.solution import _write_new
    from astra_kernels.runtime.export_format import ExportError

    target = tmp_path / "definitions" / "rmsnorm" / "d.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(UNSEEN, separators=(",", ":")))  # as its model_dump_json writes
    _write_new(target, json.dumps(UNSEEN, indent=2) + "\n", "definition")
    assert target.read_text() == json.dumps(UNSEEN, separators=(",", ":"))  # left as it was
    with pytest.raises(ExportError, match="holds another definition"):
        _write_new(target, json.dumps({**UNSEEN, "description": "x"}), "definition")


def test_the_folder_s_reference_file_is_the_definition_s_or_it_says_so(kernels):
    importing.import_definition(EXAMPLES / "definitions/rmsnorm/rmsnorm_h4096.json", kernels)
    path = kernels / "rmsnorm_h4096"
    assert (path / "fib_reference.py").read_text() == json.loads((path / "definition.json").read_text())["reference"]
    (path / "fib_reference.py").write_text((path / "fib_reference.py").read_text().replace("1e-6", "1e-5"))
    folder = suite.load("rmsnorm_h4096")
    inputs = folder.reference.make_inputs(np.random.default_rng(0), {"T": 1, "H": 4096}, "bf16", "default")
    with pytest.raises(DefinitionError, match="is not the reference of .*definition.json"):
        folder.reference.reference(inputs, {"T": 1, "H": 4096}, "bf16", "default")
