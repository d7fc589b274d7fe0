"""A FlashInfer-Bench definition and its workloads, read and checked before anything uses them.

FlashInfer-Bench (flashinfer-bench on PyPI) describes a serving op independently of any project: a
Definition (named axes, `var` or `const`; typed inputs and outputs over them; constraints; a
reference as a Python `run(...)`) and Workloads (values of the var axes, and how each input is
made). Its schema is the flashinfer_bench.data pydantic models; this module reads the same JSON
without that package (whose install pulls flashinfer-python and its CUDA libraries), checking what
this project relies on, each failure one line that names the problem. The tests validate what the
exporter writes against flashinfer-bench's own models.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from astra_kernels.tools.errors import UsageError
from astra_kernels.jobs.generated_files import one_line

# FlashInfer-Bench's dtype names and this project's; a definition with any other (fp8, fp4, the
# integer types) is refused: the families below have no kernel for them.
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
KNOWN_DTYPES = {"bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
                "int64", "int32", "int16", "int8", "bool"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names a generated C++ or Python file could not use as an argument's name: C++'s keywords and
# alternative tokens, and the names the exported launcher (jobs/exporting/cuda_file.py) and the
# binding (generated/fib/binding.cpp.in) declare beside the arguments.
_RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if
    inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static static_assert static_cast
    struct switch template this thread_local throw true try typedef typeid typename union unsigned using
    virtual void volatile wchar_t while xor xor_eq
    stream shape status plan err device sms major minor kernel args elements label message scalar_t dtype
""".split())
_RESERVED_PREFIXES = ("astra_", "ax_", "v_", "ASTRA_", "TVM", "DL", "cuda", "__")


class DefinitionError(UsageError):
    """A definition or workload file this project cannot take: one line naming the file and the problem."""


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[str, ...] | None  # axis names; None: a scalar
    dtype: str  # FlashInfer-Bench's name (bfloat16, ...)


@dataclass
class Definition:
    name: str
    op_type: str
    axes: dict[str, int | None]  # const axes' values; None for a var axis
    inputs: list[Tensor]
    outputs: list[Tensor]
    reference: str
    constraints: list[str] = field(default_factory=list)
    description: str = ""
    raw: dict = field(default_factory=dict)  # the JSON as read, written back unchanged

    @property
    def var_axes(self) -> list[str]:
        return [a for a, v in self.axes.items() if v is None]

    def tensor(self, name: str) -> Tensor:
        return next(t for t in [*self.inputs, *self.outputs] if t.name == name)


@dataclass
class Workload:
    axes: dict[str, int]
    scalars: dict[str, float | int | bool]  # the scalar inputs' values
    uuid: str


def _name(value, what: str, where: str) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value) or keyword.iskeyword(value) \
            or value in _RESERVED or value.startswith(_RESERVED_PREFIXES):
        raise DefinitionError(f"{where}: {what} {one_line(value)[:60]!r} is not a name this project can give an "
                              "argument (an identifier that is no C++ or Python keyword)")
    return value


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise DefinitionError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DefinitionError(f"{path}: the {what} is not JSON ({one_line(e)[:120]})") from None


