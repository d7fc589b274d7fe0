"""What a kernel folder written by `astra import-fib` runs when it loads: its spec, inputs, float64
reference and PyTorch peer, all from the two files the import left in it.

    definition.json   the FlashInfer-Bench definition, as given (its reference is the folder's)
    fib_reference.py  that reference as a file, which runs as the folder's other Python does
    fib.json          the import's record: the family matched, the spec (KernelSpec fields: the
                      family's arguments named after the definition's tensors, the shape sets from
                      the workloads), which definition tensor each argument is, and the proof

The folder's spec.py, reference.py and peer.py are fixed text (jobs/generated/fib/) that call
this module, so no value of a definition file is ever pasted into Python source: names reach the
spec as data and are validated by KernelSpec when the folder loads.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from astra_kernels.suite.schema import KernelSpec
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.toolchain.dtypes import numpy_dtype
from .definition import Definition, DefinitionError, parse_definition
from .running import call, run_function

RECORD = "fib.json"
DEFINITION = "definition.json"
REFERENCE = "fib_reference.py"  # the definition's reference as a file of the folder (running.py)
WORKLOADS = "workloads.jsonl"
RECORD_FORMAT = 1


@lru_cache(maxsize=None)
def _load(folder: str) -> tuple[dict, Definition]:
    path = Path(folder)
    try:
        record = json.loads((path / RECORD).read_text())
        data = json.loads((path / DEFINITION).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DefinitionError(f"{path}: not a folder `astra import-fib` wrote ({e})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise DefinitionError(f"{path / RECORD}: written by another version of astra import-fib (format "
                              f"{record.get('format') if isinstance(record, dict) else None}, this one reads "
                              f"{RECORD_FORMAT}): import the definition again")
    return record, parse_definition(data, str(path / DEFINITION))


def record(folder: Path) -> dict:
    return _load(str(Path(folder).resolve()))[0]


def definition(folder: Path) -> Definition:
    return _load(str(Path(folder).resolve()))[1]


def spec(folder: Path) -> KernelSpec:
    return KernelSpec(**record(folder)["spec"])


class Runtime:
    """make_inputs, reference and the peer's forward of one imported folder."""

    def __init__(self, folder: Path):
        self.folder = Path(folder).resolve()
        self.record = record(self.folder)
        self.definition = definition(self.folder)
        self.spec = spec(self.folder)
        self._run = None

    @property
    def run(self):
        if self._run is None:
            self._run = run_function(self.definition, self.folder / REFERENCE)
        return self._run

    def make_inputs(self, rng: np.random.Generator, shape: dict, dtype: str, variant: str) -> dict:
        """N(0, 1) for every tensor input, as FlashInfer-Bench's random inputs are, each in its own dtype."""
        arrays = {}
        for arg in self.spec.args:
            if arg.role in ("in", "inout"):
                dims = tuple(int(Expression(d)(shape)) for d in arg.shape)
                storage = numpy_dtype(dtype if arg.dtype == "T" else arg.dtype)  # a tensor of its own dtype keeps it
                arrays[arg.name] = rng.standard_normal(dims, dtype=np.float32).astype(storage)
        return arrays

    def _scalars(self) -> dict:
        return dict(self.record.get("scalars", {}))

    def reference(self, inputs: dict, shape: dict, dtype: str, variant: str) -> dict:
        values = {**self._scalars(), **{n: np.asarray(a, dtype=np.float64) for n, a in inputs.items()}}
        return call(self.definition, self.run, values)

    def forward(self, tensors: dict, scalars: dict, variant: str) -> dict:
        """The definition's reference on the device's tensors in their own dtype: the code its users
        run, the bar `astra bench --torch eager,compile` times the tuned kernel against."""
        args = [self._scalars()[t.name] if t.shape is None else tensors[t.name] for t in self.definition.inputs]
        result = self.run(*args)
        names = [t.name for t in self.definition.outputs]
        if not isinstance(result, (tuple, list)):
            result = [result]
        return dict(zip(names, result))


