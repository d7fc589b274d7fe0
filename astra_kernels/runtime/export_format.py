"""What an exported folder holds, shared by the writer (astra export) and the reader (the callable
that `<kernel>_launch.py` loads): the manifest's name and format version, the binaries and flag
groups it lists, and how a pick maps to a binary.

FORMAT_VERSION counts changes to export.json that a reader must know about. Folders written before
the field existed are version 1; a reader refuses a version newer than its own, by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.toolchain.dtypes import C_TYPES
from astra_kernels.tools.templating.template import Instance, Template

MANIFEST = "export.json"
OP_NAMESPACE = "astra"  # the exported kernels' torch.library namespace: torch.ops.astra.<op_name>
# 1: no "format" field (before 2026-11-24); 2: the field itself; 3: the table may hold named
# sources (the agent's rewrites and model templates), and the plan's `source` indexes them.
FORMAT_VERSION = 3


class ExportError(AstraError):
    """A source that cannot be exported, with what is wrong with it."""


def op_name(kernel: str, dtype: str) -> str:
    """The custom op of an exported kernel (torch.ops.astra.rmsnorm_bf16): one per kernel and dtype,
    so a bf16 and an fp16 export load side by side."""
    return f"{kernel}_{dtype}"


def torch_op_file(kernel: str) -> str:
    """The exported folder's C++ source of that op."""
    return f"{kernel}_torch.cpp"


@dataclass
class Binary:
    """One kernel of the exported file: a source at a configuration with its shape-derived defines."""

    name: str
    source: str  # "template", "baseline" or a name among the table's sources
    config: dict[str, int]
    derived: dict[str, int]
    fast_math: bool
    max_registers: int  # 0: no cap
    group: int = 0
    shapes: list[str] = field(default_factory=list)  # covered shapes whose pick it is
    at: str = ""  # the first covered shape where it takes these defines (where to rebuild it from the template)

    def key(self) -> tuple:
        return (self.source, tuple(self.config.values()), tuple(self.derived.values()),
                int(self.fast_math), self.max_registers)


@dataclass(frozen=True)
class Group:
    """Binaries compiled with the same flags (nvcc cannot mix fast math within one file)."""

    fast_math: bool
    max_registers: int

    def nvcc_flags(self) -> list[str]:
        return (["--use_fast_math"] if self.fast_math else []) + (
            [f"-maxrregcount={self.max_registers}"] if self.max_registers else [])


def binary_key(template: Template, source: str, config: dict[str, int], instance: Instance) -> tuple:
    """What makes two picks the same binary: the source (`template` parsed), its parameters, the
    values its `derive` lines give at the shape, and the compile flags the source sets there."""
    derived = tuple(int(instance.defines[d.name]) for d in template.derived)
    values = tuple(int(config[p]) for p in template.names)
    return (source, values, derived, int(instance.fast_math), int(instance.max_registers or 0))


def c_signature(spec, dtype: str) -> list[tuple[str, str]]:
    """(C type, name) of each argument of the exported `<kernel>_launch`, as the spec gives them:
    tensors as pointers (const where only read), scalars by value. The .cu, its header and the
    PyTorch op's C++ all declare it so."""
    params = []
    for arg in spec.args:
        arg_dtype = dtype if arg.dtype == "T" else arg.dtype
        if arg_dtype not in C_TYPES:
            raise ExportError(f"{spec.name}: argument {arg.name} has dtype {arg_dtype}, which has no C type here")
        ctype = C_TYPES[arg_dtype]
        if arg.role == "scalar":
            params.append((ctype, arg.name))
        else:
            params.append((f"{'const ' if arg.role == 'in' else ''}{ctype}*", arg.name))
    return params


def shape_args(spec) -> dict[str, str]:
    """Each shape symbol and the scalar argument that carries it (tokens -> T, ...)."""
    carriers = {}
    for arg in spec.args:
        if arg.role == "scalar" and arg.value and arg.value.strip() in spec.symbols:
            carriers.setdefault(arg.value.strip(), arg.name)
    missing = [s for s in spec.symbols if s not in carriers]
    if missing:
        raise ExportError(f"{spec.name}: no scalar argument carries {', '.join(missing)}, so a C launcher "
                          "cannot tell the shape from its arguments")
    return {s: carriers[s] for s in spec.symbols}
