"""The suite: kernel folders loaded, and turned into concrete problems and evaluation requests.

The shipped folders are data (kernels_sglang/, with the tuned tables and recordings); the code that
reads them is this package: the loader and request builder here, the spec schema (schema.py), the
shipped tables' lookup (tuned_tables.py) and the recordings' (recordings.py). Each folder holds spec.py (a KernelSpec named SPEC), reference.py
(`make_inputs` and the float64 `reference`), baseline.cu and template.cu. This module is the one
place that knows that layout, so it is also where a folder that breaks it is named: a missing
file, a spec.py that does not import or validate, a template that does not parse, each as a
KernelFolderError with the file and, where there is one, the line.

A user's own kernel folders live outside the package, in the directories of ASTRA_KERNELS_PATH
(`--kernels-dir` on the command line prepends to it, so the evaluation workers it starts inherit
it): each folder there with a spec.py is a kernel beside the shipped ones, imported as the package
`astra_user_kernels.<name>` (so its files may import each other relatively). A name defined twice,
a shipped kernel's included, is an error naming both folders, never a silent override; a broken
folder fails alone, when it is loaded.
"""

from __future__ import annotations

import functools
import importlib
import os
import random
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.toolchain.dtypes import C_TYPES, numpy_dtype
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH, DEFAULT_SMS
from astra_kernels.tools.errors import AstraError, UsageError
from astra_kernels.tools.measuring.evaluation import EvaluationRequest, LaunchShape
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.measuring.problem import Case, Param, Problem
from astra_kernels.tools.templating.template import Exclusion, Instance, Template, parse_template

import astra_kernels.kernels_sglang as _shipped

from .schema import KERNEL_DTYPE, KernelSpec

SUITE_DIR = Path(_shipped.__file__).parent  # the shipped kernel folders: data, in kernels_sglang/
COMMON_HEADER = "common.cuh"
KERNELS_PATH = "ASTRA_KERNELS_PATH"  # a user's kernel directories, os.pathsep between them
USER_PACKAGE = "astra_user_kernels"  # what a user's kernel folder is imported as: USER_PACKAGE.<name>


class UnknownKernelError(AstraError):
    """A kernel name that is not a folder of the suite."""


class KernelFolderError(AstraError):
    """A kernel folder that cannot be loaded; the message starts with the file (and line)."""


FILES = ("spec.py", "reference.py", "baseline.cu", "template.cu")


def kernel_dirs() -> list[Path]:
    """The directories of a user's own kernel folders, in ASTRA_KERNELS_PATH's order."""
    dirs = []
    for part in os.environ.get(KERNELS_PATH, "").split(os.pathsep):
        if part.strip():
            path = Path(part.strip()).expanduser().absolute()  # a package path must not move with the cwd
            if not path.is_dir():
                raise UsageError(f"{KERNELS_PATH} (or --kernels-dir) names {part.strip()}, which is not a directory")
            dirs.append(path)
    return dirs


def _locations() -> dict[str, list[Path]]:
    """Each kernel name and every folder that defines it: the shipped suite's, then the user's."""
    found: dict[str, list[Path]] = {}
    for root in [SUITE_DIR, *kernel_dirs()]:
        for spec in sorted(root.glob("*/spec.py")):
            if spec.parent.resolve() not in [p.resolve() for p in found.get(spec.parent.name, [])]:
                found.setdefault(spec.parent.name, []).append(spec.parent)
    return found


def names() -> list[str]:
    return sorted(_locations())


