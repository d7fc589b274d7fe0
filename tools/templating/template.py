"""The project's kernel template format: parameters, constraints and launch geometry in a .cu file.

A template is CUDA C++ plus `//@` directive lines (kernels_sglang/FORMAT.md is the reference for
people and for the chat model that writes templates). Parameters become -D defines; constraints
prune the space and exclude configurations for a shape, each with a stated reason; launch
geometry is a set of expressions of the parameters and the shape. Parsing checks everything it
can before any compile: unknown names, empty value lists, duplicate or malformed directives, each
error naming the line.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import random
import re
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from astra_kernels.tools.toolchain.nvrtc import CompileOptions
from astra_kernels.tools.errors import AstraError
from .expressions import Expression, ExpressionError

DIRECTIVE = "//@"


class TemplateError(AstraError):
    """A malformed template; the message starts with the file and line."""


@dataclass(frozen=True)
class Parameter:
    name: str
    values: tuple[int, ...]
    description: str = ""
    line: int = 0


@dataclass(frozen=True)
class Constraint:
    expression: Expression
    reason: str
    line: int

    def holds(self, env: Mapping) -> bool:
        return bool(self.expression(env))


@dataclass(frozen=True)
class Derived:
    name: str
    expression: Expression
    line: int


@dataclass(frozen=True)
class Build:
    """How a source is built, where it says so (`compiler`, `std`, `include`, `flag`): the same for
    every configuration. The defaults are the suite's (NVRTC, C++17, no folders, no flags); a kernel
    taken as another project ships it sets what that project builds it with."""

    compiler: str = "nvrtc"
    std: str | None = None
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    def options(self, base: CompileOptions) -> dict:
        return {"compiler": self.compiler, "std": self.std or base.std,
                "include_dirs": [*base.include_dirs, *self.include_dirs], "extra": [*base.extra, *self.flags]}


@dataclass(frozen=True)
class Instance:
    """One configuration made concrete for one shape: what to compile and how to launch."""

    config: dict[str, int]
    defines: dict[str, int]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int
    fast_math: bool
    max_registers: int | None
    build: Build = field(default_factory=lambda: Build())
    work: int | None = None  # the template's `work:` at this configuration and shape (None: it declares none)

    def compile_options(self, base: CompileOptions) -> CompileOptions:
        """`base` (arch, headers, the dtype's and variant's defines) with this instance's own."""
        return base.model_copy(update={
            "defines": {**base.defines, **self.defines},
            "fast_math": self.fast_math,
            "max_registers": self.max_registers,
            **self.build.options(base),
        })


@dataclass(frozen=True)
class Exclusion:
    """A configuration a constraint rules out for a shape, and why."""

    config: dict[str, int]
    reason: str
    line: int


