"""`astra export --fib TRACESET`: a tuned imported kernel handed back to FlashInfer-Bench.

Into TRACESET (FlashInfer-Bench's trace-set layout, a folder its CLI reads with `--local`):

    definitions/<op_type>/<definition>.json            the imported definition, as it came
    workloads/<op_type>/<definition>.jsonl             its workloads (where the folder has them)
    solutions/<op_type>/<definition>/<solution>.json   the Solution: the exported <kernel>.cu (every
                                                       configuration the table launches, and its pick),
                                                       <kernel>.h, and binding.cu, a TVM-FFI entry point
                                                       run(inputs..., outputs...) in destination-passing
                                                       style, the binding FlashInfer-Bench prefers
    traces/<op_type>/<definition>.astra.jsonl          this project's own measurements of the table at
                                                       each workload it was tuned at

Why TVM-FFI: it is the binding FlashInfer-Bench builds CUDA solutions with by default and the one
SGLang's JIT kernels use, a call costs a few microseconds of host time (no Python between the
caller and the launch), and the launch goes on the caller's stream (PyTorch's current stream).

FlashInfer-Bench's builder compiles the sources with its own nvcc flags, so a configuration the
table built with --use_fast_math or --maxrregcount runs there without them: the evaluator's figures
are of that build, and the Solution's description says so. The traces written here are this
project's harness (CUDA-graph replay over rotating inputs, cold or warm L2 as the table was tuned);
their reference latency is the folder's baseline kernel in that harness, not the definition's
PyTorch reference FlashInfer-Bench times, and their correctness is recorded as checked (within the
kernel's tolerances against the float64 reference) without the error figures FlashInfer-Bench
computes, so its own filters never pick them over the evaluator's.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from astra_kernels import __version__
from astra_kernels import suite
from astra_kernels.runtime.export_format import ExportError, c_signature, shape_params, tensor_symbols
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.templating.expressions_cpp import HELPERS, TranslationError, to_cpp
from astra_kernels.jobs.generated_files import fill
from . import folder as fib_folder
from .definition import DTYPES, Definition

BINDING = "binding.cu"
ENTRY = f"{BINDING}::run"
AUTHOR = "astra-kernels"
# DLPack's (type code, bits) of each dtype the importer takes.
_DLPACK = {"bf16": ("kDLBfloat", 16), "fp16": ("kDLFloat", 16), "fp32": ("kDLFloat", 32)}


def _v(symbol: str) -> str:
    return f"v_{symbol}"


def _cpp(text: str, what: str) -> str:
    try:
        return to_cpp(Expression(text), _v)
    except TranslationError as e:
        raise ExportError(f"{what}: {e}") from None


def render_binding(kernel: str, spec, definition: Definition, record: dict) -> str:
    """binding.cu: run(inputs..., outputs...) checking each tensor and launching `<kernel>_launch`."""
    dtype = spec.dtypes[0]
    # kernel scalar -> the definition's scalar input whose value the caller passes: names the binding
    # declares, so fib.json's (a file) are held to them before they reach the C++
    scalar_inputs = record.get("scalar_inputs", {})
    declared = {t.name for t in definition.inputs if t.shape is None}
    if not isinstance(scalar_inputs, dict) or not set(scalar_inputs.values()) <= declared \
            or not set(scalar_inputs) <= {a.name for a in spec.args if a.role == "scalar"}:
        raise ExportError(f"{kernel}: fib.json's scalar_inputs must map the kernel's scalars to the definition's "
                          f"scalar inputs ({', '.join(sorted(declared)) or 'none'}); import the definition again")
    params, tensors = [], []
    for t in [*definition.inputs, *definition.outputs]:
        if t.shape is None:
            params.append(f"double {t.name}")
        else:
            code, bits = _DLPACK[DTYPES[t.dtype]]  # each tensor its own dtype
            params.append(f"tvm::ffi::TensorView {t.name}")
            tensors.append(f"    ASTRA_TENSOR({t.name}, {len(t.shape)}, {code}, {bits});")
    symbols = [f"    const ax_int {_v(s)} = {arg}.size({dim}); (void){_v(s)};"
               for s, (arg, dim) in tensor_symbols(spec).items()]
    if missing := [s for s in spec.symbols if s not in tensor_symbols(spec)]:
        raise ExportError(f"{kernel}: no tensor dimension is {', '.join(missing)}, so the binding cannot tell it")
    sizes = [f"    ASTRA_SIZE({a.name}, {i}, {_cpp(d, f'{a.name} shape')});"
             for a in spec.args if a.role != "scalar" for i, d in enumerate(a.shape)]
    args = []
    for (ctype, name), arg in zip(c_signature(spec, dtype), spec.args):
        if arg.role != "scalar":
            args.append(f"static_cast<{ctype}>({name}.data_ptr())")
        elif name in scalar_inputs:  # the caller's value, as FlashInfer-Bench passes it
            args.append(f"({ctype}){scalar_inputs[name]}")
        elif arg.value.strip() in spec.symbols:
            args.append(f"({ctype}){_v(arg.value.strip())}")
        else:
            value = float(arg.value)  # the importer writes a number for every other scalar
            args.append(f"({ctype}){value!r}")
    args += [f"(int){_v(s)}" for s in shape_params(spec)]
    text = fill("fib/binding.cpp.in", KERNEL=kernel, PARAMS=", ".join(params), TENSORS="\n".join(tensors),
                SYMBOLS="\n".join(symbols), SIZES="\n".join(sizes), ARGS=", ".join(args))
    return text.replace("@HELPERS@", HELPERS.strip())  # the translator's own helpers: a constant of this package


def solution_name(definition: str, device: str, l2: str) -> str:
    """<definition>_astra_<gpu>_<l2>: one solution per GPU kind and L2 regime a table was tuned for."""
    gpu = re.sub(r"[^a-z0-9]+", "_", device.split(" (")[0].lower().replace("nvidia", "")).strip("_")[:40] or "gpu"
    return f"{definition}_astra_{gpu}_{l2}"


def _parsed(text: str, lines: bool):
    try:
        return [json.loads(x) for x in text.splitlines() if x.strip()] if lines else json.loads(text)
    except ValueError:
        return None


def _write_new(path: Path, text: str, what: str) -> None:
    """Write `text` unless the file holds something else: a trace set's definitions and workloads are
    shared by every solution of the definition, and never replaced by another's. Compared as JSON
    (FlashInfer-Bench writes its own compactly), so a trace set it wrote takes the export."""
    if path.exists():
        lines = path.suffix == ".jsonl"
        if _parsed(path.read_text(), lines) != _parsed(text, lines):
            raise ExportError(f"{path} exists and holds another {what}; export into another trace set "
                              "(or remove it)")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write(source, export_dir: Path, traceset: Path) -> dict:
    """The Solution and the traces of the table `source` (a TableSource of an imported kernel), whose
    `astra export` folder is `export_dir`, into `traceset`; what was written."""
    table = source.table
    kernel_folder = suite.load(table.kernel)
    path = kernel_folder.path
    if not (path / fib_folder.RECORD).is_file():
        raise ExportError(f"{table.kernel} was not imported from a FlashInfer-Bench definition (its folder {path} "
                          "has no fib.json): --fib exports kernels `astra import-fib` wrote")
    record = fib_folder.record(path)
    definition = fib_folder.definition(path)
    spec = kernel_folder.spec
    op = definition.op_type
    device = source.device.split(" (")[0]  # the report's "NVIDIA H200 (sm_90)": the GPU's name
    name = solution_name(definition.name, device, table.l2)
    cu, header = export_dir / f"{table.kernel}.cu", export_dir / f"{table.kernel}.h"
    binding = render_binding(table.kernel, spec, definition, record)
    solution = {
        "name": name, "definition": definition.name, "author": AUTHOR,
        "spec": {"language": "cuda", "target_hardware": [device], "entry_point": ENTRY,
                 "dependencies": [], "destination_passing_style": True, "binding": "tvm-ffi"},
        "sources": [{"path": cu.name, "content": cu.read_text()}, {"path": header.name, "content": header.read_text()},
                    {"path": BINDING, "content": binding}],
        "description": (f"astra-kernels {__version__}: "
                        + (f"the {record['family']} family's template" if record["family"] else "a kernel written for it")
                        + " tuned "
                        f"on {device} ({table.l2} L2, {len(table.entries)} shapes), the dispatch table's "
                        "configurations in one file with its pick; built here with FlashInfer-Bench's own nvcc "
                        "flags (the table's --use_fast_math / --maxrregcount settings do not apply)."),
    }
    traceset = Path(traceset)
    written = []
    target = traceset / "definitions" / op / f"{definition.name}.json"
    _write_new(target, json.dumps(definition.raw, indent=2) + "\n", f"definition of {definition.name}")
    written.append(target)
    workloads_file = path / fib_folder.WORKLOADS
    lines = [json.loads(line) for line in workloads_file.read_text().splitlines() if line.strip()] \
        if workloads_file.is_file() else []
    if lines:
        target = traceset / "workloads" / op / f"{definition.name}.jsonl"
        _write_new(target, "".join(json.dumps(line) + "\n" for line in lines), f"workload set of {definition.name}")
        written.append(target)
    target = traceset / "solutions" / op / definition.name / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(solution, indent=2) + "\n")
    written.append(target)
    traces = _traces(source, definition, record, name, lines)
    if traces:
        target = traceset / "traces" / op / f"{definition.name}.astra.jsonl"
        earlier = _parsed(target.read_text(), True) if target.is_file() else []
        if earlier is None or not all(isinstance(t, dict) for t in earlier):
            raise ExportError(f"{target} is not JSON lines of traces; move it away and export again")
        keep = [t for t in earlier if t.get("solution") != name]  # other solutions' traces stay
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(json.dumps(t) + "\n" for t in [*keep, *traces]))
        written.append(target)
    return {"solution": name, "files": [str(p) for p in written], "traces": len(traces)}


def _traces(source, definition: Definition, record: dict, solution: str, workloads: list[dict]) -> list[dict]:
    """One trace per workload the table holds a measurement at: its median, beside the baseline's."""
    table = source.table
    symbols = record["spec"]["symbols"]
    axis_of = record["axes"]  # symbol -> the definition's axis
    baseline = _baseline_us(Path(source.path).parent)
    by_shape = {tuple(e.shape[sym] for sym in symbols): e for e in table.entries}
    tol = record["spec"].get("tolerances", {}).get(table.dtype)
    checked = ("astra-kernels checked every element against the definition's reference in float64 "
               + (f"(rtol {tol['rtol']}, atol {tol['atol']})" if tol else "(the dtype's default tolerances)"))
    out = []
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    for line in workloads:
        workload = line.get("workload", line)
        shape = tuple(workload["axes"].get(axis_of[sym], definition.axes.get(axis_of[sym])) for sym in symbols)
        entry = by_shape.get(shape)  # measured at exactly this workload's shape, or no trace
        if entry is None or not entry.median_us:
            continue
        label = "x".join(str(v) for v in shape)
        base = baseline.get(label)
        out.append({
            "definition": definition.name, "workload": workload, "solution": solution,
            "evaluation": {
                "status": "PASSED",
                "environment": {"hardware": source.device.split(" (")[0], "libs": {"astra-kernels": __version__}},
                "timestamp": stamp,
                "log": (f"astra-kernels' harness: CUDA-graph replay over rotating inputs, {table.l2} L2, median of "
                        f"its samples; picked {entry.source}; reference_latency_ms is the folder's baseline kernel "
                        "in the same harness (not the definition's PyTorch reference)"),
                "correctness": {"max_relative_error": "NaN", "max_absolute_error": "NaN",
                                "extra": {"checked": checked}},
                "performance": {"latency_ms": entry.median_us / 1000.0,
                                "reference_latency_ms": (base or 0.0) / 1000.0,
                                "speedup_factor": (base / entry.median_us) if base else 0.0},
            },
        })
    return out


def _baseline_us(tuned: Path) -> dict[str, float]:
    """The baseline's median at each shape, from `astra tune`'s report beside the table (none where absent)."""
    try:
        shapes = json.loads((tuned / "report.json").read_text()).get("shapes", [])
        return {s["label"]: float(s["baseline_us"]) for s in shapes if isinstance(s, dict) and s.get("baseline_us")}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return {}