def folder_path(name: str) -> Path:
    """The one folder that defines `name`; a second one anywhere on the path is an error naming both."""
    places = _locations().get(name)
    if not places:
        raise UnknownKernelError(f"unknown kernel {name!r}; the suite has: {', '.join(names())}"
                                 + ("" if kernel_dirs() else f" (a kernel folder of your own: --kernels-dir DIR "
                                                              f"or {KERNELS_PATH})"))
    if not name.isidentifier():  # imported as a package of that name: never a dotted or relative one
        raise KernelFolderError(f"{places[0]}: a kernel folder's name must be a Python identifier (letters, "
                                "digits and _, not starting with a digit); rename the folder and SPEC.name")
    if len(places) > 1:
        shipped = places[0].parent.resolve() == SUITE_DIR.resolve()
        raise KernelFolderError(f"kernel {name!r} is defined by two folders, {places[0]} and {places[1]}: "
                                + ("a shipped kernel is never overridden; give yours another name (its folder "
                                   "and SPEC.name)" if shipped else "give one of them another name"))
    return places[0]


def is_shipped(name: str) -> bool:
    return folder_path(name).parent.resolve() == SUITE_DIR.resolve()


@functools.cache
def headers() -> dict[str, str]:
    """The suite's shared header, served to NVRTC by name so line numbers stay the file's own."""
    return {COMMON_HEADER: (SUITE_DIR / COMMON_HEADER).read_text()}


@dataclass
class KernelFolder:
    name: str
    path: Path
    spec: KernelSpec
    reference: ModuleType
    baseline: Template
    template: Template

    def source_of(self, which: str) -> Template:
        if which not in ("baseline", "template"):
            raise ValueError(f"which must be 'baseline' or 'template', not {which!r}")
        return self.baseline if which == "baseline" else self.template


def template_symbols(spec: KernelSpec) -> set[str]:
    """The names a template of this kernel may use besides its own parameters."""
    variant_names = {name for defines in spec.variants.values() for name in defines}
    return set(spec.symbols) | {"ELEM_BYTES", "SMS", "SM"} | variant_names


@functools.cache
def load(name: str) -> KernelFolder:
    path = folder_path(name)
    spec = getattr(_module(name, "spec"), "SPEC", None)
    if not isinstance(spec, KernelSpec):
        raise KernelFolderError(f"{path / 'spec.py'}: defines no SPEC (a KernelSpec from astra_kernels.suite.schema)")
    if spec.name != name:
        raise KernelFolderError(f"{path / 'spec.py'}: SPEC.name is {spec.name!r}, but the folder is {name!r}")
    reference = _module(name, "reference")
    missing = [f for f in ("make_inputs", "reference") if not callable(getattr(reference, f, None))]
    if missing:
        raise KernelFolderError(f"{path / 'reference.py'}: defines no {' or '.join(missing)}()")
    symbols = template_symbols(spec)
    baseline = parse_template(_text(path / "baseline.cu"), f"{name}/baseline.cu", symbols, path)
    template = parse_template(_text(path / "template.cu"), f"{name}/template.cu", symbols, path)
    if baseline.parameters:
        raise AstraError(f"{name}/baseline.cu declares parameters; a baseline has one fixed configuration")
    # A misspelt name would leave a seed out at every shape, silently. A template without parameters
    # has no space to seed (a folder `astra import-sglang` wrote before it cleared the port's seeds
    # still loads).
    for seed in spec.seeds if template.parameters else []:
        if unknown := sorted(set(seed.config) - set(template.names)):
            raise KernelFolderError(f"{path / 'spec.py'}: seed {seed.note!r} sets {', '.join(unknown)}, "
                                    f"which {name}/template.cu does not declare")
    return KernelFolder(name, path, spec, reference, baseline, template)


def load_peer(name: str) -> ModuleType:
    """The module <name>/peer.py, whose `forward` is the kernel's PyTorch peer (it imports torch,
    so it is loaded only by the jobs that time or check against PyTorch)."""
    return _module(name, "peer")


def _missing(path: Path) -> KernelFolderError:
    return KernelFolderError(f"{path}: missing; a kernel folder holds {', '.join(FILES)}")