@dataclass
class Template:
    """A parsed template (or a baseline: a template with no parameters)."""

    source: str
    path: str
    kernel: str
    parameters: list[Parameter] = field(default_factory=list)
    derived: list[Derived] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    grid: tuple[Expression, ...] = ()
    block: tuple[Expression, ...] = ()
    shared: Expression | None = None
    fast_math: Expression | None = None
    max_registers: Expression | None = None
    # The serial work of one thread (`//@ work:`): evaluated with the geometry (an expression that
    # fails fails there as grid's would), read only by the dispatch at a width no table was tuned
    # at (runtime/dispatch.py); not compiled, not keyed (`code`)
    work: Expression | None = None
    default: dict[str, int] = field(default_factory=dict)
    build: Build = field(default_factory=Build)
    lines: dict[str, int] = field(default_factory=dict)  # each keyed directive's line, for errors
    # instantiate_all's verdicts, by the configurations and the environment's values the derived
    # values and constraints read; never compared, printed or pickled
    _verdicts: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_verdicts": {}}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @functools.cached_property
    def code(self) -> str:
        """What is compiled and what a measurement is keyed by: the source with its `work:` line
        blank. The work a thread does is a hint to the dispatch, not part of the kernel: a template
        that gains one keeps every measurement recorded of it (the results' keys hash the code) and
        every line number a compile error names."""
        if "work" not in self.lines:
            return self.source
        lines = self.source.splitlines(keepends=True)  # numbered as parse_template numbers them
        line = lines[self.lines["work"] - 1]
        lines[self.lines["work"] - 1] = line[len(line.splitlines()[0]):]  # its line break only
        return "".join(lines)

    def launch_parameters(self) -> set[str]:
        """The parameters the launch geometry (grid, block, shared memory) reads, directly or through
        derived values: the ones a configuration cannot move without launching other CTAs."""
        read = set().union(*(e.names for e in (*self.grid, *self.block, self.shared) if e is not None))
        for item in reversed(self.derived):  # a derived value reads only names defined before it
            if item.name in read:
                read |= item.expression.names
        return read & set(self.names)

    def screened_names(self) -> tuple[str, ...]:
        """The environment's names the derived values and constraints read (not the parameters,
        not the derived values themselves): what decides whether a configuration is excluded."""
        own = {*self.names, *(d.name for d in self.derived)}
        read = set().union(*(d.expression.names for d in self.derived), *(c.expression.names for c in self.constraints))
        return tuple(sorted(read - own))

    def point(self, config: Mapping[str, int]) -> dict[str, int] | None:
        """`config` as a point of this space: a parameter it leaves out at the default, a name the
        template does not have dropped; None where a value is not one the template offers. How a
        configuration from elsewhere (an older table's pick, a spec's seed) reads in this template."""
        point = {p.name: config.get(p.name, self.default[p.name]) for p in self.parameters}
        return point if all(point[p.name] in p.values for p in self.parameters) else None

    def filled(self, config: Mapping[str, int]) -> dict[str, int]:
        """`config` with each parameter it lacks at the template's default, the rest as given: a
        configuration recorded before the template gained a parameter (whose default is the code
        that ran, as fused_add_rmsnorm's RELOAD 0) reads as the same kernel today. Unlike point(), a
        name the template does not have is kept, so a misspelt one still fails where it is used."""
        if all(p.name in config for p in self.parameters):
            return dict(config)
        return {**{p.name: config.get(p.name, self.default[p.name]) for p in self.parameters}, **config}

    def size(self) -> int:
        n = 1
        for p in self.parameters:
            n *= len(p.values)
        return n

    def all_configs(self) -> Iterator[dict[str, int]]:
        """Every point of the unconstrained space, in declaration order."""
        for values in itertools.product(*(p.values for p in self.parameters)):
            yield dict(zip(self.names, values))

    def sample_configs(self, count: int, seed: int = 0) -> list[dict[str, int]]:
        """The whole space when it has at most `count` points, else a seeded sample of `count`."""
        total = self.size()
        if total <= count:
            return list(self.all_configs())
        rng = random.Random(seed)
        picks = sorted(rng.sample(range(total), count))
        sizes = [len(p.values) for p in self.parameters]
        configs = []
        for index in picks:
            config = {}
            for param, size in zip(reversed(self.parameters), reversed(sizes)):
                index, position = divmod(index, size)
                config[param.name] = param.values[position]
            configs.append({name: config[name] for name in self.names})
        return configs

    def instantiate(self, config: Mapping[str, int], env: Mapping[str, int | float]) -> Instance | Exclusion:
        """Apply the constraints and geometry to one configuration in one environment.

        `env` holds the shape symbols, dtype facts, device facts and variant defines; the result
        is an Instance, or the first constraint that fails.
        """
        self._check_names([config])
        screened = self._screen(config, env)
        return self._excluded(config, screened) if isinstance(screened, int) else self._concrete(config, *screened)

    def _excluded(self, config: Mapping[str, int], failed: int) -> Exclusion:
        constraint = self.constraints[failed]
        return Exclusion(dict(config), constraint.reason or constraint.expression.text, constraint.line)

    def _check_names(self, configs: list[Mapping[str, int]]) -> None:
        """Each configuration sets every parameter and nothing else (TemplateError naming it)."""
        names = set(self.names)
        for config in configs:
            if config.keys() != names:
                unknown, missing = set(config) - names, names - set(config)
                raise TemplateError(
                    f"{self.path}: configuration {dict(config)} "
                    + (f"sets unknown parameter(s) {sorted(unknown)} " if unknown else "")
                    + (f"lacks {sorted(missing)}" if missing else "")
                )

    def _screen(self, config: Mapping[str, int], env: Mapping[str, int | float]
                ) -> int | tuple[dict[str, int | float], dict[str, int]]:
        """The derived values and the constraints: the index of the first constraint that fails,
        else the scope and the derived values."""
        scope: dict[str, int | float] = {**env, **config}
        derived: dict[str, int] = {}
        for item in self.derived:
            value = self._eval(item.expression, scope, item.line)
            scope[item.name] = derived[item.name] = value
        for index, constraint in enumerate(self.constraints):
            if not self._eval(constraint.expression, scope, constraint.line):
                return index
        return scope, derived

    def _concrete(self, config: Mapping[str, int], scope: dict[str, int | float], derived: dict[str, int]
                  ) -> Instance | Exclusion:
        """The geometry and the build of a configuration that passed the constraints."""
        grid = tuple(self._eval(e, scope, self.lines.get("grid", 0), int) for e in self.grid)
        block = tuple(self._eval(e, scope, self.lines.get("block", 0), int) for e in self.block)
        for what, dims in (("grid", grid), ("block", block)):
            if any(d < 1 for d in dims):
                return Exclusion(dict(config), f"{what} {dims} has an empty dimension", 0)
        return Instance(
            config=dict(config),
            defines={**{k: int(v) for k, v in config.items()}, **{k: _define(v) for k, v in derived.items()}},
            grid=grid, block=block,
            shared_bytes=self._eval(self.shared, scope, self.lines.get("shared", 0), int) if self.shared else 0,
            fast_math=(self._eval(self.fast_math, scope, self.lines.get("fast_math", 0), bool)
                       if self.fast_math else False),
            max_registers=(self._eval(self.max_registers, scope, self.lines.get("max_registers", 0), int)
                           if self.max_registers else None),
            build=self.build,
            work=self._eval(self.work, scope, self.lines.get("work", 0), int) if self.work else None,
        )

    def instantiate_all(self, configs: list[Mapping[str, int]], env: Mapping[str, int | float]
                        ) -> list[Instance | Exclusion]:
        """instantiate() of each configuration in one environment, the same results, at a fraction
        of the cost across the shapes of a tune: which configurations the constraints exclude
        depends only on the environment's values they (and the derived values) read
        (screened_names), and a token sweep changes none of them for most kernels (rmsnorm's read
        the row length, not the token count), so the verdicts are kept per those values and
        configurations; only the configurations that pass are made concrete at each shape. A
        whole space at every shape of a sweep was the driver's bound: 55,296 rmsnorm configurations
        at each of its 74 shapes, 3.8 million instantiations a kernel (docs/scaling.md, run J)."""
        configs = list(configs)
        # the configurations by a digest, not kept whole (rmsnorm's space is 35 MB as tuples); each
        # verdict the index of the constraint that excludes it, -1 where none does
        digest = hashlib.blake2b(repr([tuple(c.items()) for c in configs]).encode(), digest_size=16).digest()
        key = (tuple(env.get(n) for n in self.screened_names()), digest)
        verdicts = self._verdicts.get(key)
        if verdicts is None:
            self._check_names(configs)
            screened = [self._screen(config, env) for config in configs]
            verdicts = array("i", (v if isinstance(v, int) else -1 for v in screened))
            while len(self._verdicts) >= VERDICTS_KEPT:  # the oldest environment's go first
                self._verdicts.pop(next(iter(self._verdicts), None), None)  # another thread's pop is no error
            self._verdicts[key] = verdicts
            return [self._excluded(config, v) if isinstance(v, int) else self._concrete(config, *v)
                    for config, v in zip(configs, screened)]
        return [self._excluded(config, failed) if failed >= 0 else self.instantiate(config, env)
                for config, failed in zip(configs, verdicts)]

    def _eval(self, expression: Expression, scope, line: int, cast=None):
        try:
            value = expression(scope)
            return value if cast is None else cast(value)
        except ExpressionError as exc:
            raise TemplateError(f"{self.path}:{line}: {exc}") from None
        except (ArithmeticError, ValueError, TypeError) as exc:  # an infinite or complex size
            raise TemplateError(f"{self.path}:{line}: {expression.text!r}: {type(exc).__name__}: {exc}") from None


