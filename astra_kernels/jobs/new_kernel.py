"""`astra new NAME [--from FILE.cu]`: a kernel folder to fill in, with what can be read from the source
already filled in.

Writing a folder by hand (spec.py, reference.py, baseline.cu, template.cu) took a quarter of an hour
with a shipped one as the model. Given a .cu, its extern "C" __global__ entry's signature is read:
pointer arguments become buffers (`const` ones read only, the others written; their element type the
type under test when it is the file's floating type), integer arguments the shape symbols, other
scalars scalars; the file becomes baseline.cu and template.cu (no parameters yet: the agent's
templater, or you, add them) under a few directives. What cannot be read (what it computes, the
shapes, the launch geometry, the bytes moved) is marked ASTRA-TODO; `unfinished` lists those lines,
and `astra check` shows them until none is left.
"""

from __future__ import annotations

import keyword

import re
from dataclasses import dataclass
from pathlib import Path

from astra_kernels.jobs.generated_files import comment_text, generated_text, py_text
from astra_kernels.tools.errors import UsageError
from astra_kernels.tools.toolchain.dtypes import numpy_dtype

TODO = "ASTRA-TODO"
FILES = ("spec.py", "reference.py", "baseline.cu", "template.cu")

# C spellings of the suite's dtypes (tools/toolchain/dtypes.py C_TYPES, and the usual aliases)
_TYPES = {
    "float": "fp32", "double": "fp64", "__half": "fp16", "half": "fp16", "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16", "bf16_t": "bf16", "fp16_t": "fp16", "int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32", "long long": "int64",
    "int64_t": "int64", "long": "int64", "unsigned long long": "uint64", "uint64_t": "uint64",
    "size_t": "uint64", "int8_t": "int8", "signed char": "int8", "uint8_t": "uint8", "unsigned char": "uint8",
    "char": "int8", "__nv_fp8_e4m3": "fp8_e4m3", "__nv_fp8_e5m2": "fp8_e5m2",
    "scalar_t": "T", "DTYPE": "T",  # common.cuh's element type under test
}
_FLOATING = ("fp32", "fp64", "fp16", "bf16")
_ENTRY = re.compile(r'(extern\s+"C"\s+)?__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
                    r"([A-Za-z_]\w*)\s*\(([^)]*)\)", re.S)


@dataclass(frozen=True)
class Argument:
    name: str
    pointer: bool
    const: bool
    dtype: str  # a suite dtype, or "T"
    c_type: str


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def read_signature(source: str, path: str) -> tuple[str, list[Argument], bool]:
    """The first __global__ entry's name, its arguments, and whether it is extern "C" already.
    UsageError for a file with none, or an argument whose type is not one the suite launches."""
    code = _strip_comments(source)
    if re.search(r"template\s*<[^>]*>\s*__global__", code):
        raise UsageError(f"{path}: its kernel is a C++ template; add an extern \"C\" __global__ entry that calls one "
                         "instantiation of it, and give that file")
    match = _ENTRY.search(code)
    if not match:
        raise UsageError(f"{path}: no `__global__ void NAME(...)` kernel in it")
    args = []
    for raw in [a.strip() for a in match.group(3).split(",") if a.strip()]:
        words = raw.replace("*", " * ").replace("&", " & ").split()
        if "&" in words or len(words) < 2:
            raise UsageError(f"{path}: kernel argument {raw!r}: write each as TYPE NAME (pointers or scalars)")
        if not words[-1].isidentifier() or not words[-1].isascii():
            raise UsageError(f"{path}: kernel argument {raw!r}: its name must be a C identifier")
        name, words = words[-1], [w for w in words[:-1] if w not in ("__restrict__", "__restrict", "restrict",
                                                                      "__grid_constant__")]
        pointer, const = "*" in words, "const" in words
        c_type = " ".join(w for w in words if w not in ("*", "const", "volatile"))
        dtype = _TYPES.get(c_type)
        if dtype is None or words.count("*") > 1:
            raise UsageError(f"{path}: kernel argument {raw!r}: type {c_type or raw!r} is none the suite launches "
                             f"(pointers to or scalars of {', '.join(sorted(set(_TYPES) - {'DTYPE'}))}); a struct "
                             "argument needs an entry that takes its fields")
        args.append(Argument(name, pointer, const, dtype, c_type))
    return match.group(2), args, bool(match.group(1))


def _symbol(name: str, taken: set[str]) -> str:
    symbol = re.sub(r"\W", "_", name).upper()
    while symbol in taken or symbol in ("T", "ELEM_BYTES", "SMS", "SM"):
        symbol += "_"
    taken.add(symbol)
    return symbol