def _package(name: str) -> str:
    """The package a kernel folder's files are imported from: the shipped suite's, or for a user's
    folder USER_PACKAGE.<name>, made here with the folder as its path."""
    folder = folder_path(name)
    if folder.parent.resolve() == SUITE_DIR.resolve():
        return f"{_shipped.__name__}.{name}"
    if USER_PACKAGE not in sys.modules:
        root = ModuleType(USER_PACKAGE, "a user's kernel folders (ASTRA_KERNELS_PATH), one subpackage each")
        root.__path__ = []
        sys.modules[USER_PACKAGE] = root
    full = f"{USER_PACKAGE}.{name}"
    current = sys.modules.get(full)
    if current is None or list(getattr(current, "__path__", [])) != [str(folder)]:
        for stale in [m for m in sys.modules if m.startswith(f"{full}.")]:  # another folder of that name
            del sys.modules[stale]
        package = ModuleType(full)
        package.__path__ = [str(folder)]
        package.__package__ = full
        sys.modules[full] = package
    return full


# The modules that left kernels_sglang/ on 2026-11-28, by their old names: a folder written before
# imports them there (`astra new` wrote `from astra_kernels.kernels_sglang.schema import ...`).
MOVED = {f"{_shipped.__name__}.{old}": new for old, new in (
    ("suite", __name__), ("schema", f"{__name__}.schema"), ("recordings", f"{__name__}.recordings"),
    ("tuned_tables", f"{__name__}.tuned_tables"))}


def _moved_import(exc: BaseException) -> str | None:
    """The old name a failed import used, where it is one of MOVED's: `import` / `from X import`
    of a moved module (ModuleNotFoundError naming it), or `from astra_kernels.kernels_sglang import
    schema` (an ImportError of the package naming the module)."""
    if isinstance(exc, ModuleNotFoundError) and exc.name in MOVED:
        return exc.name
    if isinstance(exc, ImportError) and exc.name == _shipped.__name__:
        return next((old for old in MOVED if f"cannot import name '{old.rsplit('.', 1)[1]}'" in str(exc)), None)
    return None


def _module(name: str, module: str) -> ModuleType:
    """A kernel folder's Python file, imported; whatever stops it names the file and line."""
    path = folder_path(name) / f"{module}.py"
    if not path.is_file():
        raise _missing(path)
    try:
        return importlib.import_module(f"{_package(name)}.{module}")
    except SyntaxError as exc:
        raise KernelFolderError(f"{exc.filename or path}:{exc.lineno}: {exc.msg}") from exc
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM, the CLI's Terminated) while it loads: the user's, not the file's
        raise
    except BaseException as exc:  # an import, a name or a spec that fails validation, raised as the file runs;
        # and sys.exit() or any other BaseException in the file: a folder that ends the process
        # would end `astra kernels` and `astra tune` with exit 0 and no output.
        here = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
                if Path(f.filename).resolve() == path.resolve()]
        line = f":{here[-1]}" if here else ""
        if old := _moved_import(exc):
            raise KernelFolderError(f"{path}{line}: imports {old}, which moved to {MOVED[old]} on 2026-11-28 "
                                    f"(the shipped folders are data; the code that reads them is {__name__}): "
                                    "change the import") from exc
        raise KernelFolderError(f"{path}{line}: {type(exc).__name__}: {exc}") from exc


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise _missing(path) from None
    except UnicodeDecodeError as exc:
        raise KernelFolderError(f"{path}: not UTF-8 text ({exc})") from exc


def compute_capability(arch: str | None) -> int:
    """`sm_90a` -> 90; the default when no arch is named. Only what CUDA names a GPU (sm_, then
    a major version of 1 to 19 and a minor digit, then an optional a or f suffix): `sm_1000` and
    `sm_٩٠` were once read as compute capabilities 1000 and 90 and exported for."""
    if not arch:
        arch = DEFAULT_ARCH
    match = _ARCH.fullmatch(arch)
    if not match:
        raise UsageError(f"{arch!r} is not a CUDA architecture like sm_80, sm_90, sm_90a or sm_100")
    return int(match.group(1))