VERDICTS_KEPT = 32  # environments' verdicts a template keeps (a sweep's widths, several dtypes)


def _define(value) -> int:
    return int(value) if isinstance(value, bool) or float(value).is_integer() else value


_PARAM = re.compile(r"^param\s+([A-Za-z_]\w*)\s*:\s*(.*?)\s*$")
_DERIVE = re.compile(r"^derive\s+([A-Za-z_]\w*)\s*=\s*(.+?)\s*$")
_REQUIRE = re.compile(r"^require\s+(.+?)\s*$")
_KEYED = re.compile(r"^(kernel|grid|block|shared|fast_math|max_registers|work|default|compiler|std)\s*:\s*(.*?)\s*$")
_LISTED = re.compile(r"^(include|flag)\s*:\s*(.*?)\s*$")  # may be given more than once
_COMPILERS = ("nvrtc", "nvcc")
_STD = re.compile(r"^c\+\+(11|14|17|20)$")
# The flags a template may add: switches of the code generated, never a path, a host compiler or a
# program to run (a template can be a model's text, and these reach nvcc's command line).
_FLAG = re.compile(r"^(--expt-relaxed-constexpr|--expt-extended-lambda|--extra-device-vectorization|--use_fast_math"
                   r"|--(ftz|prec-div|prec-sqrt|fmad)=(true|false)|-D[A-Za-z_]\w*(=[\w.+-]*)?|-U[A-Za-z_]\w*|-O[0-3])$")
