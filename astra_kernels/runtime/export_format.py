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
# sources (the agent's rewrites and model templates), and the plan's `source` indexes them; 4: the
# kernels take the row-stride scalars of their spec (ArgSpec.row_stride: rotary_embedding's q_stride
# and k_stride), so a reader passes a view's stride only to a folder of format 4 or later.
FORMAT_VERSION = 4
ROW_STRIDES_SINCE = 4


def rows_apart_allowed(spec, table) -> bool:
    """Whether the exported op and callable take a row-stride tensor with its rows apart: only where
    every kernel the table can launch is the folder's own template or baseline, whose stride handling
    the GPU tests hold to contiguous results. An agent's rewrite keeps the signature but nothing
    checks that it honours the stride (the suite's checks pass contiguous rows), so a table carrying
    one takes such tensors contiguous."""
    return bool(row_strides(spec)) and not table.sources


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
    """(C type, name) of each argument of the kernels themselves, as the spec gives them: tensors as
    pointers (const where only read), scalars by value."""
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


def launch_signature(spec, dtype: str) -> list[tuple[str, str]]:
    """(C type, name) of each argument of the exported `<kernel>_launch`: the kernels' own, then an
    `int` for each shape symbol no scalar of theirs carries (shape_params). The .cu, its header and
    the PyTorch op's C++ all declare it so."""
    return c_signature(spec, dtype) + [("int", symbol) for symbol in shape_params(spec)]


def row_strides(spec) -> dict[str, str]:
    """Each scalar argument that carries a tensor's row stride (ArgSpec.row_stride), and that tensor:
    the PyTorch op and the callable pass the tensor's own stride there (so they take views whose rows
    lie apart, as a QKV split gives), never a caller's value or a shape symbol."""
    return {arg.row_stride: arg.name for arg in spec.args if arg.role != "scalar" and arg.row_stride}


def shape_params(spec) -> list[str]:
    """The shape symbols no scalar argument carries, which the launch takes as arguments of their own
    named after the symbol: rotary_embedding's cache length P is only the cos/sin cache's row count,
    which the kernel never needs, but the pick keys on the whole shape."""
    strides = row_strides(spec)
    carried = {arg.value.strip() for arg in spec.args if arg.role == "scalar" and arg.value and arg.name not in strides}
    own = [s for s in spec.symbols if s not in carried]
    if clash := sorted(set(own) & {arg.name for arg in spec.args}):
        raise ExportError(f"{spec.name}: shape symbol {', '.join(clash)} is also an argument's name, so the "
                          "launch cannot take it as an argument of its own")
    return own


def shape_args(spec) -> dict[str, str]:
    """Each shape symbol and the launch argument that carries it: a scalar of the kernel's (tokens -> T),
    else the symbol's own argument (shape_params)."""
    carriers, strides = {}, row_strides(spec)
    for arg in spec.args:
        if arg.role == "scalar" and arg.value and arg.value.strip() in spec.symbols and arg.name not in strides:
            carriers.setdefault(arg.value.strip(), arg.name)
    carriers.update({s: s for s in shape_params(spec)})
    return {s: carriers[s] for s in spec.symbols}


def tensor_symbols(spec) -> dict[str, tuple[str, int]]:
    """Each shape symbol some tensor dimension is exactly, with the first such (argument, dimension):
    where the PyTorch op and the Python callable read it."""
    found: dict[str, tuple[str, int]] = {}
    for arg in spec.args:
        if arg.role != "scalar":
            for dim, text in enumerate(arg.shape):
                if text.strip() in spec.symbols:
                    found.setdefault(text.strip(), (arg.name, dim))
    return found


def caller_scalars(spec) -> list:
    """The scalar arguments a caller of the PyTorch op or the Python callable passes: every scalar but
    those carrying a symbol the tensors' sizes give (rmsnorm's T and H), so eps, and rotary_embedding's
    head counts and head size, which q[N, HQ * D] holds only as a product. A symbol neither a tensor
    dimension nor a scalar gives cannot be called."""
    from_tensors = tensor_symbols(spec)
    carried = {name: symbol for symbol, name in shape_args(spec).items()}
    # a symbol only the launch's own argument carries (a scalar may share its name: astra new's N)
    if missing := [s for s in shape_params(spec) if s not in from_tensors]:
        raise ExportError(f"{spec.name}: neither a tensor dimension nor a scalar argument gives "
                          f"{', '.join(missing)}, so a caller cannot tell the shape")
    strides = row_strides(spec)
    return [a for a in spec.args if a.role == "scalar" and a.name not in strides
            and carried.get(a.name) not in from_tensors]
