"""`astra export`: a dispatch table turned into one standalone CUDA file, a Python callable and a guide.

A tuned kernel is only useful where it is served. The output folder of `astra tune` needs this
package at run time (the launcher compiles the template per configuration); an exported kernel
does not: `<kernel>.cu` holds every binary the table can launch (each configuration compiled from
the template text with its defines, the baseline where the table keeps it), the shared header
inlined, and a host function that picks and launches exactly as dispatch.py and launcher.py do,
its expressions translated from the template's (tools/templating/expressions_cpp.py), so `nvcc` alone builds
it into any program. Beside it: `<kernel>_launch.py` (the file as a Python callable on framework
tensors, exported.py), `README.md` (how to swap it into SGLang) and `export.json` (what the file
holds, read by the callable).

A configuration's binary depends on the shape where a `derive` line computes a define from it
(merge_attn_states' vectors per row, the baselines' vector width), so the file holds each
configuration at the defines of a set of covered shapes: the table's, the spec's sets and any
given with --shapes. A shape whose pick needs defines the file lacks gets a clear error from the
C++ launcher naming the shape (the Python callable compiles that one binary on demand instead).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from astra_kernels import __version__
from astra_kernels.tools.toolchain.dtypes import C_TYPES, numpy_dtype
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH, STATIC_SHARED_LIMIT
from astra_kernels.tools.errors import AstraError, UsageError
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.templating.expressions_cpp import HELPERS, TranslationError, to_cpp
from astra_kernels.tools.templating.template import Build, Exclusion, Template

from astra_kernels import suite
from astra_kernels.suite import tuned_tables
from astra_kernels.suite.schema import INT32_MAX
from astra_kernels.runtime.dispatch import DispatchTable
from . import guide
from astra_kernels.jobs.generated_files import comment_line, comment_text, define_line, fill
from astra_kernels.runtime.export_format import (
    FORMAT_VERSION, MANIFEST, Binary, ExportError, Group, binary_key, c_signature, caller_scalars, launch_signature, shape_args,
    torch_op_file,
)
from . import torch_op




@dataclass(frozen=True)
class TableSource:
    """A dispatch table and where it came from (for the file's header)."""

    table: DispatchTable
    path: Path
    device: str
    tuned_date: str

    @property
    def shown(self) -> str:
        """The path as a reader can find it: shipped tables relative to the package."""
        try:
            return f"kernels_sglang/{self.path.resolve().relative_to(suite.SUITE_DIR.resolve())} (shipped with astra-kernels)"
        except ValueError:
            return str(self.path)


def object_builds(kernel: str, groups: list[Group], arch: str) -> list[tuple[list[str], str]]:
    """nvcc's arguments for each object of the exported `<kernel>.cu`, one per flag group, and the
    object's name: the commands the file's header gives (a single group needs no ASTRA_GROUP).
    Every object is position-independent, so the same objects make a static or a shared library."""
    builds = []
    for g, group in enumerate(groups):
        select = [f"-DASTRA_GROUP={g}"] if len(groups) > 1 else []
        name = f"{kernel}_g{g}.o" if len(groups) > 1 else f"{kernel}.o"
        builds.append(([f"-arch={arch}", "-std=c++17", *group.nvcc_flags(), *select, "-Xcompiler", "-fPIC",
                        "-c", f"{kernel}.cu", "-o", name], name))
    return builds


# --- the source table -------------------------------------------------------------------------


def resolve_source(source: str | Path | None, gpu_kind: str | None = None,
                   kernel: str | None = None, l2: str | None = None) -> TableSource:
    """The table to export: `astra tune`'s output folder, a dispatch JSON file, or the table
    shipped for `gpu_kind` and `kernel` tuned in L2 regime `l2` (default cold). With a SOURCE,
    `l2` is a check on the regime its table was tuned in."""
    if l2 is not None and l2 not in tuned_tables.REGIMES:
        raise ExportError(f"unknown L2 regime {l2!r}: {' or '.join(tuned_tables.REGIMES)}")
    if source is None:
        if not gpu_kind or not kernel:
            raise ExportError("give a tuning output folder (or a dispatch .json), or --gpu-kind with --kernel "
                              f"for a shipped table (kinds: {', '.join(tuned_tables.gpu_kinds())})")
        suite.load(kernel)  # an unknown kernel names the suite
        kind, regime = gpu_kind.lower(), l2 or "cold"
        if kind not in tuned_tables.gpu_kinds():
            raise ExportError(f"no tables are shipped for GPU kind {gpu_kind!r}; shipped: {', '.join(tuned_tables.gpu_kinds())}")
        path = tuned_tables.table_path(kernel, kind, regime)
        if not path.is_file():
            have = tuned_tables.shipped_kernels(kind, regime)
            elsewhere = [r for r in tuned_tables.preferred_regimes(regime)[1:] if tuned_tables.table_path(kernel, kind, r).is_file()]
            raise ExportError(f"no {kind} table tuned with {regime} L2 is shipped for {kernel}; "
                              f"{kind} {regime} has: {', '.join(have) or 'none'}"
                              + "".join(f"; a {r} one is (--l2 {r})" for r in elsewhere))
        table = _read_table(path)
        return TableSource(table, path, table.tuned_on or f"NVIDIA {kind.upper()}",
                           table.tuned_date or "date not recorded in the shipped table")
    if gpu_kind:
        raise ExportError("give either SOURCE or --gpu-kind, not both")
    path = Path(source)
    if path.is_dir():
        file = path / "dispatch.json"
        if not file.is_file():
            raise ExportError(f"{path} has no dispatch.json: give the --out folder of `astra tune`, "
                              "a dispatch .json file, or --gpu-kind and --kernel for a shipped table")
    elif path.is_file():
        file = path
    else:
        raise ExportError(f"{path} does not exist")
    table = _read_table(file)
    if kernel and kernel != table.kernel:
        raise ExportError(f"{file} is a table of {table.kernel}, not {kernel}")
    if l2 and l2 != table.l2:
        raise ExportError(f"{file} was tuned with {table.l2} L2, not {l2}")
    device, date = _tuned_on(file.parent)
    if date == "not recorded":  # no report beside it: what the table itself says
        device, date = table.tuned_on or device, table.tuned_date or date
    return TableSource(table, file, device, date)


def _read_table(file: Path) -> DispatchTable:
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ExportError(f"{file} is not JSON: {exc}") from None
    if not data:
        raise ExportError(f"{file} holds no dispatch table (its tuning run found no configuration to dispatch)")
    try:
        table = DispatchTable.model_validate(data)
    except ValidationError as exc:  # pydantic's text is a block; its first error's message is the line
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ExportError(f"{file} is not a dispatch table: {where + ': ' if where else ''}"
                          f"{first['msg'].removeprefix('Value error, ')}") from None
    suite.load(table.kernel)
    return table


def _tuned_on(folder: Path) -> tuple[str, str]:
    """Device and date from the tuning report beside the table, where there is one."""
    report = folder / "report.json"
    if report.is_file():
        try:
            data = json.loads(report.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ExportError(f"{report} is not a tuning report ({exc}): put back the one `astra tune` wrote, "
                              "or remove it (the export then says where the table was tuned is not recorded)") from None
        if not isinstance(data, dict):
            raise ExportError(f"{report} is not a tuning report (JSON, but not an object)")
        return f"{data.get('device', 'unknown device')} ({data.get('arch', '?')})", data.get("recorded") or data.get("date", "not recorded")  # a replay's: its recording's
    markdown = folder / "report.md"
    if markdown.is_file():
        first = markdown.read_text().splitlines()[0]
        if m := re.match(r"^# \S+: (?:tuned on|replayed from a recording of) (.+), (\S+)$", first):
            return m.group(1), m.group(2)
    return "not recorded beside the table", "not recorded"


# --- checks and the binaries ------------------------------------------------------------------


def check_table(table: DispatchTable, folder: suite.KernelFolder, sms: int = suite.DEFAULT_SMS,
                arch: str = DEFAULT_ARCH) -> None:
    """Refuse a table the current template cannot reproduce (an older template's parameters, a
    shape missing a symbol, a configuration its constraints refuse at its own shape on the target
    GPU: the file's header would name it while the launcher runs another), and a kernel whose
    shapes the C launcher cannot read from its arguments."""
    spec = folder.spec
    if table.dtype not in spec.dtypes or table.variant not in spec.variants:
        raise ExportError(f"{table.kernel} runs in {spec.dtypes} with variants {list(spec.variants)}; "
                          f"the table says {table.dtype} {table.variant}")
    if not table.entries:
        raise ExportError(f"the {table.kernel} table has no entries")
    for name in table.sources:
        try:
            table.source_of(name)
        except AstraError as exc:
            raise ExportError(str(exc)) from None
    for where, source, config in [(f"entry {spec.label(e.shape) if set(e.shape) == set(spec.symbols) else e.shape}",
                                   e.source, e.config) for e in table.entries if e.source != "baseline"] + (
            [("general", "template", table.general)] if table.general else []):
        template = table.source_of(source)
        names = template.names
        if set(config) != set(names):
            raise ExportError(f"{table.kernel} {where}: configuration {config} does not set exactly the "
                              f"{source}'s parameters {names}: the table is from another {source}")
        for p in template.parameters:
            if config[p.name] not in p.values:
                raise ExportError(f"{table.kernel} {where}: {p.name}={config[p.name]} is not among the "
                                  f"{source}'s values {list(p.values)}: the table is from another {source}")
    for entry in table.entries:
        if set(entry.shape) != set(spec.symbols) or any(not 1 <= v <= INT32_MAX for v in entry.shape.values()):
            raise ExportError(f"{table.kernel}: entry shape {entry.shape} must set {spec.symbols} to positive sizes "
                              f"of at most {INT32_MAX} (the kernels' 32-bit size arguments)")
    if broken := table.broken_entry(sms, arch):
        raise ExportError(broken)
    caller_scalars(spec)  # the PyTorch op and the callable read the shape: refused before anything is written


def plan_binaries(table: DispatchTable, folder: suite.KernelFolder, shapes: list[dict[str, int]],
                  sms: int, arch: str) -> tuple[list[Binary], list[Group], dict[str, str]]:
    """The binaries the file holds: the pick at every covered shape, and every configuration of
    the table (and the baseline, where the table keeps it) at every covered shape that admits it.
    Returns them with their flag groups, and the covered shapes no configuration runs at."""
    binaries: dict[tuple, Binary] = {}
    unrunnable: dict[str, str] = {}

    def add(source: str, config: dict[str, int], shape: dict[str, int], picked: bool) -> None:
        env = suite.environment(folder.spec, shape, table.dtype, table.variant, sms, arch)
        template = table.source_of(source)
        instance = template.instantiate(config, env)
        if isinstance(instance, Exclusion):
            if picked:  # a baseline entry's pick, which the baseline's own constraints refuse here
                unrunnable[folder.spec.label(shape)] = f"the {source} cannot run here: {instance.reason}"
            return
        key = binary_key(template, source, config, instance)
        if key not in binaries:
            binaries[key] = Binary(
                name="", source=source, config={p: int(config[p]) for p in template.names},
                derived={d.name: int(instance.defines[d.name]) for d in template.derived},
                fast_math=bool(instance.fast_math), max_registers=int(instance.max_registers or 0),
                at=folder.spec.label(shape))
        if picked:
            binaries[key].shapes.append(folder.spec.label(shape))

    for shape in shapes:
        try:
            pick = table.pick(shape, sms, arch)
        except AstraError as exc:
            unrunnable[folder.spec.label(shape)] = str(exc)
            continue
        add(pick.source, pick.config, shape, picked=True)
    configs = [("baseline", {})] if any(e.source == "baseline" for e in table.entries) else []
    configs += [(e.source, e.config) for e in table.entries if e.source != "baseline"]
    configs += [("template", table.general)] if table.general else []
    for source, config in configs:
        for shape in shapes:
            add(source, config, shape, picked=False)

    groups: list[Group] = []
    order = table.source_names()
    ordered = sorted(binaries.values(), key=lambda b: (order.index(b.source), b.key()))
    for index, binary in enumerate(ordered):
        group = Group(binary.fast_math, binary.max_registers)
        if group not in groups:
            groups.append(group)
        binary.group = groups.index(group)
        binary.name = f"{table.kernel}_{_LETTER.get(binary.source, 's')}{index}"
    return ordered, groups, unrunnable


_LETTER = {"template": "t", "baseline": "b"}  # a binary's name: the kernel, its source's letter (s: named), an index


def plan_array_sizes(table: DispatchTable) -> tuple[int, int]:
    """The C arrays' lengths for a configuration and for derived values: the most any source has (at least 1)."""
    sources = [table.source_of(name) for name in table.source_names()]
    return max(1, *(len(s.names) for s in sources)), max(1, *(len(s.derived) for s in sources))


def covered_shapes(table: DispatchTable, folder: suite.KernelFolder,
                   extra: list[dict[str, int]] = ()) -> list[dict[str, int]]:
    """The shapes the file holds a binary of the pick at: the table's, the spec's sets, its sweep
    (the token axis at the serving widths and at the held-out ones, where the pick may move a
    configuration one value: a norm's row length compiled in is a binary per width) and `extra`."""
    seen, shapes = set(), []
    for shape in [*(e.shape for e in table.entries), *folder.spec.all_shapes(), *folder.spec.sweep_shapes(), *extra]:
        key = tuple(shape[s] for s in folder.spec.symbols)
        if key not in seen:
            seen.add(key)
            shapes.append({s: shape[s] for s in folder.spec.symbols})
    return shapes


# --- the CUDA file ----------------------------------------------------------------------------

# common.cuh declares the cluster helpers for the sm_90 device pass only; nvcc's host pass of a
# whole file parses the kernels that call them too, so the exported copy declares them there as well.
_DEVICE_ONLY_GUARD = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900"
_HOST_AND_DEVICE_GUARD = "#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900"
_GUARD_NOTE = "  // exported: also in nvcc's host pass, which parses the kernels that call these"
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]\s*$')
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")


def _split_source(text: str) -> tuple[list[str], str]:
    """(system includes, the text without its includes and `//@` directive lines)."""
    includes, kept = [], []
    for line in text.splitlines():
        m = _INCLUDE.match(line)
        if m and m.group(1) == "<":
            includes.append(f"#include <{m.group(2)}>")
        elif m and m.group(2) == suite.COMMON_HEADER:
            continue
        elif m:
            raise ExportError(f"the source includes {m.group(2)!r}, which the export cannot inline")
        elif not line.strip().startswith("//@"):
            kept.append(line)
    return includes, "\n".join(kept).strip("\n")


def _c(value) -> str:
    return json.dumps(str(value))


def _v(name: str) -> str:
    return f"v_{name}"


def _cpp(expression: Expression, what: str) -> str:
    try:
        return to_cpp(expression, _v)
    except TranslationError as exc:
        raise ExportError(f"{what}: {exc}") from None


def _instantiate_function(fname: str, template: Template, folder: suite.KernelFolder, dtype: str,
                          variant: str) -> list[str]:
    """Template.instantiate in C++: derived values, constraints in order, geometry, flags."""
    spec = folder.spec
    variant_defines = spec.variants[variant]
    expressions = [*(d.expression for d in template.derived), *(c.expression for c in template.constraints),
                   *template.grid, *template.block,
                   *(e for e in (template.shared, template.fast_math, template.max_registers, template.work)
                     if e is not None)]
    used = set().union(*(e.names for e in expressions))
    # Python's scope: the environment, then the configuration over it, then each derived value.
    scope = {s: f"shape[{i}]" for i, s in enumerate(spec.symbols)}
    scope |= {"ELEM_BYTES": str(numpy_dtype(dtype).itemsize), "SMS": "sms", "SM": "sm"}
    scope |= {n: str(int(v)) for n, v in variant_defines.items()}
    scope |= {p: f"cfg[{i}]" for i, p in enumerate(template.names)}
    where = f"{folder.name}/{Path(template.path).name}"
    out = [f"static int {fname}(const ax_int* shape, ax_int sms, ax_int sm, const ax_int* cfg, Inst* out) {{",
           "    int err = 0;", "    (void)shape; (void)sms; (void)sm; (void)cfg;"]
    out += [f"    ax_int {_v(n)} = {value};" for n, value in scope.items() if n in used]
    for i, d in enumerate(template.derived):
        declare = "" if d.name in scope and d.name in used else "ax_int "
        scope[d.name] = d.name
        out += [f"    {declare}{_v(d.name)} = {_cpp(d.expression, f'{where}:{d.line}')};", "    if (err) return FAILED;",
                f"    out->derived[{i}] = {_v(d.name)};"]
    for c in template.constraints:
        reason = c.reason or c.expression.text
        out += ["    {", f"        const ax_int holds = {_cpp(c.expression, f'{where}:{c.line}')};",
                "        if (err) return FAILED;",
                f"        if (!holds) {{ out->line = {c.line}; out->reason = {_c(reason)}; return EXCLUDED; }}",
                "    }"]
    for key in ("grid", "block"):
        dims = getattr(template, key)
        for i in range(3):
            value = _cpp(dims[i], f"{where} {key}") if i < len(dims) else "1"
            out += [f"    out->{key}[{i}] = {value};", "    if (err) return FAILED;"]
    for key in ("grid", "block"):
        dims = len(getattr(template, key))
        out += [f"    for (int i = 0; i < {dims}; ++i)",
                f"        if (out->{key}[i] < 1) {{ out->line = 0; out->reason = \"{key} has an empty dimension\";"
                " return EXCLUDED; }"]
    shared = _cpp(template.shared, f"{where} shared") if template.shared else "0"
    fast = f"(({_cpp(template.fast_math, f'{where} fast_math')}) != 0)" if template.fast_math else "0"
    regs = _cpp(template.max_registers, f"{where} max_registers") if template.max_registers else "0"
    out += [f"    out->shared = {shared};", "    if (err) return FAILED;",
            f"    out->fast_math = {fast};", "    if (err) return FAILED;",
            f"    out->max_registers = {regs};", "    if (err) return FAILED;"]
    if template.work is not None:
        out += [f"    out->work = {_cpp(template.work, f'{where} work')};", "    if (err) return FAILED;"]
    out += ["    return ADMITTED;", "}"]
    return out


def render_cu(source: TableSource, folder: suite.KernelFolder, binaries: list[Binary], groups: list[Group],
              shapes: list[dict[str, int]], unrunnable: dict[str, str], arch: str, command: str,
              sms: int = suite.DEFAULT_SMS) -> str:
    table, spec = source.table, folder.spec
    k = table.kernel
    ns = f"astra_{k}"
    (np_, nd), ns_ = plan_array_sizes(table), len(spec.symbols)
    signature = c_signature(folder.spec, table.dtype)
    carriers = shape_args(spec)
    multi = len(groups) > 1

    includes = ["#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]
    bodies = {}
    common_includes, common_text = _split_source((suite.SUITE_DIR / suite.COMMON_HEADER).read_text())
    if _DEVICE_ONLY_GUARD in common_text:  # nvcc's host pass parses kernel bodies too
        common_text = common_text.replace(_DEVICE_ONLY_GUARD, _HOST_AND_DEVICE_GUARD + _GUARD_NOTE)
    for which in table.source_names():
        found, text = _split_source(table.source_of(which).source)
        bodies[which] = text
        common_includes += found
    for inc in common_includes:
        if inc not in includes:
            includes.append(inc)

    # Every header line carries values from files (the report's device, the table's path, the
    # command line): each is one comment line whatever they hold.
    lines = [comment_line(line) for line in
             _header(source, folder, binaries, groups, shapes, unrunnable, arch, command, sms)]
    lines += ["", f"#define DTYPE {C_TYPES[table.dtype]}",
              f"#define ELEM_BYTES {numpy_dtype(table.dtype).itemsize}"]
    lines += [define_line(n, int(v)) for n, v in spec.variants[table.variant].items()]
    lines += includes + ["", f"namespace {ns} {{", common_text, f"}}  // namespace {ns}", ""]

    for index, b in enumerate(binaries):
        which_text = bodies[b.source]
        defined = sorted({m.group(1) for m in map(_DEFINE.match, which_text.splitlines()) if m})
        entry = table.source_of(b.source).kernel
        defines = {**b.config, **b.derived}
        lines.append(comment_line(f"// {b.name}: the {b.source}"
                     + (f" at {' '.join(f'{n}={v}' for n, v in b.config.items())}" if b.config else "")
                     + (f"; derived {' '.join(f'{n}={v}' for n, v in b.derived.items())}" if b.derived else "")
                     + f"; flags {' '.join(groups[b.group].nvcc_flags()) or '(none)'}"))
        if multi:
            lines.append(f"#if !defined(ASTRA_GROUP) || ASTRA_GROUP == {b.group}")
        lines.append(f"namespace {ns} {{ namespace i{index} {{")
        lines += [define_line(n, v) for n, v in defines.items()]
        lines.append(define_line(entry, b.name))
        lines.append(which_text)
        lines.append(f"#undef {entry}")
        lines += [f"#undef {n}" for n in [*defines, *defined]]
        lines.append(f"}} }}  // namespace {ns}::i{index}")
        if multi:
            lines.append("#endif")
        lines.append("")

    lines += _host_part(table, folder, binaries, groups, signature, carriers, np_, ns_, nd)
    lines += ["", "#undef DTYPE", "#undef ELEM_BYTES"] + [f"#undef {n}" for n in spec.variants[table.variant]]
    return "\n".join(lines) + "\n"


def _age(tuned_date: str, now: str) -> str:
    """How long before `now` (ISO 8601) the table was tuned, in whole days: ", 3 days before this
    export"; empty where the date is not an ISO date (not recorded). A table tuned on an older driver
    or template is the one to tune again first."""
    try:
        days = (datetime.fromisoformat(now).date() - datetime.fromisoformat(tuned_date).date()).days
    except ValueError:
        return ""
    if days < 0:  # tuned "after" the export: another machine's clock
        return ""
    return {0: ", the day of this export", 1: ", 1 day before this export"}.get(days, f", {days} days before this export")


def _header(source, folder, binaries, groups, shapes, unrunnable, arch, command, sms) -> list[str]:
    table, spec = source.table, folder.spec
    k = table.kernel
    now = datetime.now(UTC).isoformat(timespec="seconds")
    out = [f"// {k}: the kernel tuned by astra-kernels {__version__}, as one standalone CUDA file.",
           "//",
           f"// Tuned on:      {source.device}, {source.tuned_date}{_age(source.tuned_date, now)} (times with {table.l2} L2)",
           f"// Source table:  {source.shown} ({table.dtype}, variant {table.variant}, {len(table.entries)} tuned shapes)",
           f"// Exported:      {now}, by `{command}`",
           f"// Target:        {arch}; the kernels were chosen for {sms} multiprocessors, and at run time the pick",
           "//                uses the device's own count and compute capability",
           "//",
           "// Build with nvcc alone (these are the flags the tuner compiled each kernel with):"]
    builds = object_builds(k, groups, arch)
    if len(groups) > 1:
        out += ["// its kernels need different flags, which one nvcc call cannot mix: build one object per",
                "// group (group 0 also holds the host code) and link them together:"]
    out += [f"//   nvcc {' '.join(args)}" for args, _ in builds]
    out.append(f"//   nvcc -shared {' '.join(name for _, name in builds)} -o lib{k}.so")
    if len(groups) > 1:
        out.append("// (without ASTRA_GROUP the file also builds in one call, every kernel with that call's flags)")
    out += ["// Under NVRTC the device part compiles alone: __CUDACC_RTC__ hides the host code.",
            "//",
            "// Host API (C linkage):",
            f"//   cudaError_t {k}_launch({', '.join(f'{t} {n}' for t, n in launch_signature(spec, table.dtype))}, "
            "cudaStream_t stream);",
            f"//     picks the kernel for the shape ({', '.join(f'{s} = {a}' for s, a in shape_args(spec).items())})"
            " as the dispatch table does, on the",
            "//     current device, and launches it on `stream`; on failure "
            f"{k}_last_error() says why.",
            f"//   int {k}_pick(const long long shape[{len(spec.symbols)}] /* {', '.join(spec.symbols)} */, int sms, "
            f"int sm, {k}_plan* plan);",
            "//     the same pick without a GPU (sm: 90 for sm_90): kernel, grid, block, shared memory, why.",
            "//",
            f"// Arguments ({folder.name}/spec.py): " + "; ".join(
                f"{a.name} {a.role}" + (f" [{', '.join(a.shape)}]" if a.shape else "")
                + (f" = {a.value}" if a.role == 'scalar' and a.value in spec.symbols else "")
                for a in spec.args) + ".",
            "// Tensors are contiguous, 16-byte aligned and on the current device.",
            "//",
            "// The pick (astra_kernels/runtime/dispatch.py): at a tuned shape, its best (the baseline where nothing",
            "// beat it); elsewhere the nearest tuned shape's (within the token range tuned at the shape's width,",
            "// that width's nearest token count; else by the sum over the shape symbols of |log a - log b|)",
            "// whose configuration the template's constraints admit at the shape; else the",
            "// general configuration; else the admitted configuration fewest value steps from the nearest",
            "// tuned shape's. Launch geometry comes from the template's own expressions.",
            "//"]
    if table.sources:
        out += ["// Besides the kernel's template and baseline, the table runs sources of its own (an entry",
                "// of one is taken where that source's constraints admit the shape, as a template's is):",
                *(f"//   {name}: kernel {table.source_of(name).kernel}" for name in table.sources), "//"]
    out.append("// Dispatch table (median us as measured when tuning):")
    for e in table.entries:
        config = " ".join(f"{n}={v}" for n, v in e.config.items())
        config = {"template": config, "baseline": "(the baseline)"}.get(e.source, f"{e.source} {config}".strip())
        timing = f"{e.median_us:.2f}" if e.median_us else "-"
        out.append(f"//   {spec.label(e.shape):>14}  {timing:>8}  {config}")
    if table.general:
        out.append(f"//   {'general':>14}  {'':>8}  {' '.join(f'{n}={v}' for n, v in table.general.items())}")
    out += ["//", f"// Kernels in this file ({len(binaries)}), and the covered shapes whose pick each is:"]
    for b in binaries:
        what = " ".join([*([] if b.source == "template" else [f"the {b.source}"]),
                         *(f"{n}={v}" for n, v in b.config.items())])
        derived = (" [" + " ".join(f"{n}={v}" for n, v in b.derived.items()) + "]") if b.derived else ""
        out.append(f"//   {b.name}: {what}{derived}")
        if b.shapes:
            out.append(f"//       {', '.join(b.shapes)}")
    out += ["//", f"// {len(shapes)} shapes are covered (the table's, the spec's sets and any given with --shapes);",
            "// any other shape runs its pick where that is one of these kernels, else the nearest of them that",
            "// runs there (its reason says so), and where none does "
            f"{k}_launch returns cudaErrorNotSupported naming", "// the shape (export again with --shapes)."]
    if unrunnable:
        out.append("// Covered shapes no configuration runs at: " + "; ".join(f"{s} ({r})" for s, r in unrunnable.items()))
    return out


def _host_part(table, folder, binaries, groups, signature, carriers, np_, ns_, nd) -> list[str]:
    spec = folder.spec
    k = table.kernel
    ns = f"astra_{k}"
    host = f"{ns}_host"
    template = folder.template
    multi = len(groups) > 1
    names = template.names
    sources = table.source_names()  # the C code's source index is the position here
    out = ["#ifndef __CUDACC_RTC__", "#include <cuda_runtime.h>", "#include <algorithm>", "#include <array>",
           "#include <cmath>", "#include <cstdio>", "#include <cstdlib>", "#include <cstring>", "#include <map>",
           "#include <mutex>", "", *_plan_struct(table, np_, nd), ""]
    if multi:
        out.append(f"namespace {ns} {{")
        params = ", ".join(f"{t} {n}" for t, n in signature)
        for index, b in enumerate(binaries):
            out += [f"#if defined(ASTRA_GROUP) && ASTRA_GROUP != {b.group}",
                    f"namespace i{index} {{ extern \"C\" __global__ void {b.name}({params}); }}", "#endif"]
        out += [f"}}  // namespace {ns}", ""]
    out += ["#if !defined(ASTRA_GROUP) || ASTRA_GROUP == 0" if multi else "", f"namespace {host} {{", HELPERS,
            "enum { ADMITTED = 0, EXCLUDED = 1, FAILED = 2 };",
            f"struct Inst {{ ax_int derived[{nd}]; ax_int grid[3]; ax_int block[3]; ax_int shared; ax_int fast_math;"
            " ax_int max_registers; ax_int work; int line; const char* reason; };", ""]
    for index, name in enumerate(sources):
        out += [comment_line(f"// {name}"), *_instantiate_function(f"instantiate_s{index}", table.source_of(name), folder,
                                                     table.dtype, table.variant), ""]
    out += ["static int instantiate(int source, const ax_int* shape, ax_int sms, ax_int sm, const ax_int* cfg, Inst* out) {",
            "    switch (source) {"]
    out += [f"    case {index}: return instantiate_s{index}(shape, sms, sm, cfg, out);" for index in range(len(sources))]
    out += ["    }", "    return FAILED;", "}", ""]

    params = template.parameters
    count = len(sources)
    out += [f"static const int kSymbols = {ns_};", f"static const int kParams = {len(params)};  // the template's",
            f"static const char* const kSourceNames[{count}] = {{{', '.join(_c(s) for s in sources)}}};",
            f"static const int kSourceParams[{count}] = "
            f"{{{', '.join(str(len(table.source_of(s).names)) for s in sources)}}};",
            f"static const int kSourceDerived[{count}] = "
            f"{{{', '.join(str(len(table.source_of(s).derived)) for s in sources)}}};",
            f"static const int kSourceWork[{count}] = "
            f"{{{', '.join(str(int(table.source_of(s).work is not None)) for s in sources)}}};  // declares `work:`",
            f"static const char* const kSymbolNames[{ns_}] = {{{', '.join(_c(s) for s in spec.symbols)}}};"]
    for i, p in enumerate(params):
        out.append(f"static const ax_int kValues{i}[] = {{{', '.join(f'{v}LL' for v in p.values)}}};")
    out.append(f"static const ax_int* const kValues[{np_}] = {{{', '.join(f'kValues{i}' for i in range(len(params))) or '0'}}};")
    out.append(f"static const int kCounts[{np_}] = {{{', '.join(str(len(p.values)) for p in params) or '0'}}};")
    out.append(f"static const char* const kParamNames[{np_}] = {{{', '.join(_c(p.name) for p in params) or '0'}}};")
    launch = template.launch_parameters()  # what dispatch.py's _work_kept never moves
    out.append(f"static const int kLaunchParam[{np_}] = {{{', '.join(str(int(p.name in launch)) for p in params) or '0'}}};")
    out.append(f"static const ax_int kDefault[{np_}] = {{{_values(template.default, names)}}};")
    out += ["", f"struct Entry {{ ax_int shape[{ns_}]; ax_int config[{np_}]; int source; const char* label; }};",
            f"static const Entry kEntries[{len(table.entries)}] = {{"]
    for e in table.entries:
        config = _values(e.config, table.source_of(e.source).names)
        out.append(f"    {{{{{', '.join(f'{e.shape[s]}LL' for s in spec.symbols)}}}, {{{config}}}, "
                   f"{sources.index(e.source)}, {_c(spec.label(e.shape))}}},")
    out += ["};", f"static const int kEntryCount = {len(table.entries)};",
            f"static const int kHasGeneral = {int(bool(table.general))};",
            f"static const ax_int kGeneral[{np_}] = {{{_values(table.general or {}, names)}}};", "",
            f"struct Binary {{ int source; ax_int config[{np_}]; int derived_count; ax_int derived[{nd}]; "
            "ax_int fast_math; ax_int max_registers; const char* name; };",
            f"static const Binary kBinaries[{len(binaries)}] = {{"]
    for b in binaries:
        derived = ", ".join(f"{v}LL" for v in b.derived.values()) or "0"
        out.append(f"    {{{sources.index(b.source)}, {{{_values(b.config, table.source_of(b.source).names)}}}, "
                   f"{len(b.derived)}, {{{derived}}}, {int(b.fast_math)}, {b.max_registers}, {_c(b.name)}}},")
    out += ["};", f"static const int kBinaryCount = {len(binaries)};", ""]
    out.append("static const void* kernel_address(int index) {")
    out.append("    switch (index) {")
    for index, b in enumerate(binaries):
        out.append(f"    case {index}: return (const void*)&{ns}::i{index}::{b.name};")
    out += ["    }", "    return 0;", "}", ""]
    out += fill("export_pick.cu.in", KERNEL=k).splitlines()
    out += ["", "}  // namespace " + host, ""]
    out += _c_api(table, folder, signature, carriers, host)
    if multi:
        out.append("#endif  // ASTRA_GROUP == 0")
    out.append("#endif  // __CUDACC_RTC__")
    return out


def _plan_struct(table: DispatchTable, np_: int, nd: int) -> list[str]:
    k = table.kernel
    names = comment_text(", ".join(table.source_of("template").names))
    if table.sources:
        sources = comment_text("; ".join(f"{i}: {n}" for i, n in enumerate(table.source_names()) if i > 1))
        which = f"/* 0: the template; 1: the baseline; {sources} (the table's own sources) */"
        config = f"/* the source's parameters in its order (the template's: {names}) */"
    else:
        which, config = "/* 0: the template at `config`; 1: the baseline */", f"/* {names} */"
    return ["typedef struct {",
            f"    int source;                      {which}",
            f"    long long config[{np_}];          {config}",
            f"    long long derived[{nd}];          /* the source's `derive` values, in order */",
            "    int instance;                    /* the kernel of this file that runs it; -1: none here */",
            "    const char* kernel;              /* its name, or NULL */",
            "    unsigned int grid[3];",
            "    unsigned int block[3];",
            "    unsigned long long shared_bytes;",
            "    int fast_math;",
            "    int max_registers;               /* 0: no cap */",
            "    char picked_by[256];",
            "    char error[512];",
            f"}} {k}_plan;"]


def render_header(table: DispatchTable, folder: suite.KernelFolder) -> str:
    """`<kernel>.h`: the host API of `<kernel>.cu` for the other files of a program."""
    k = table.kernel
    np_, nd = plan_array_sizes(table)
    params = ", ".join(f"{t} {n}" for t, n in launch_signature(folder.spec, table.dtype))
    lines = [f"// {k}.h: the host API of {k}.cu (its header comment says what each function does).",
             "#pragma once", "#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]
    if any(t.startswith("__nv_fp8") for t, _ in c_signature(folder.spec, table.dtype)):
        lines.append("#include <cuda_fp8.h>")
    lines += ["", *_plan_struct(table, np_, nd), "", "#ifdef __cplusplus", 'extern "C" {', "#endif",
              f"cudaError_t {k}_launch({params}, cudaStream_t stream);",
              f"int {k}_pick(const long long* shape, int sms, int sm, {k}_plan* plan);",
              f"const char* {k}_last_error(void);",
              "#ifdef __cplusplus", "}", "#endif"]
    return "\n".join(lines) + "\n"


def _values(config: dict[str, int], names: list[str]) -> str:
    return ", ".join(f"{int(config[n])}LL" if n in config else "0LL" for n in names) or "0LL"


# The pick of dispatch.py, over the tables above; KERNEL is replaced by the kernel's name.


def _c_api(table, folder, signature, carriers, host) -> list[str]:
    """The file's C API (`<kernel>_last_error`, `_pick`, `_launch`): generated/export_launch_api.cpp.in
    with the kernel's signature, the shape it reads from the arguments and its outputs' sizes in."""
    spec = folder.spec
    sizes = [f"        const ax_int {_v(s)} = shape[{i}]; (void){_v(s)};" for i, s in enumerate(spec.symbols)]
    sizes.append(f"        const ax_int {_v('ELEM_BYTES')} = {numpy_dtype(table.dtype).itemsize}; (void){_v('ELEM_BYTES')};")
    for arg in spec.args:
        if arg.role in ("out", "inout"):
            count = "1LL"
            for dim in arg.shape:
                count = f"ax_mul(err, {count}, {_cpp(Expression(dim), f'{arg.name} shape')})"
            sizes.append(f"        elements = ax_add(err, elements, ax_abs(err, {count}));")
    return fill("export_launch_api.cpp.in", KERNEL=table.kernel, HOST=host,
                PARAMS=", ".join(f"{t} {n}" for t, n in launch_signature(spec, table.dtype)),
                SYMBOL_COUNT=len(spec.symbols), SHAPE=", ".join(f"(ax_int){carriers[s]}" for s in spec.symbols),
                OUTPUT_ELEMENTS="\n".join(sizes), STATIC_SHARED_LIMIT=STATIC_SHARED_LIMIT,
                ARGUMENTS=", ".join(f"(void*)&{n}" for _, n in signature)).rstrip("\n").splitlines()


# --- the folder -------------------------------------------------------------------------------


@dataclass
class ExportResult:
    out: Path
    files: list[Path]
    binaries: list[Binary]
    groups: list[Group]
    unrunnable: dict[str, str]


def export(source: TableSource, out: str | Path, *, shapes: list[dict[str, int]] = (), sms: int = suite.DEFAULT_SMS,
           arch: str = DEFAULT_ARCH, command: str | None = None) -> ExportResult:
    """Write `<kernel>.cu` with its `<kernel>.h`, `<kernel>_launch.py`, `README.md`, `export.json` and
    `dispatch.json` to `out`."""
    table = source.table
    folder = suite.load(table.kernel)
    out, k = Path(out), table.kernel
    files = [out / f"{k}.cu", out / f"{k}_launch.py", out / "README.md", out / MANIFEST, out / "dispatch.json",
             out / f"{k}.h", out / torch_op_file(k)]
    earlier = _refuse_others_files(out, files)  # before any work: a person's README.md is never replaced
    suite.compute_capability(arch)  # an arch that is none is named before anything else
    check_table(table, folder, sms, arch)
    built_apart = [name for name in table.source_names() if table.source_of(name).build != Build()]
    if built_apart:  # the export is one self-contained .cu that nvcc builds with its own flags
        raise ExportError(f"{table.kernel}'s {', '.join(built_apart)} is built with its own compiler settings "
                          "(//@ compiler, std, include or flag: another project's source with its headers, as "
                          "`astra import-sglang` writes); the export inlines every source into one self-contained "
                          ".cu and cannot carry those. Export a table whose entries are this project's templates.")
    for shape in shapes:
        if set(shape) != set(folder.spec.symbols):
            raise ExportError(f"shape {shape} must set exactly {folder.spec.symbols}")
    covered = covered_shapes(table, folder, list(shapes))
    binaries, groups, unrunnable = plan_binaries(table, folder, covered, sms, arch)
    if not binaries:
        raise ExportError(f"no configuration of the {table.kernel} table runs at any covered shape")
    command = command or f"astra_kernels.jobs.exporting.cuda_file.export({str(source.path)!r}, {str(out)!r})"
    out.mkdir(parents=True, exist_ok=True)
    files[0].write_text(render_cu(source, folder, binaries, groups, covered, unrunnable, arch, command, sms))
    manifest = {
        "format": FORMAT_VERSION, "kernel": k, "dtype": table.dtype, "variant": table.variant, "arch": arch, "sms": sms,
        "source_table": source.shown, "tuned_on": source.device, "tuned_date": source.tuned_date,
        "command": command, "exported": datetime.now(UTC).isoformat(timespec="seconds"),
        "astra_kernels": __version__, "cu": files[0].name,
        # what exports wrote here (this one's and earlier ones' still here): the next one may replace these only
        "files": sorted({f.name for f in files} | {name for name in earlier if (out / name).is_file()}),
        "groups": [asdict(g) for g in groups],
        "binaries": [asdict(b) for b in binaries],
        "covered_shapes": [folder.spec.label(s) for s in covered],
        "unrunnable": unrunnable,
        "table": table.model_dump(mode="json"),
    }
    files[3].write_text(json.dumps(manifest, indent=2))
    files[4].write_text(table.model_dump_json(indent=2))
    files[5].write_text(render_header(table, folder))
    files[6].write_text(torch_op.render(table, folder))
    files[1].write_text(guide.launcher_py(k, folder, table.dtype))
    files[2].write_text(guide.readme(manifest, folder, groups))
    return ExportResult(out, files, binaries, groups, unrunnable)


def _written_by_export(out: Path) -> set[str]:
    """The files in `out` an earlier export wrote, by its manifest (one before the manifest listed
    them wrote the six files of its kernel); none where there is no manifest of an export."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return set()
    if not isinstance(manifest, dict) or "format" not in manifest or not isinstance(manifest.get("kernel"), str):
        return set()
    k = manifest["kernel"]
    listed = manifest.get("files")
    if isinstance(listed, list) and all(isinstance(name, str) for name in listed):
        return set(listed)
    return {f"{k}.cu", f"{k}_launch.py", "README.md", MANIFEST, "dispatch.json", f"{k}.h"}


def _refuse_others_files(out: Path, files: list[Path]) -> set[str]:
    """An export writes over its own files only: a README.md (or any file of the names it writes)
    that was there before and that no export wrote is a person's, and is never replaced. Returns
    the names earlier exports wrote in `out`."""
    if not out.is_dir():
        return set()
    ours = _written_by_export(out)
    theirs = [f for f in files if f.exists() and f.name not in ours]
    if theirs:
        raise UsageError(f"{', '.join(map(str, theirs))} exists and was not written by astra export, which "
                         f"would replace it: give another --out (or move the file)")
    return ours
