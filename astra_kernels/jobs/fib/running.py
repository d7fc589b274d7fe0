"""A definition's reference `run(...)`, called as FlashInfer-Bench calls it: inputs positionally in
the definition's order, the outputs returned (one tensor, or a tuple in the outputs' order).

The reference is Python that FlashInfer-Bench runs to judge every solution; this project runs it
too (to prove a family's match on import, and as an imported folder's reference and PyTorch peer),
so a definition file is code: import only definitions you would run. The import writes it into the
kernel folder as `fib_reference.py`, which loads as the folder's other Python files do.

Evaluated in float64 where its math allows: the inputs are given as float64 tensors, so the
reference's own arithmetic runs in float64 unless it casts (FlashInfer-Bench's norms cast to
float32 before reducing: their math is then float32, about 1e-7 relative, far below a bf16 or
fp16 output's tolerance). The outputs are returned as float64 whatever the reference ends in.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

import numpy as np

from astra_kernels.jobs.generated_files import one_line
from .definition import Definition, DefinitionError


def torch_module():
    try:
        import torch
    except ImportError:
        raise DefinitionError("a FlashInfer-Bench definition's reference is PyTorch: install torch "
                              "(pip install torch) to import or run it") from None
    return torch


def run_function(definition: Definition, path: Path) -> Callable:
    """The `run` of the reference file `path` (the definition's reference, as the import wrote it into
    the kernel folder), loaded as a module of its own: the way every kernel folder's Python runs."""
    torch_module()
    try:
        text = path.read_text()
    except OSError as e:
        raise DefinitionError(f"{path}: cannot read the reference ({e.strerror or e})") from None
    if text != definition.reference:
        raise DefinitionError(f"{path} is not the reference of {path.parent / 'definition.json'} (edited?): change "
                              "the definition and import it again, so the two stay one")
    spec = importlib.util.spec_from_file_location(f"astra_fib_reference_{definition.name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the reference's own top level failed: say where, in one line
        raise DefinitionError(f"{path}: the reference fails as it loads ({type(e).__name__}: "
                              f"{one_line(e)[:160]})") from None
    run = getattr(module, "run", None)
    if not callable(run):
        raise DefinitionError(f"{path}: defines no run()")
    return run


def call(definition: Definition, run: Callable, values: dict, *, device: str = "cpu",
         dtype=None) -> dict[str, np.ndarray]:
    """Each output of `run` on `values` (NumPy arrays of the tensor inputs, Python numbers of the
    scalar ones), by the outputs' names, as float64 arrays. Tensors go in as `dtype` (default
    float64) on `device`."""
    torch = torch_module()
    dtype = dtype or torch.float64
    args = []
    for tensor in definition.inputs:
        value = values[tensor.name]
        args.append(value if tensor.shape is None else torch.from_numpy(np.ascontiguousarray(value, dtype=np.float64))
                    .to(device=device, dtype=dtype))
    try:
        with torch.no_grad():
            result = run(*args)
    except Exception as e:
        raise DefinitionError(f"{definition.name}: its reference raised {type(e).__name__}: {one_line(e)[:160]}") from None
    return outputs_by_name(definition, result)


def outputs_by_name(definition: Definition, result) -> dict[str, np.ndarray]:
    torch = torch_module()
    names = [t.name for t in definition.outputs]
    if isinstance(result, dict):
        result = [result.get(n) for n in names]
    elif not isinstance(result, (tuple, list)):
        result = [result]
    if len(result) != len(names):
        raise DefinitionError(f"{definition.name}: its reference returned {len(result)} values for "
                              f"{len(names)} outputs ({', '.join(names)})")
    out = {}
    for name, value in zip(names, result):
        if not isinstance(value, torch.Tensor):
            raise DefinitionError(f"{definition.name}: its reference returned {type(value).__name__} for output {name}")
        out[name] = value.detach().to("cpu", torch.float64).numpy()
    return out