_ARCH = re.compile(r"sm_((?:1[0-9]|[1-9])[0-9])[af]?", re.ASCII)


def environment(spec: KernelSpec, shape: dict[str, int], dtype: str, variant: str,
                sms: int = DEFAULT_SMS, arch: str | None = None) -> dict[str, int]:
    spec.check_dtype(dtype)
    spec.check_variant(variant)
    return {**shape, "ELEM_BYTES": numpy_dtype(dtype).itemsize, "SMS": sms, "SM": compute_capability(arch),
            **spec.variants[variant]}


def make_case(kernel: str, shape_items: tuple, dtype: str, variant: str, seed: int) -> Case:
    """Draw inputs and compute the reference; runs inside the evaluation worker."""
    folder = load(kernel)
    shape = dict(shape_items)
    rng = np.random.default_rng(seed)
    inputs = folder.reference.make_inputs(rng, shape, dtype, variant)
    expected = folder.reference.reference(inputs, shape, dtype, variant)
    return Case(inputs=inputs, expected=expected)


@functools.lru_cache(maxsize=1024)
def parsed(text: str) -> Expression:
    """A spec's expression (a buffer's size, the bytes moved), parsed once: a problem is built for
    every request, and a replay asks one of every configuration of a space at every shape."""
    return Expression(text)


def problem(folder: KernelFolder, shape: dict[str, int], dtype: str, variant: str = "default") -> Problem:
    spec = folder.spec
    env = environment(spec, shape, dtype, variant)
    params = []
    for arg in spec.args:
        arg_dtype = dtype if arg.dtype == KERNEL_DTYPE else arg.dtype
        if arg.role == "scalar":
            value = parsed(arg.value)(env)
            params.append(Param(arg.name, "scalar", arg_dtype, value=value))
        else:
            dims = tuple(int(parsed(d)(env)) for d in arg.shape)
            params.append(Param(arg.name, arg.role, arg_dtype, dims))
    return Problem(
        params=params,
        make_case=functools.partial(make_case, spec.name, tuple(shape.items()), dtype, variant),
        bytes_moved=int(parsed(spec.bytes_moved)(env)),
        bytes_written=int(parsed(spec.bytes_written)(env)) if spec.bytes_written else None,
        tolerances=spec.tolerances,
        label=f"{spec.name} {spec.label(shape)} {dtype}" + ("" if variant == "default" else f" {variant}"),
    )


def base_options(dtype: str, variant_defines: dict[str, int], arch: str | None = None) -> CompileOptions:
    """What every binary of a kernel in `dtype` and a variant shares, before a configuration."""
    defines = {"DTYPE": C_TYPES[dtype], "ELEM_BYTES": numpy_dtype(dtype).itemsize,
               **variant_defines}
    return CompileOptions(arch=arch, headers=headers(), defines=defines)


def compile_options(instance: Instance, dtype: str, variant_defines: dict[str, int],
                    arch: str | None = None) -> CompileOptions:
    return instance.compile_options(base_options(dtype, variant_defines, arch))


def request(folder: KernelFolder, which: str, shape: dict[str, int], dtype: str,
            variant: str = "default", config: dict[str, int] | None = None, *,
            sms: int = DEFAULT_SMS, arch: str | None = None,
            source: Template | None = None, **measuring) -> EvaluationRequest | Exclusion:
    """The evaluation request for one configuration at one shape, or why it cannot run there.
    `source` stands in for the folder's own `which` (a dispatch table's named source, a candidate).
    `measuring` holds the request's measuring choices (l2, check, time, stream_timing, input_layout,
    pdl: EvaluationRequest's fields), given here by whoever decides them, so no caller edits a
    request after it is built; an unknown one is a TypeError where the shape runs."""
    template = source or folder.source_of(which)
    env = environment(folder.spec, shape, dtype, variant, sms, arch)
    instance = template.instantiate(template.default if config is None else config, env)
    if isinstance(instance, Exclusion):
        return instance
    prob = problem(folder, shape, dtype, variant)
    name = " ".join([which, ",".join(f"{k}={v}" for k, v in instance.config.items())]).strip()
    return EvaluationRequest(
        source=template.code, kernel=template.kernel, problem=prob,
        options=compile_options(instance, dtype, folder.spec.variants[variant], arch),
        launch=LaunchShape(instance.grid, instance.block, instance.shared_bytes),
        label=f"{prob.label} {name}", **measuring,
    )