def scaffold(name: str, source: str, origin: str) -> dict[str, str]:
    """The folder's files for a kernel named `name` with `source` (origin: where it came from)."""
    kernel, args, extern_c = read_signature(source, origin or "the skeleton kernel")
    floating = [a.dtype for a in args if a.pointer and a.dtype in _FLOATING]
    element = "T" if any(a.dtype == "T" for a in args) else (max(set(floating), key=floating.count) if floating else None)
    taken: set[str] = set()
    sizes = {a.name: _symbol(a.name, taken) for a in args if not a.pointer and a.dtype in ("int32", "int64", "uint32",
                                                                                           "uint64")}
    symbols = list(sizes.values()) or [_symbol("n", taken)]
    lines, outputs = [], []
    moved: dict[tuple[str, str], int] = {}  # (size, bytes per element) -> times moved
    for a in args:
        if a.pointer:
            dtype = "T" if a.dtype in (element, "T") else a.dtype
            role = "in" if a.const else "out"
            size = " * ".join(symbols)
            key = (size, "ELEM_BYTES" if dtype == "T" else str(numpy_dtype(dtype).itemsize))
            moved[key] = moved.get(key, 0) + 1
            if role == "out":
                outputs.append(a.name)
            note = (" or inout, if the kernel also reads it" if role == "out" else "") + ": check the role and shape"
            lines.append(f'        ArgSpec(name="{a.name}", role="{role}", dtype="{dtype}", shape=["{size}"]),'
                         f"  # {TODO}{note}")
        elif a.name in sizes:
            lines.append(f'        ArgSpec(name="{a.name}", role="scalar", dtype="{a.dtype}", value="{sizes[a.name]}"),')
        else:  # a scalar keeps its own C type: a float eps stays fp32 whatever the element type
            lines.append(f'        ArgSpec(name="{a.name}", role="scalar", dtype="{a.dtype}", value="1"),'
                         f"  # {TODO}: its value, an expression of the symbols")
    dtypes = ["bf16", "fp16", "fp32"] if element == "T" else [element or "fp32"]
    bytes_moved = " + ".join(f"{count} * {size} * {width}" for (size, width), count in moved.items()) or "0"
    fill = {"@NAME@": name, "@SYMBOLS@": repr(symbols),
            "@ARGS@": "\n".join(lines), "@DTYPES@": repr(dtypes),
            "@SHAPE@": "{" + ", ".join(f'"{s}": 4096' for s in symbols) + "}", "@BYTES@": bytes_moved,
            "@OUTPUTS@": ", ".join(outputs) or "the outputs", "@KERNEL@": kernel,
            "@GRID@": f"ceil_div({' * '.join(symbols)}, 256)"}

    def filled(template: str) -> str:
        # The path the user gave lands in a Python docstring (spec.py) or a C++ comment (the .cu):
        # escaped for each, so a path holding a quote or a newline stays text.
        escape = comment_text if template == "directives.in" else py_text
        text = generated_text(f"new_kernel/{template}").replace("@FROM@", f" from {escape(origin)}" if origin else "")
        for key, value in fill.items():
            text = text.replace(key, value)
        return text

    body = source if extern_c else _ENTRY.sub(lambda m: 'extern "C" ' + m.group(0), source, count=1)
    cu = filled("directives.in") + ("" if extern_c else
                                    '// (`extern "C"` added before __global__, so the entry keeps its name)\n') + body
    return {"spec.py": filled("spec.py.in"), "reference.py": filled("reference.py.in"), "baseline.cu": cu,
            "template.cu": cu}


def new_kernel(name: str, dest: Path, source_file: Path | None) -> Path:
    """Write the folder dest/name; UsageError for a name that is taken or no identifier, or a file
    that cannot be read."""
    from astra_kernels import suite

    # ASCII: Python takes `ядро` as an identifier, but the name is also a C symbol and a file name
    # (the skeleton's `__global__ void NAME`, which then failed with a misleading "no kernel in it").
    if not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name):
        raise UsageError(f"kernel name {name!r} must be an ASCII identifier (a Python identifier of letters a-z "
                         "and A-Z, digits and _, not starting with a digit, and no Python keyword)")
    if name in suite.names():
        raise UsageError(f"kernel {name!r} exists already ({suite.folder_path(name)}); choose another name")
    folder = dest / name
    if folder.exists():
        raise UsageError(f"{folder} exists already; choose another name or --dir")
    if source_file is not None:
        try:
            source = source_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--from {source_file}: cannot read it ({exc})") from None
        files = scaffold(name, source, str(source_file))
    else:
        files = scaffold(name, generated_text("new_kernel/kernel.cu.in").replace("@NAME@", name), "")
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def unfinished(folder: Path) -> list[str]:
    """`file:line: text` of every line still marked ASTRA-TODO in a kernel folder."""
    found = []
    for file in FILES:
        path = folder / file
        if path.is_file():
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if TODO in line:
                    found.append(f"{file}:{number}: {line.strip()}")
    return found