def parse_definition(data, where: str) -> Definition:
    if not isinstance(data, dict):
        raise DefinitionError(f"{where}: a definition is a JSON object")
    for key in ("name", "op_type", "axes", "inputs", "outputs", "reference"):
        if key not in data:
            raise DefinitionError(f"{where}: the definition has no {key!r}")
    name = _name(data["name"], "the definition's name", where)
    op_type = data["op_type"]
    if not isinstance(op_type, str) or not _IDENTIFIER.match(op_type):
        raise DefinitionError(f"{where}: op_type {one_line(op_type)[:60]!r} is not a plain name")
    if not isinstance(data["axes"], dict) or not data["axes"]:
        raise DefinitionError(f"{where}: axes must be an object of named axes")
    axes: dict[str, int | None] = {}
    for axis, spec in data["axes"].items():
        _name(axis, "axis", where)
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "var":
            axes[axis] = None
        elif kind == "const":
            value = spec.get("value")
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DefinitionError(f"{where}: const axis {axis} needs a non-negative integer value")
            axes[axis] = value
        else:
            raise DefinitionError(f"{where}: axis {axis} must be of type 'var' or 'const'")
    tensors = {}
    for role in ("inputs", "outputs"):
        if not isinstance(data[role], dict) or (role == "outputs" and not data[role]):
            raise DefinitionError(f"{where}: {role} must be an object of named tensors")
        listed = []
        for tname, spec in data[role].items():
            _name(tname, "tensor", where)
            if tname in tensors:
                raise DefinitionError(f"{where}: {tname} is both an input and an output")
            if not isinstance(spec, dict) or "dtype" not in spec or "shape" not in spec:
                raise DefinitionError(f"{where}: tensor {tname} needs a shape (a list of axes, or null) and a dtype")
            dtype = spec["dtype"]
            if not isinstance(dtype, str) or dtype not in KNOWN_DTYPES:
                raise DefinitionError(f"{where}: tensor {tname} has dtype {one_line(dtype)[:30]!r}, which "
                                      "FlashInfer-Bench does not define")
            if dtype not in DTYPES:
                raise DefinitionError(f"{where}: tensor {tname} is {dtype}; this project imports bfloat16, float16 "
                                      "and float32 definitions")
            shape = spec["shape"]
            if shape is not None:
                if not isinstance(shape, list) or not all(isinstance(a, str) for a in shape):
                    raise DefinitionError(f"{where}: tensor {tname}'s shape must be a list of axis names")
                for axis in shape:
                    if axis not in axes:
                        raise DefinitionError(f"{where}: tensor {tname} uses axis {one_line(axis)[:40]!r}, which "
                                              "the definition does not define")
                shape = tuple(shape)
            elif role == "outputs":
                raise DefinitionError(f"{where}: output {tname} is a scalar; this project imports tensor outputs")
            tensors[tname] = Tensor(tname, shape, dtype)
            listed.append(tensors[tname])
        if role == "inputs":
            inputs = listed
        else:
            outputs = listed
    reference = data["reference"]
    if not isinstance(reference, str):
        raise DefinitionError(f"{where}: reference must be Python source text")
    try:
        module = ast.parse(reference)
    except SyntaxError as e:
        raise DefinitionError(f"{where}: the reference is not Python (line {e.lineno}: {one_line(e.msg)})") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in module.body):
        raise DefinitionError(f"{where}: the reference defines no top-level function run(...)")
    constraints = data.get("constraints") or []
    if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
        raise DefinitionError(f"{where}: constraints must be a list of expressions")
    for c in constraints:
        try:
            ast.parse(c, mode="eval")
        except SyntaxError:
            raise DefinitionError(f"{where}: constraint {one_line(c)[:60]!r} is not an expression") from None
    used = {a for t in tensors.values() if t.shape for a in t.shape}
    for axis in axes:
        if axes[axis] is None and axis not in {a for t in inputs if t.shape for a in t.shape}:
            raise DefinitionError(f"{where}: var axis {axis} is in no input's shape, so a call cannot say its value")
    if unused := sorted(set(axes) - used):
        raise DefinitionError(f"{where}: axis {unused[0]} is in no tensor's shape")
    description = data.get("description") or ""
    return Definition(name, op_type, axes, inputs, outputs, reference, constraints,
                      description if isinstance(description, str) else "", data)


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer past a double's range
        return False


def read_definition(path: str | Path) -> Definition:
    path = Path(path)
    return parse_definition(_read_json(path, "definition"), str(path))


def parse_workload(data, definition: Definition, where: str) -> Workload:
    if not isinstance(data, dict):
        raise DefinitionError(f"{where}: a workload is a JSON object")
    if data.get("definition", definition.name) != definition.name:
        raise DefinitionError(f"{where}: the workload is of {one_line(data['definition'])[:60]!r}, "
                              f"not {definition.name}")
    workload = data.get("workload", data)  # a workload trace holds it under "workload"
    axes = workload.get("axes") if isinstance(workload, dict) else None
    if not isinstance(axes, dict):
        raise DefinitionError(f"{where}: the workload has no axes")
    for axis in definition.var_axes:
        value = axes.get(axis)
        if value is None:
            raise DefinitionError(f"{where}: the workload gives no value for var axis {axis}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DefinitionError(f"{where}: axis {axis} = {one_line(value)[:20]} is not a positive integer")
    scalars = {}
    inputs = workload.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise DefinitionError(f"{where}: the workload's inputs must be an object of named inputs")
    for tensor in definition.inputs:
        spec = inputs.get(tensor.name, {"type": "random"})
        kind = spec.get("type") if isinstance(spec, dict) else None
        if tensor.shape is None:
            value = spec.get("value") if kind == "scalar" else None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not _finite(value):
                raise DefinitionError(f"{where}: scalar input {tensor.name} needs a finite number as its value in "
                                      "the workload")
            scalars[tensor.name] = value
        elif kind == "safetensors":
            raise DefinitionError(f"{where}: input {tensor.name} comes from a safetensors file; this project makes "
                                  "its own inputs (random) and imports workloads of random and scalar inputs")
        elif kind not in ("random", None):
            raise DefinitionError(f"{where}: input {tensor.name} has input type {one_line(kind)[:20]!r}")
    uuid = workload.get("uuid") or ""
    return Workload({a: axes[a] for a in definition.var_axes}, scalars, str(uuid))


def read_workloads(path: str | Path, definition: Definition) -> list[Workload]:
    """Each line of a FlashInfer-Bench workload file (JSON lines of workload traces) for this definition."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise DefinitionError(f"{path}: cannot read the workloads ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise DefinitionError(f"{path}: the workloads are not text") from None
    workloads = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise DefinitionError(f"{path}:{number}: not JSON ({one_line(e)[:80]})") from None
        workloads.append(parse_workload(data, definition, f"{path}:{number}"))
    if not workloads:
        raise DefinitionError(f"{path}: holds no workload")
    for scalar in {s for w in workloads for s in w.scalars}:
        if len({w.scalars[scalar] for w in workloads}) > 1:
            raise DefinitionError(f"{path}: scalar input {scalar} takes several values across the workloads; a kernel "
                                  "folder fixes each scalar, so import one value at a time")
    return workloads
