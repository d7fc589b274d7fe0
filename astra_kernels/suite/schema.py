"""The schema every kernel folder's spec.py fills in: what the kernel computes and on what.

A spec is data, not code paths: the signature (each argument's role, dtype and shape as
expressions of the shape symbols), the shape sets from docs/kernels.md, the dtypes and variants, the
bytes moved (the roofline's numerator) and the tolerance. The suite turns it into concrete
Problems for the evaluation worker, and the planner reads it to reason about the kernel.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from astra_kernels.tools.errors import UsageError
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.measuring.problem import Tolerance

# The element type under test is spelled "T" in a signature; the rest are concrete.
# The kernels take their sizes as 32-bit ints (spec args `int32`): a larger size would wrap in the
# launch, so no shape may set one past this.
INT32_MAX = 2**31 - 1
KERNEL_DTYPE = "T"


class ArgSpec(BaseModel):
    name: str
    role: Literal["in", "out", "inout", "scalar"]
    dtype: str
    shape: list[str] = Field(default_factory=list)  # expressions of the shape symbols
    value: str | None = None  # scalars: an expression of the shape symbols
    doc: str = ""
    # Tensors: the scalar argument that carries this tensor's row stride (elements from one index of
    # its first dimension to the next), so the kernel reads rows that lie farther apart than their
    # width: q and k as views into a fused QKV projection's output, as SGLang passes them. The
    # scalar's value expression is the contiguous stride (what the suite's own runs use); the
    # exported op and callable pass the tensor's actual stride and accept such views.
    row_stride: str | None = None


class Anchor(BaseModel):
    """A production timing to beat, from docs/kernels.md (CUDA-graph replay, cold L2)."""

    device: str  # "H200" or "H100"
    shape: dict[str, int]
    dtype: str = "bf16"
    variant: str = "default"
    sglang_us: float
    torch_compile_us: float | None = None


class Seed(BaseModel):
    """A point of the kernel's template to measure first at every shape, before any search: the
    production kernel's own configuration as the template expresses it (Optuna's enqueue_trial).
    A search with a few seconds a shape sees a sliver of a space of thousands; a seed makes sure
    that sliver holds the configuration a user already has. Each value is an expression of the
    shape symbols and ELEM_BYTES, so one seed follows the kernel across shapes (SGLang's rmsnorm
    takes H / 16 threads at every H); at a shape where a value is not a whole number the template
    offers (tuning.seed_configs) or a constraint excludes it (the search's start round names it),
    the seed is not measured there."""

    note: str  # what it mirrors, for a report
    config: dict[str, str]


class Origin(BaseModel):
    """Where a kernel folder's baseline came from, for one taken from another project as it ships
    (`astra import-sglang`): the project and version, the file, and the suite kernel with the same
    arguments (its port here), which `astra bench` shows it beside."""

    project: str  # "sglang"
    version: str
    file: str  # the source file, as the package holds it
    op: str  # the Python function that launches it there
    port: str  # the suite kernel with this signature


def _sweep_tokens(last: int = 16384, step: float = 1.5) -> tuple[int, ...]:
    counts = list(range(1, 9))
    while counts[-1] * step < last:
        counts.append(round(counts[-1] * step))
    return (*counts, last)


# The token axis as a server walks it (issue 42): every count from 1 to 8 (decode's batches), then
# steps of about 1.5x to 16384 (prefill's): 27 counts, one whatever a table was tuned at.
SWEEP_TOKENS = _sweep_tokens()
SWEEP = "sweep"  # the shape set built from them (KernelSpec.sweep_shapes), not kept in a spec


class KernelSpec(BaseModel):
    name: str
    summary: str
    symbols: list[str]
    args: list[ArgSpec]
    dtypes: list[str]
    variants: dict[str, dict[str, int]] = Field(default_factory=lambda: {"default": {}})
    shapes: dict[str, list[dict[str, int]]]
    bytes_moved: str  # expression of the shape symbols and ELEM_BYTES
    # Of those, the bytes written (the rest is read): the kernel's read/write mix, which its physical
    # floor streams. None: the out and inout buffers, right unless the kernel reads a buffer sparsely
    # (rotary_embedding's cos/sin cache, of which it reads only the tokens' positions).
    bytes_written: str | None = None
    flops: str = "0"
    tolerances: dict[str, Tolerance] = Field(default_factory=dict)
    anchors: list[Anchor] = Field(default_factory=list)
    origin: Origin | None = None
    seeds: list[Seed] = Field(default_factory=list)
    # The sweep's widths besides the serving set's (each the shape's symbols but the first): sizes in
    # no set, which no table was tuned at, chosen where the kernel's constraints admit them.
    sweep_widths: list[dict[str, int]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "KernelSpec":
        if not any(self.shapes.values()):
            raise ValueError(f"{self.name}: shapes needs a set with at least one shape")
        known = set(self.symbols) | {"ELEM_BYTES"}
        for arg in self.args:
            for text in [*arg.shape, *([arg.value] if arg.value else [])]:
                unknown = Expression(text).names - known
                if unknown:
                    raise ValueError(f"{self.name}: argument {arg.name} uses unknown symbol(s) {sorted(unknown)}")
            if arg.role == "scalar" and arg.value is None:
                raise ValueError(f"{self.name}: scalar {arg.name} needs a value expression")
            if arg.row_stride is not None:
                self._check_row_stride(arg)
        for expr in (self.bytes_moved, self.flops, *([self.bytes_written] if self.bytes_written else [])):
            unknown = Expression(expr).names - known
            if unknown:
                raise ValueError(f"{self.name}: {expr!r} uses unknown symbol(s) {sorted(unknown)}")
        for set_name, shapes in self.shapes.items():
            for shape in shapes:
                if set(shape) != set(self.symbols):
                    raise ValueError(f"{self.name}: shape {shape} in {set_name} must set exactly {self.symbols}")
        for seed in self.seeds:
            for name, text in seed.config.items():
                unknown = Expression(text).names - known
                if unknown:
                    raise ValueError(f"{self.name}: seed {seed.note!r} sets {name} from unknown symbol(s) {sorted(unknown)}")
        for width in self.sweep_widths:
            if set(width) != set(self.symbols[1:]):
                raise ValueError(f"{self.name}: sweep width {width} must set exactly {self.symbols[1:]} (all but the "
                                 f"token symbol {self.symbols[0]})")
        if SWEEP in self.shapes:
            raise ValueError(f"{self.name}: the {SWEEP!r} set is built from the serving set (sweep_shapes), not listed")
        for anchor in self.anchors:
            if anchor.variant not in self.variants:
                raise ValueError(f"{self.name}: anchor variant {anchor.variant} is not a variant")
        return self

    def _check_row_stride(self, arg: ArgSpec) -> None:
        carrier = next((a for a in self.args if a.name == arg.row_stride), None)
        if arg.role == "scalar" or len(arg.shape) < 2:
            raise ValueError(f"{self.name}: row_stride on {arg.name}: only a tensor of two or more dimensions has rows")
        if carrier is None or carrier.role != "scalar" or not carrier.dtype.startswith("int"):
            raise ValueError(f"{self.name}: {arg.name}'s row_stride {arg.row_stride!r} must name an integer scalar argument")
        contiguous = " * ".join(f"({d})" for d in arg.shape[1:])
        probe = {s: 3 + 2 * i for i, s in enumerate(self.symbols)} | {"ELEM_BYTES": 2}
        if Expression(carrier.value)(probe) != Expression(contiguous)(probe):
            raise ValueError(f"{self.name}: {arg.row_stride} = {carrier.value} is not {arg.name}'s contiguous row "
                             f"stride {contiguous}")

    def default_dtype(self) -> str:
        """The dtype a run takes when none is given: bf16 where the kernel has it (SGLang serves in
        bf16), else its first."""
        return "bf16" if "bf16" in self.dtypes else self.dtypes[0]

    def default_shapes(self) -> list[dict[str, int]]:
        """The shapes a tuning or agent run takes when none are given: Astra's, else serving's, else
        the first set (a kernel of your own names its sets as it likes)."""
        return self.shapes.get("astra") or self.shapes.get("serving") or next(iter(self.shapes.values()), [])

    def all_shapes(self) -> list[dict[str, int]]:
        """Every shape of every set, each once, in set order."""
        seen, shapes = set(), []
        for shape_set in self.shapes.values():
            for shape in shape_set:
                key = tuple(shape[s] for s in self.symbols)
                if key not in seen:
                    seen.add(key)
                    shapes.append(shape)
        return shapes

    def sweep_shapes(self, held_out: bool = True) -> list[dict[str, int]]:
        """The sweep set: the first symbol (the tokens) over SWEEP_TOKENS at every width of the
        serving set (else of the default shapes) and, with `held_out`, at `sweep_widths`; the width
        order kept. A tune takes it without the held-out widths: they stay in no table, so the
        benchmark's sweep shows what dispatch gives a width nobody tuned."""
        token, rest = self.symbols[0], self.symbols[1:]
        widths: list[dict[str, int]] = []
        for shape in [*(self.shapes.get("serving") or self.default_shapes()), *(self.sweep_widths if held_out else [])]:
            width = {s: shape[s] for s in rest}
            if width not in widths:
                widths.append(width)
        return [{token: t, **width} for width in widths for t in SWEEP_TOKENS]

    def shape_set(self, name: str, tuning: bool = False) -> list[dict[str, int]]:
        """A named set's shapes: the spec's own, or the sweep built from them (for `tuning`, without
        its held-out widths); a name it has not, a KeyError naming the ones it has."""
        if name == SWEEP:
            return self.sweep_shapes(held_out=not tuning)
        if name not in self.shapes:
            raise KeyError(f"{self.name} has no shape set {name!r}; it has {', '.join([*self.shapes, SWEEP])}")
        return self.shapes[name]

    def label(self, shape: dict[str, int]) -> str:
        return "x".join(str(shape[s]) for s in self.symbols)

    def shape_format(self) -> str:
        """How a shape is written on a command line: the symbols in the order parse_shape reads
        them (`TxH`)."""
        return "x".join(self.symbols)

    def example_shape(self) -> str:
        """A shape string parse_shape takes: the first one a run takes when none is given."""
        return self.label(self.default_shapes()[0])

    def shape_syntax(self) -> str:
        """What an error about a shape asks for: `TxH with positive integers, e.g. 128x4096`."""
        return f"{self.shape_format()} with positive integers, e.g. {self.example_shape()}"

    def parse_shape(self, text: str) -> dict[str, int]:
        """`16x4096` -> {T: 16, H: 4096}, in the order of `symbols`; UsageError naming the text
        and how to write one otherwise. ASCII digits only (int() also reads '١٦', which no one
        types as a shape on purpose), each size at most INT32_MAX, the kernels' argument type."""
        parts = text.strip().lower().split("x")
        if len(parts) != len(self.symbols) or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"{text!r} is not a {self.name} shape; write {self.shape_syntax()}")
        shape = dict(zip(self.symbols, map(int, parts)))
        if past := [f"{s}={v}" for s, v in shape.items() if v > INT32_MAX]:
            raise UsageError(f"{text!r}: {', '.join(past)} is past the kernels' 32-bit size arguments "
                             f"(at most {INT32_MAX})")
        return shape

    def parse_shapes(self, text: str) -> list[dict[str, int]]:
        """A comma-separated list of shapes (`16x4096,64x8192`); an empty item is an error, not
        skipped, since it is most often a shape lost to a typo. `sweep@WIDTH` (`sweep@5120`; the
        shape less its first symbol, `sweep@64x8` for topk_softmax) is the sweep's token counts at
        that width: a model's own width tuned along the token axis as a server walks it, as the
        sweep set does at the serving widths. A shape given twice is kept once."""
        items = text.split(",")
        if not text.strip() or any(not item.strip() for item in items):
            raise UsageError(f"{text!r} has an empty shape; write shapes as {self.shape_syntax()}, "
                             "separated by commas")
        shapes: list[dict[str, int]] = []
        for item in items:
            head, at, width = item.strip().partition("@")
            if at and head.strip().lower() == SWEEP:
                try:
                    one = self.parse_shape(f"1x{width}")  # "sweep@x5120" reads 1xx5120: no shape
                except UsageError:
                    raise UsageError(f"{item.strip()!r} is not a {self.name} sweep; write sweep@"
                                     f"{'x'.join(self.symbols[1:])} (the shape less its first symbol, e.g. "
                                     f"sweep@{self.example_shape().split('x', 1)[1]})") from None
                found = [{**one, self.symbols[0]: t} for t in SWEEP_TOKENS]
            else:
                found = [self.parse_shape(item)]
            shapes += [shape for shape in found if shape not in shapes]
        return shapes

    def check_dtype(self, dtype: str) -> str:
        if dtype not in self.dtypes:
            raise UsageError(f"{self.name} does not run in {dtype}; it runs in {', '.join(self.dtypes)}")
        return dtype

    def check_variant(self, variant: str) -> str:
        if variant not in self.variants:
            raise UsageError(f"{self.name} has no variant {variant!r}; it has {', '.join(self.variants)}")
        return variant
