"""`<kernel>_torch.cpp`: an exported kernel as a PyTorch custom op (torch.ops.astra.<kernel>_<dtype>).

The exported .cu's host launch (`<kernel>_launch`) already picks and launches from C++; this file
gives it a PyTorch schema and a CUDA implementation that reads the shape from the tensors, checks
each argument and launches on PyTorch's current stream. Written beside the .cu by `astra export`
(so the folder holds everything a build needs, and the text is the same for the same table),
built and loaded by astra_kernels/runtime/torch_op.py.

The schema follows the spec: tensors in order, those the kernel writes (`out`, `inout`) declared
mutated (`Tensor(a!)`, each its own alias set) so torch.compile functionalizes the call, scalars
the shape does not give as `float` or `int`; the op returns nothing, as SGLang's sgl_kernel ops
with an `out=` argument write into it.
"""

from __future__ import annotations

from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.templating.expressions_cpp import HELPERS, to_cpp
from astra_kernels.tools.toolchain.dtypes import FLOAT_TYPES

from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchTable
from astra_kernels.runtime.export_format import (
    ExportError, c_signature, caller_scalars, op_name, row_strides, rows_apart_allowed, shape_args, shape_params,
    tensor_symbols,
)
from ..generated_files import fill

# PyTorch's ScalarType for each dtype a spec may name
TORCH_SCALAR_TYPES = {"bf16": "at::kBFloat16", "fp16": "at::kHalf", "fp32": "at::kFloat", "fp64": "at::kDouble",
                      "fp8_e4m3": "at::kFloat8_e4m3fn", "fp8_e5m2": "at::kFloat8_e5m2", "int8": "at::kChar",
                      "uint8": "at::kByte", "int32": "at::kInt", "int64": "at::kLong"}


def schema(folder: suite.KernelFolder, dtype: str) -> str:
    """The op's schema, e.g. `rmsnorm_bf16(Tensor x, Tensor w, Tensor(a!) out, float eps) -> ()`."""
    given = {a.name for a in caller_scalars(folder.spec)}
    aliases = iter("abcdefghijklmnopqrstuvwxyz")
    parts = []
    for arg in folder.spec.args:
        if arg.role == "scalar":
            if arg.name in given:
                parts.append(f"{'float' if arg.dtype in FLOAT_TYPES else 'int'} {arg.name}")
        elif arg.role == "in":
            parts.append(f"Tensor {arg.name}")
        else:
            parts.append(f"Tensor({next(aliases)}!) {arg.name}")
    return f"{op_name(folder.name, dtype)}({', '.join(parts)}) -> ()"


def render(table: DispatchTable, folder: suite.KernelFolder) -> str:
    """The text of `<kernel>_torch.cpp` for the table's kernel and dtype (the same table, the same text)."""
    spec, dtype = folder.spec, table.dtype
    carriers = shape_args(spec)  # symbol -> the scalar argument carrying it
    carried = {name: symbol for symbol, name in carriers.items()}
    tensors = [a for a in spec.args if a.role != "scalar"]
    for arg in tensors:
        arg_dtype = dtype if arg.dtype == "T" else arg.dtype
        if arg_dtype not in TORCH_SCALAR_TYPES:
            raise ExportError(f"{folder.name}: argument {arg.name} has dtype {arg_dtype}, which has no PyTorch type here")

    def symbol_var(symbol: str) -> str:
        return f"sym_{symbol}"

    given = {a.name for a in caller_scalars(spec)}
    strides = row_strides(spec)  # scalar -> the tensor whose row stride it carries
    params, checks, launch = [], [], []
    for (ctype, name), arg in zip(c_signature(spec, dtype), spec.args):
        if arg.role == "scalar":
            if name in strides:
                launch.append(f"static_cast<{ctype}>(stride_{name})")
            elif name not in given:
                launch.append(f"static_cast<int>({symbol_var(carried[name])})")
            else:
                params.append(f"{'double' if arg.dtype in FLOAT_TYPES else 'int64_t'} {name}")
                launch.append(f"static_cast<{ctype}>({name})")
        else:
            params.append(f"const at::Tensor& {name}")
            launch.append(f"reinterpret_cast<{ctype}>({name}.data_ptr())")
    launch += [f"static_cast<int>({symbol_var(symbol)})" for symbol in shape_params(spec)]
    for arg in tensors:
        arg_dtype = dtype if arg.dtype == "T" else arg.dtype
        check = "ASTRA_ROWS_APART" if arg.row_stride and rows_apart_allowed(spec, table) else "ASTRA_TENSOR"
        checks.append(f"    {check}({arg.name}, {TORCH_SCALAR_TYPES[arg_dtype]}, {len(arg.shape)});")
    from_tensors = tensor_symbols(spec)
    for symbol in spec.symbols:  # from the first dimension that is the symbol itself, else its scalar
        if symbol in from_tensors:
            name, dim = from_tensors[symbol]
            checks.append(f"    ASTRA_SYMBOL({symbol_var(symbol)}, {name}, {dim});")
        else:
            checks.append(f"    ASTRA_GIVEN({symbol_var(symbol)}, {carriers[symbol]});")
    for arg in tensors:
        for dim, text in enumerate(arg.shape):
            checks.append(f"    ASTRA_SIZE({arg.name}, {dim}, {to_cpp(Expression(text), symbol_var)});")
    checks += [f"    ASTRA_ROW_STRIDE(stride_{name}, {tensor});" for name, tensor in strides.items()]
    text = fill("export_torch_op.cpp.in", KERNEL=table.kernel, OP=op_name(table.kernel, dtype),
                SCHEMA=schema(folder, dtype), FIRST=tensors[0].name, PARAMS=", ".join(params),
                CHECKS="\n".join(checks), LAUNCH=", ".join(launch))
    return text.replace("@HELPERS@", HELPERS.strip())  # the translator's own helpers: a constant of this package