_NUMBER = re.compile(r"^-?\d+$")
# How each directive is written, for the error on a line that starts with its word but does not parse.
_USAGE = {
    "param": "param NAME: V1, V2, ... -- what it does", "derive": "derive NAME = EXPRESSION",
    "require": "require EXPRESSION -- why", "kernel": "kernel: NAME", "grid": "grid: X[, Y[, Z]]",
    "block": "block: X[, Y[, Z]]", "shared": "shared: BYTES", "fast_math": "fast_math: 0 or 1",
    "max_registers": "max_registers: N", "work": "work: EXPRESSION -- what a thread does in sequence",
    "default": "default: NAME=V NAME=V ...",
    "compiler": "compiler: nvrtc or nvcc", "std": "std: c++11, c++14, c++17 or c++20", "include": "include: FOLDER",
    "flag": "flag: --FLAG",
}


def _split_comment(text: str) -> tuple[str, str]:
    """`body -- why` -> (body, why): the reason shown when a constraint excludes a configuration."""
    body, _, note = text.partition("--")
    return body.strip(), note.strip()


def parse_template(source: str, path: str = "template.cu", symbols: set[str] | frozenset = frozenset(),
                   folder: Path | None = None) -> Template:
    """Parse the directives of `source`. `symbols` are the names the environment will provide
    (shape symbols, dtype and device facts, variant defines); any other name is an error now.
    `folder` is the kernel folder the file lies in, which `//@ include:` folders are relative to.
    Without one (a candidate: a model's text), the build directives (compiler, std, include, flag)
    are refused: only a kernel folder's own files choose how they are built."""
    template = Template(source=source, path=path, kernel="")
    seen: dict[str, int] = {}
    keyed_lines: dict[str, int] = {}
    build: dict = {"include_dirs": [], "flags": []}
    for number, raw in enumerate(source.splitlines(), 1):
        stripped = raw.strip()
        if not stripped.startswith(DIRECTIVE):
            continue
        text = stripped[len(DIRECTIVE):].strip()
        where = f"{path}:{number}"
        try:
            if m := _PARAM.match(text):
                name = m.group(1)
                body, note = _split_comment(m.group(2))
                values = [v.strip() for v in body.split(",") if v.strip()]
                if not values:
                    raise TemplateError(f"{where}: parameter {name} has no values")
                bad = [v for v in values if not _NUMBER.match(v)]
                if bad:
                    raise TemplateError(f"{where}: parameter {name} values must be integers, got {bad}")
                if len(set(values)) != len(values):
                    raise TemplateError(f"{where}: parameter {name} repeats a value")
                _claim(seen, name, number, where)
                template.parameters.append(Parameter(name, tuple(int(v) for v in values), note, number))
            elif m := _DERIVE.match(text):
                body, _ = _split_comment(m.group(2))
                _claim(seen, m.group(1), number, where)
                template.derived.append(Derived(m.group(1), Expression(body), number))
            elif m := _REQUIRE.match(text):
                body, note = _split_comment(m.group(1))
                if not body:
                    raise TemplateError(f"{where}: empty constraint")
                template.constraints.append(Constraint(Expression(body), note, number))
            elif m := _KEYED.match(text):
                key, value = m.group(1), _split_comment(m.group(2))[0]
                if key in keyed_lines:
                    raise TemplateError(f"{where}: {key} is already given on line {keyed_lines[key]}")
                keyed_lines[key] = number
                if not value:
                    raise TemplateError(f"{where}: {key} needs a value")
                if key == "kernel":
                    if not re.fullmatch(r"[A-Za-z_]\w*", value):
                        raise TemplateError(f"{where}: {value!r} is not a kernel name")
                    template.kernel = value
                elif key in ("grid", "block"):
                    dims = tuple(Expression(part) for part in _split_top_level(value))
                    if not 1 <= len(dims) <= 3:
                        raise TemplateError(f"{where}: {key} takes 1 to 3 expressions")
                    setattr(template, key, dims)
                elif key == "default":
                    template.default = _parse_assignments(value, where)
                elif key in ("compiler", "std") and folder is None:
                    raise TemplateError(f"{where}: {key} is for a kernel folder's own baseline.cu and template.cu")
                elif key == "compiler":
                    if value not in _COMPILERS:
                        raise TemplateError(f"{where}: compiler must be nvrtc or nvcc, got {value!r}")
                    build["compiler"] = value
                elif key == "std":
                    if not _STD.match(value):
                        raise TemplateError(f"{where}: std must be c++11, c++14, c++17 or c++20, got {value!r}")
                    build["std"] = value
                else:
                    setattr(template, "shared" if key == "shared" else key, Expression(value))
            elif m := _LISTED.match(text):
                # a flag starts with -- itself: only ` -- ` (spaced) starts a note here
                key, value = m.group(1), m.group(2).partition(" -- ")[0].strip()
                if key == "include":
                    build["include_dirs"].append(_include_dir(value, folder, where))
                elif folder is None:
                    raise TemplateError(f"{where}: flag is for a kernel folder's own baseline.cu and template.cu")
                elif not _FLAG.match(value):
                    raise TemplateError(f"{where}: {value!r} is not a flag a template may add (one per line: -DNAME[=V], "
                                        "-UNAME, -O0..3, --use_fast_math, --expt-relaxed-constexpr, "
                                        "--expt-extended-lambda, --extra-device-vectorization, --ftz/--prec-div/"
                                        "--prec-sqrt/--fmad=true|false)")
                else:
                    build["flags"].append(value)
            elif (word := re.match(r"[A-Za-z_]*", text).group()) in _USAGE:
                raise TemplateError(f"{where}: malformed {word} directive; write it as `//@ {_USAGE[word]}`")
            else:
                raise TemplateError(
                    f"{where}: unknown directive {text.split()[0] if text else '(empty)'!r}; expected "
                    "param, derive, require, kernel, grid, block, shared, fast_math, max_registers, work, default, "
                    "compiler, std, include or flag"
                )
        except ExpressionError as exc:
            raise TemplateError(f"{where}: {exc}") from None
    template.lines = keyed_lines
    template.build = Build(compiler=build.get("compiler", "nvrtc"), std=build.get("std"),
                           include_dirs=tuple(build["include_dirs"]), flags=tuple(build["flags"]))
    _check_complete(template, set(symbols), keyed_lines)
    return template


