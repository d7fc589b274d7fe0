"""`astra import-fib`: a kernel folder from a FlashInfer-Bench definition (and its workloads).

The definition's var axis becomes the tokens symbol, its const axis the width, fixed at the
definition's value; the workloads become the `workloads` shape set (without them, a token set
from 1 to 16384); its reference, run in float64, becomes the folder's reference and, in its own
dtype, its PyTorch peer (timed eager and under torch.compile by `astra bench --torch`). The
baseline and template are a family's (families/), chosen by the definition's tensors and proven
by running its reference against the family's math (families/__init__.py says how). For a
definition no family computes, the folder is written as `astra new` writes one: the spec (every
argument, the shape sets, the bytes moved), the reference and the peer filled in from the
definition, and a kernel marked ASTRA-TODO for you (or the agent's generator) to write, which
`astra check` lists until none is left; the import says why each family does not fit.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from astra_kernels import suite
from astra_kernels.suite.schema import KernelSpec
from astra_kernels.jobs.generated_files import fill
from astra_kernels.tools.templating.expressions import FUNCTIONS
from astra_kernels.tools.toolchain.dtypes import C_TYPES, numpy_dtype
from . import families as fam
from .definition import DTYPES, Definition, DefinitionError, Workload, read_definition, read_workloads
from .folder import DEFINITION, RECORD, RECORD_FORMAT, REFERENCE, WORKLOADS
from .running import call, run_function

PROBE_TOKENS = (1, 3)        # token counts the proof runs at (a single row, an odd count)
PROBE_SCALES = (1.0, 1e-3)   # input scales: 1e-3 makes mean(x^2) about 1e-6, where eps decides the result
MATCH_TOLERANCE = 2e-2       # max |reference - family| / max |family|: a bf16-rounded output still matches
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
ODD_TOKENS = (1, 3, 7, 33)
# Names an expression of a template gives a meaning of its own (kernels_sglang/FORMAT.md): no axis of
# a definition without a family may be called so, since its axes become the spec's symbols.
_EXPRESSION_NAMES = frozenset({"ELEM_BYTES", "SMS", "SM", *FUNCTIONS})


class NoFamily(DefinitionError):
    """No family of this project computes the definition (each reason in the message)."""


@dataclass
class Fit:
    family: fam.Family
    tensors: dict[str, str]        # family slot key -> definition tensor name
    axes: dict[str, str]           # family symbol -> definition axis name
    width: int                     # the const axis' value, in the family's width symbol
    eps_input: str | None          # a scalar input that is the norm's eps


def _fit(family: fam.Family, d: Definition) -> Fit | str:
    """How the definition's tensors fill the family's slots, or why they cannot."""
    tensors = [t for t in d.inputs if t.shape is not None]
    scalars = [t for t in d.inputs if t.shape is None]
    ins = [s for s in family.slots if s.role == "in"]
    outs = [s for s in family.slots if s.role == "out"]
    if len(tensors) != len(ins) or len(d.outputs) != len(outs):
        return f"takes {len(ins)} tensor input(s) and {len(outs)} output(s)"
    if len({t.dtype for t in [*d.inputs, *d.outputs] if t.shape is not None}) != 1:
        return "takes tensors of one dtype"
    var = d.var_axes
    if len(var) != 1:
        return "takes one var axis (the tokens)"
    consts = {a: v for a, v in d.axes.items() if v is not None}
    token_sym, width_sym = family.symbols
    eps_input = None
    if scalars:
        if "eps" not in family.constants or len(scalars) != 1:  # (every imported dtype is a float)
            return "takes no scalar input but a norm's eps"
        eps_input = scalars[0].name
    for width_axis, width in consts.items():

        def fits(dim: str, axis: str) -> bool:  # a slot's dimension against a tensor's axis
            if dim == token_sym:
                return axis == var[0]
            if dim == width_sym:
                return axis == width_axis
            return consts.get(axis) == family.width_scale * width  # "2 * D": a const axis twice the width

        assigned: dict[str, str] = {}
        for slot in family.slots:
            group = tensors if slot.role == "in" else d.outputs
            found = next((t for t in group if t.name not in assigned.values() and len(t.shape) == len(slot.shape)
                          and all(fits(dim, a) for dim, a in zip(slot.shape, t.shape))), None)
            if found is None:
                break
            assigned[slot.key] = found.name
        else:
            return Fit(family, assigned, {token_sym: var[0], width_sym: width_axis}, width, eps_input)
    shapes = ", ".join(f"{s.key}[{', '.join(s.shape)}]" for s in family.slots)
    return f"takes tensors {shapes} over one var axis and a const width"


def _probe_inputs(fit: Fit, tokens: int, scale: float, rng) -> dict[str, np.ndarray]:
    sizes = {fit.family.symbols[0]: tokens, fit.family.symbols[1]: fit.width}
    arrays = {}
    for slot in fit.family.slots:
        if slot.role == "in":
            dims = [sizes.get(dim, fit.family.width_scale * fit.width) for dim in slot.shape]
            a = rng.standard_normal(dims)
            if slot.key != "w":  # the weight stays around 1; the activations carry the scale
                a = a * scale
            arrays[slot.key] = a
    return arrays


def _prove(fit: Fit, d: Definition, run, scalars: dict) -> tuple[dict, dict]:
    """The family constants the definition's reference agrees with at every probe, and the errors;
    NoFamily where none or several agree."""
    rng = np.random.default_rng(2026)
    names = list(fit.family.constants)
    choices = [fit.family.constants[n] for n in names]
    if fit.eps_input is not None:  # the eps is an input: its value is the workloads'
        choices = [(float(scalars[fit.eps_input]),) if n == "eps" else c for n, c in zip(names, choices)]
    errors: dict[tuple, float] = {c: 0.0 for c in itertools.product(*choices)}
    scales = PROBE_SCALES if "eps" in names else (1.0,)
    for tokens, scale in itertools.product(PROBE_TOKENS, scales):
        arrays = _probe_inputs(fit, tokens, scale, rng)
        values = {fit.tensors[k]: a for k, a in arrays.items()}
        values.update(scalars)
        got = call(d, run, values)[fit.tensors["out"]]
        for combo in errors:
            want = fit.family.math(arrays, dict(zip(names, combo)))["out"]
            if got.shape != want.shape:
                raise DefinitionError(f"{d.name}: its reference returns {fit.tensors['out']} of shape {got.shape}, "
                                      f"the {fit.family.name} family {want.shape}")
            err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30)) \
                if np.isfinite(got).all() and np.isfinite(want).all() else math.inf  # a NaN never matches
            errors[combo] = max(errors[combo], err)
    ranked = sorted(errors.items(), key=lambda kv: kv[1])
    best, best_err = ranked[0]
    if best_err > MATCH_TOLERANCE:
        raise NoFamily(f"{d.name}: its tensors fit the {fit.family.name} family but its reference does not "
                              f"compute it (closest: {dict(zip(names, best))}, max relative error {best_err:.2g})")
    if len(ranked) > 1 and ranked[1][1] <= MATCH_TOLERANCE and ranked[1][1] < 10 * best_err:
        raise NoFamily(f"{d.name}: its reference agrees with the {fit.family.name} family at "
                              f"{dict(zip(names, best))} and at {dict(zip(names, ranked[1][0]))} alike, so the "
                              "import cannot tell which kernel computes it")
    return dict(zip(names, best)), {"max_relative_error": best_err,
                                    "runner_up": ({**dict(zip(names, ranked[1][0])), "max_relative_error": ranked[1][1]}
                                                  if len(ranked) > 1 else None),
                                    "tokens": list(PROBE_TOKENS), "scales": list(scales)}


def match(d: Definition, scalars: dict, run) -> tuple[Fit, dict, dict]:
    """The family the definition is (its fit, constants and proof), or NoFamily saying why each
    family does not fit."""
    reasons = []
    for family in fam.FAMILIES:
        fit = _fit(family, d)
        if isinstance(fit, str):
            reasons.append(f"{family.name} {fit}")
            continue
        constants, proof = _prove(fit, d, run, scalars)
        return fit, constants, proof
    raise NoFamily(f"{d.name}: no family of this project computes it ({'; '.join(reasons)})")


def _spec_fields(d: Definition, fit: Fit, constants: dict, workloads: list[Workload]) -> dict:
    family = fit.family
    token, width = family.symbols
    dtype = DTYPES[d.outputs[0].dtype]  # a family's tensors share one dtype (_fit)
    args = []
    for slot in family.slots:
        args.append({"name": fit.tensors[slot.key], "role": slot.role, "dtype": "T", "shape": list(slot.shape),
                     "doc": f"the definition's {fit.tensors[slot.key]}"})
    names = {a["name"] for a in args}
    for name, sdtype, value in family.scalars:
        if name in names or name in family.symbols:
            raise DefinitionError(f"{d.name}: tensor {name} has the name of the {family.name} kernel's scalar "
                                  f"argument {name}; rename it in the definition")
        if value == "eps":
            value = repr(float(constants["eps"]))
        args.append({"name": name, "role": "scalar", "dtype": sdtype, "value": value})
    if {token, width} & names:
        raise DefinitionError(f"{d.name}: a tensor is named {token} or {width}, the kernel's shape symbols")
    shapes = {}
    if workloads:
        seen = []
        for w in workloads:
            shape = {token: w.axes[fit.axes[token]], width: fit.width}
            if shape not in seen:
                seen.append(shape)
        shapes["workloads"] = seen
    else:
        shapes["tokens"] = [{token: t, width: fit.width} for t in DEFAULT_TOKENS]
    shapes["odd"] = [{token: t, width: fit.width} for t in ODD_TOKENS]
    fields = {
        "name": d.name, "summary": f"{family.summary} (FlashInfer-Bench {d.op_type} definition {d.name})",
        "symbols": [token, width], "args": args, "dtypes": [dtype],
        "variants": {"default": family.defines(constants)}, "shapes": shapes,
        "bytes_moved": family.bytes_moved, "flops": family.flops,
    }
    if family.seeds_from:
        fields["seeds"] = [s.model_dump() for s in suite.load(family.seeds_from).spec.seeds]
    if family.tolerances_from:
        tol = suite.load(family.tolerances_from).spec.tolerances
        if dtype in tol:
            fields["tolerances"] = {dtype: tol[dtype].model_dump()}
    _check_spec(d, fields)  # what the folder will load, checked now
    return fields


def _check_spec(d: Definition, fields: dict) -> None:
    try:
        KernelSpec(**fields)
    except ValueError as e:  # pydantic's ValidationError is one: its first error, in one line
        first = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
        raise DefinitionError(f"{d.name}: the kernel spec it gives is not valid ({first.splitlines()[0][:200]})") from None


def _todo_spec_fields(d: Definition, workloads: list[Workload], scalars: dict) -> dict:
    """The spec of a definition no family computes: the definition's tensors and scalars in its order,
    then an int per axis; its axes as the symbols; the bytes every tensor moves once."""
    tensors = [t for t in [*d.inputs, *d.outputs] if t.shape is not None]
    main = DTYPES[d.outputs[0].dtype]
    names = {t.name for t in [*d.inputs, *d.outputs]}
    for axis in d.axes:
        if axis in _EXPRESSION_NAMES or axis in names or f"{axis}_size" in names:
            raise DefinitionError(f"{d.name}: axis {axis} clashes with a name the kernel's spec gives another "
                                  f"meaning (a tensor, {axis}_size, or one of {', '.join(sorted(_EXPRESSION_NAMES))})")
    args = []
    for t in tensors:
        role = "in" if t in d.inputs else "out"
        args.append({"name": t.name, "role": role, "dtype": "T" if DTYPES[t.dtype] == main else DTYPES[t.dtype],
                     "shape": list(t.shape), "doc": f"the definition's {t.name}"})
    for t in d.inputs:
        if t.shape is None:
            # a float scalar (the importer takes float dtypes only) reaches the kernel as a float, as eps does
            args.append({"name": t.name, "role": "scalar", "dtype": "fp32", "value": repr(float(scalars[t.name]))})
    args += [{"name": f"{a}_size", "role": "scalar", "dtype": "int32", "value": a} for a in d.axes]
    if workloads:
        sets = {"workloads": []}
        for w in workloads:
            shape = {a: (w.axes[a] if v is None else v) for a, v in d.axes.items()}
            if shape not in sets["workloads"]:
                sets["workloads"].append(shape)
    elif len(d.var_axes) == 1:
        sets = {"tokens": [{a: (t if v is None else v) for a, v in d.axes.items()} for t in DEFAULT_TOKENS]}
    else:
        raise DefinitionError(f"{d.name}: several var axes ({', '.join(d.var_axes)}): give --workloads for its shapes")
    width = lambda t: "ELEM_BYTES" if DTYPES[t.dtype] == main else str(numpy_dtype(DTYPES[t.dtype]).itemsize)
    fields = {
        "name": d.name, "summary": f"FlashInfer-Bench {d.op_type} definition {d.name} (a kernel of your own)",
        "symbols": list(d.axes), "args": args, "dtypes": [main], "shapes": sets,
        "bytes_moved": " + ".join(f"{' * '.join(t.shape) or '1'} * {width(t)}" for t in tensors),
    }
    _check_spec(d, fields)
    return fields


def _todo_kernel(d: Definition, fields: dict) -> str:
    params = []
    for arg in fields["args"]:
        ctype = "scalar_t" if arg["dtype"] == "T" else C_TYPES[arg["dtype"]]
        if arg["role"] == "scalar":
            params.append(f"{ctype} {arg['name']}")
        else:
            params.append(f"{'const ' if arg['role'] == 'in' else ''}{ctype}* __restrict__ {arg['name']}")
    first_out = next(a for a in fields["args"] if a["role"] == "out")
    grid = f"ceil_div({' * '.join(first_out['shape']) or '1'}, 256)"
    return fill("fib/todo_kernel.cpp.in", KERNEL=d.name, PARAMS=", ".join(params), GRID=grid)


def import_definition(definition_path: str | Path, dest: str | Path, *, workloads_path: str | Path | None = None,
                      force: bool = False) -> dict:
    """Write DEST/<definition name>/ and return what was written (the family, the constants, the proof)."""
    d = read_definition(definition_path)
    if suite.SUITE_DIR.joinpath(d.name).is_dir():
        raise DefinitionError(f"{d.name} is the name of a kernel of the suite; rename the definition")
    workloads = read_workloads(workloads_path, d) if workloads_path else []
    scalars = dict(workloads[0].scalars) if workloads else {}
    missing = [t.name for t in d.inputs if t.shape is None and t.name not in scalars]
    if missing:
        raise DefinitionError(f"{d.name}: scalar input {missing[0]} takes its value from the workloads; give --workloads")
    out = Path(dest) / d.name
    if out.exists():
        if not (out / RECORD).is_file():
            raise DefinitionError(f"{out} exists and was not written by astra import-fib; give another --dir")
        if not force:
            raise DefinitionError(f"{out} exists (an earlier import, perhaps edited since); --force writes over it")
    staging = Path(dest) / f".{d.name}.importing"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        # The reference is code: it becomes a file of the folder, which runs as any kernel folder's
        # Python does (README: a kernel folder is code), first here for the proof.
        (staging / REFERENCE).write_text(d.reference)
        try:
            fit, constants, proof = match(d, scalars, run_function(d, staging / REFERENCE))
            fields = _spec_fields(d, fit, constants, workloads)
            kernel = None
        except NoFamily as why:
            fit, constants, proof = None, {}, {"no_family": str(why)}
            fields = _todo_spec_fields(d, workloads, scalars)
            kernel = _todo_kernel(d, fields)
        (staging / DEFINITION).write_text(json.dumps(d.raw, indent=2) + "\n")
        if workloads_path:
            lines = [line for line in Path(workloads_path).read_text().splitlines() if line.strip()]
            (staging / WORKLOADS).write_text("\n".join(json.dumps(json.loads(line)) for line in lines) + "\n")
        for name in ("template.cu", "baseline.cu"):
            if fit is None:
                (staging / name).write_text(kernel)
            else:
                shutil.copyfile(fit.family.sources / name, staging / name)
        for name in ("spec.py", "reference.py", "peer.py"):
            (staging / name).write_text(fill(f"fib/{name}.in", kernel=d.name))
        record = {
            "format": RECORD_FORMAT, "definition": d.name, "op_type": d.op_type,
            "family": fit.family.name if fit else None, "constants": constants,
            "tensors": fit.tensors if fit else {t.name: t.name for t in [*d.inputs, *d.outputs] if t.shape is not None},
            "axes": fit.axes if fit else {a: a for a in d.axes},
            "scalar_inputs": ({"eps": fit.eps_input} if fit.eps_input else {}) if fit else
            {t.name: t.name for t in d.inputs if t.shape is None},
            "scalars": scalars, "proof": proof, "spec": fields,
            "definition_sha256": hashlib.sha256(Path(definition_path).read_bytes()).hexdigest(),
            "imported": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (staging / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        earlier = Path(dest) / f".{d.name}.replaced"
        shutil.rmtree(earlier, ignore_errors=True)
        if out.exists():  # set aside, not deleted, until the new folder is in place
            out.rename(earlier)
        try:
            staging.rename(out)
        except OSError:
            if earlier.exists():
                earlier.rename(out)
            raise
        shutil.rmtree(earlier, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"folder": str(out), "family": fit.family.name if fit else None, "constants": constants, "proof": proof,
            "shapes": {k: len(v) for k, v in fields["shapes"].items()}, "definition": d.name}


def describe(result: dict) -> str:
    if result["family"] is None:
        return (f"{result['proof']['no_family']}. Written to {result['folder']} as `astra new` writes a folder: the "
                "spec, the reference (the definition's run) and the PyTorch peer filled in, the kernel in baseline.cu "
                "and template.cu marked ASTRA-TODO for you (or the agent's generator) to write")
    constants = ", ".join(f"{k} {v}" for k, v in result["constants"].items())
    return (f"{result['definition']}: the {result['family']} family ({constants}; its reference agrees to "
            f"{result['proof']['max_relative_error']:.1g}), written to {result['folder']} "
            f"({', '.join(f'{n}: {c} shapes' for n, c in result['shapes'].items())})")