def check_run(folder: KernelFolder, shapes: list[dict[str, int]], dtype: str, variant: str = "default") -> None:
    """UsageError unless the kernel runs in `dtype` and `variant` at every shape: a shape its own
    baseline excludes (1x100 for a kernel defined on groups of 128) is not a shape of the kernel,
    and saying so before a run beats a run that measures nothing."""
    folder.spec.check_dtype(dtype)
    folder.spec.check_variant(variant)
    for shape in shapes:
        excluded = request(folder, "baseline", shape, dtype, variant)
        if isinstance(excluded, Exclusion):
            raise UsageError(f"{folder.name} does not run at {folder.spec.label(shape)}: {excluded.reason}")


@dataclass(frozen=True)
class CompileTarget:
    """One distinct binary of a kernel: what CI compiles, and what the tuner prunes on."""

    which: str
    dtype: str
    variant: str
    config: tuple
    options: CompileOptions


def compile_targets(folder: KernelFolder, which: str, arch: str, *, sample: int = 200,
                    seed: int = 0, per_config: int | None = None) -> tuple[list[CompileTarget], list[Exclusion]]:
    """Every distinct binary of the baseline, or of a seeded sample of `sample` template
    configurations that run at some shape of the spec (the whole space when it is smaller).

    A binary depends on the parameters, the dtype, the variant and any value a `derive` line
    computes from the shape, so each configuration is instantiated at every shape and each
    distinct set of defines compiles once. Configurations take the (dtype, variant) pairs in
    turn, so a sample covers all of them. Configurations excluded at every shape are returned as
    exclusions with their reasons and do not count toward the sample. `per_config` keeps at most
    that many binaries of each configuration, spread over its shapes (the first and last and
    evenly between): topk_softmax derives from E and k, so its 200 configurations are 1743 binaries,
    five minutes of CI's compiles for no configuration more.
    """
    template = folder.source_of(which)
    spec = folder.spec
    combos = [(d, v) for d in spec.dtypes for v in spec.variants]
    if template.parameters:
        order = template.sample_configs(template.size(), seed)
        random.Random(seed).shuffle(order)
        jobs = ((c, *combos[i % len(combos)]) for i, c in enumerate(order))
        wanted = sample
    else:
        jobs = (({}, d, v) for d, v in combos)
        wanted = len(combos)
    targets: dict[tuple, CompileTarget] = {}
    exclusions: list[Exclusion] = []
    accepted = 0
    for config, dtype, variant in jobs:
        if accepted >= wanted:
            break
        first_exclusion, own = None, {}
        for shape in spec.all_shapes():
            instance = template.instantiate(config, environment(spec, shape, dtype, variant, arch=arch))
            if isinstance(instance, Exclusion):
                first_exclusion = first_exclusion or instance
                continue
            options = compile_options(instance, dtype, spec.variants[variant], arch)
            key = (dtype, variant, tuple(sorted(options.defines.items())), options.fast_math, options.max_registers)
            own.setdefault(key, CompileTarget(which, dtype, variant, tuple(sorted(config.items())), options))
        if own:
            accepted += 1
            keys = list(own)
            if per_config and len(keys) > per_config:
                keys = [keys[round(i * (len(keys) - 1) / max(per_config - 1, 1))] for i in range(per_config)]
            for key in keys:
                targets.setdefault(key, own[key])
        else:
            exclusions.append(first_exclusion)
    return list(targets.values()), exclusions