def _include_dir(value: str, base: Path | None, where: str) -> str:
    """An `//@ include:` folder, relative to the template's own kernel folder, made absolute (the
    compile runs elsewhere). Only a kernel folder's own files may include (a candidate's text, a
    model's, has no folder), and only from beside it: the folder itself or its kernels directory,
    never elsewhere on the machine. One that is not there is an error now, not a missing header later."""
    if base is None:
        raise TemplateError(f"{where}: include is for a kernel folder's own baseline.cu and template.cu")
    folder, allowed = (base / value).resolve(), base.resolve().parent
    if not folder.is_relative_to(allowed):
        raise TemplateError(f"{where}: include folder {value!r} is outside {allowed}, the directory of kernel folders")
    if not folder.is_dir():
        raise TemplateError(f"{where}: include folder {value!r} is not a folder (it is taken relative to "
                            f"{base.resolve()})")
    return str(folder)


def _claim(seen: dict[str, int], name: str, number: int, where: str) -> None:
    if name in seen:
        raise TemplateError(f"{where}: {name} is already defined on line {seen[name]}")
    seen[name] = number


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: `ceil_div(T, R), 1` -> two expressions."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _parse_assignments(text: str, where: str) -> dict[str, int]:
    result = {}
    for item in text.replace(",", " ").split():
        name, sep, value = item.partition("=")
        if not sep or not _NUMBER.match(value):
            raise TemplateError(f"{where}: default expects NAME=INTEGER pairs, got {item!r}")
        result[name] = int(value)
    return result


def _check_complete(template: Template, symbols: set[str], keyed_lines: dict[str, int]) -> None:
    path = template.path
    for key in ("kernel", "grid", "block"):
        if key not in keyed_lines:
            raise TemplateError(f"{path}: missing the `//@ {key}:` directive")
    for item in [*template.parameters, *template.derived]:  # instantiate's scope would let it replace the name
        if item.name in symbols:
            kind = "parameter" if isinstance(item, Parameter) else "derived value"
            raise TemplateError(f"{path}:{item.line}: {kind} {item.name} has the name of a value the kernel's "
                                f"spec gives (its shape symbol, dtype, device or variant value {item.name}), which "
                                "it would replace at every shape: rename it")
    known = set(symbols) | set(template.names)
    for item in template.derived:
        _check_names(path, item.line, item.expression, known)
        known.add(item.name)
    for constraint in template.constraints:
        _check_names(path, constraint.line, constraint.expression, known)
    for key in ("grid", "block"):
        for expression in getattr(template, key):
            _check_names(path, keyed_lines[key], expression, known)
    for key in ("shared", "fast_math", "max_registers", "work"):
        expression = getattr(template, key)
        if expression is not None:
            _check_names(path, keyed_lines[key], expression, known)
    if template.default:
        line = keyed_lines["default"]
        for name, value in template.default.items():
            param = next((p for p in template.parameters if p.name == name), None)
            if param is None:
                raise TemplateError(f"{path}:{line}: default sets {name}, which is not a parameter")
            if value not in param.values:
                raise TemplateError(f"{path}:{line}: default {name}={value} is not among {list(param.values)}")
        missing = set(template.names) - set(template.default)
        if missing:
            raise TemplateError(f"{path}:{line}: default lacks {sorted(missing)}")
    else:
        template.default = {p.name: p.values[0] for p in template.parameters}


def _check_names(path: str, line: int, expression: Expression, known: set[str]) -> None:
    unknown = expression.names - known
    if unknown:
        raise TemplateError(
            f"{path}:{line}: {expression.text!r} uses undefined name(s) {', '.join(sorted(unknown))}; "
            f"defined here: {', '.join(sorted(known))}"
        )
