"""The facts the planner and the model read: the kernel, its helpers, the GPU and the measured times.

Every fact is generated from what the code really holds: the helpers from parsing
kernels_sglang/common.cuh (the text the compiler is served), the kernel from its spec, the
tolerance through the same lookup the correctness check uses, the times from measurements. A
fact written by hand drifts (a prompt promised `Vec<T, N>` a `.data[i]` the header never had), and
a value nobody measured printed as "None" misleads; so an unknown is left out, never printed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from astra_kernels.nodes.state import AgentState, Candidate
from astra_kernels import suite
from astra_kernels.suite.schema import KERNEL_DTYPE, KernelSpec
from astra_kernels.tools.measuring.problem import Problem
from astra_kernels.tools.toolchain.dtypes import C_TYPES

from .evidence import describe_evidence, front_evidence
from .floors import LATENCY_DONE_RATIO, ShapeRow

@dataclass(frozen=True)
class Helper:
    """One thing a header gives kernels: kind is include, define, type, struct, function or constant."""

    kind: str
    name: str
    text: str  # as declared, whitespace collapsed
    members: tuple[str, ...] = ()
    doc: str = ""  # the // comment lines right above it
    condition: str = ""  # the #if it sits under, where one applies


def _helpers_of(text: str) -> list[Helper]:
    """The declarations at file scope of a CUDA header: what `#include` of it gives a kernel.

    It reads what common.cuh is written with: // comments (those right above a declaration are
    its doc), #if/#ifdef/#ifndef/#else/#elif/#endif (an include guard is no condition),
    #include, #define, typedef and using, structs (templated or aligned) with their members,
    __device__ functions (templates and specializations; __global__ ones are not helpers) and
    const or constexpr constants. A block comment must open and close on one line."""
    found, conditions, comment, statement, depth = [], [], [], "", 0
    for raw in text.splitlines():
        line = raw.strip()
        if depth == 0 and not statement.strip():
            if not line:
                comment = []
                continue
            if line.startswith("//"):
                comment.append(line[2:].strip())
                continue
            if line.startswith("#"):
                _directive(line, conditions, found)
                comment = []
                continue
        code = re.sub(r"//.*", "", re.sub(r'"(\\.|[^"\\])*"', '""', raw))
        code = re.sub(r"/\*.*?\*/", " ", code)
        statement += " " + code
        depth += code.count("{") - code.count("}")
        if depth == 0 and statement.rstrip().endswith((";", "}")):
            condition = " && ".join(c for c in conditions if c)
            found += _declaration(" ".join(statement.split()), " ".join(comment), condition)
            statement, comment = "", []
    return found


def _directive(line: str, conditions: list[str], found: list[Helper]) -> None:
    word, _, rest = line[1:].strip().partition(" ")
    rest = rest.strip()
    if word in ("if", "ifdef", "ifndef"):
        conditions.append({"if": rest, "ifdef": f"defined({rest})", "ifndef": f"!defined({rest})"}[word])
    elif word in ("else", "elif") and conditions:
        conditions[-1] = f"!({conditions[-1]})" + (f" && {rest}" if word == "elif" else "")
    elif word == "endif" and conditions:
        conditions.pop()
    elif word == "include":
        found.append(Helper("include", rest.strip('<>"'), f"#include {rest}"))
    elif word == "define":
        m = re.match(r"(\w+)(\([^)]*\))?\s*(.*)", rest)
        if not m.group(2) and not m.group(3) and conditions and conditions[-1] == f"!defined({m.group(1)})":
            conditions[-1] = ""  # the include guard: no condition on what follows
        else:
            condition = " && ".join(c for c in conditions if c)
            found.append(Helper("define", m.group(1), f"#define {rest}", condition=condition))


def _declaration(s: str, doc: str, condition: str) -> list[Helper]:
    head = s.split("{", 1)[0].strip().rstrip(";").strip()
    body = s[s.find("{") + 1:s.rfind("}")] if "{" in s else ""
    if m := re.match(r"typedef\s+(.+?)\s*\b(\w+)\s*;$", s) or re.match(r"using\s+(\w+)\s*=\s*(.+?);$", s):
        name = m.group(2) if s.startswith("typedef") else m.group(1)
        return [Helper("type", name, s.rstrip(";"), doc=doc, condition=condition)]
    bare = re.sub(r"(alignas|__align__)\s*\((?:[^()]|\([^()]*\))*\)", "", head)
    if re.search(r"\b(struct|class|union)\b", bare) and "(" not in re.split(r"\b(?:struct|class|union)\b", bare)[-1]:
        name = re.findall(r"\w+", bare.split(":")[0])[-1]
        members = tuple(m.strip() for m in body.split(";") if m.strip())
        return [Helper("struct", name, head, members, doc, condition)]
    if "(" in head and re.search(r"\b__device__\b", head) and "__global__" not in head:
        before = re.sub(r"<[^<>()]*>\s*$", "", head.split("(")[0].strip())
        return [Helper("function", re.findall(r"\w+", before)[-1], head, doc=doc, condition=condition)]
    if re.search(r"\bconst(expr)?\b", head) and "=" in head:
        name = re.findall(r"\w+", head.split("=")[0].split("[")[0])[-1]
        return [Helper("constant", name, s.rstrip(";"), doc=doc, condition=condition)]
    return []


@functools.cache
def _common_helpers() -> tuple[Helper, ...]:
    return tuple(_helpers_of(suite.headers()[suite.COMMON_HEADER]))


@functools.cache
def device_helpers() -> str:
    """A Markdown list of what `#include "common.cuh"` gives a kernel, parsed from the file."""
    lines, functions = [], {}
    for h in _common_helpers():
        if h.kind == "function":
            functions.setdefault(h.name, []).append(h)
            continue
        line = {"include": f"- includes `{h.text.split(None, 1)[1]}`",
                "define": f"- macro `{h.text}`",
                "type": f"- type `{h.name}`: `{h.text}`",
                "constant": f"- constant `{h.name}`: `{h.text}`",
                "struct": f"- struct `{h.name}`: `{h.text}`, members "
                          + ", ".join(f"`{m}`" for m in h.members)}[h.kind]
        lines.append(line + _doc_and_condition(h))
    for name, overloads in functions.items():
        lines.append(f"- function `{name}`: " + "; ".join(f"`{h.text}`" for h in overloads)
                     + _doc_and_condition(overloads[0]))
    return "\n".join(lines)


def _doc_and_condition(h: Helper) -> str:
    return (f" — {h.doc}" if h.doc else "") + (f"; only where `{h.condition}`" if h.condition else "")


_ROLES = {"in": "input", "out": "output", "inout": "input and output (in place)", "scalar": "scalar"}


def describe_kernel(spec: KernelSpec, dtype: str, variant: str = "default") -> str:
    """What the kernel computes, in which types, on which arguments, and within what tolerance."""
    spec.check_dtype(dtype)
    defines = suite.base_options(dtype, spec.variants[spec.check_variant(variant)]).defines
    alias = next((h.name for h in _common_helpers() if h.kind == "type" and "DTYPE" in h.text.split()), None)
    lines = [f"- Kernel `{spec.name}`" + (f": {spec.summary}" if spec.summary else ""),
             f"- Element type {dtype}: `{C_TYPES[dtype]}`" + (f" (`{alias}` in common.cuh)" if alias else "")
             + "; compiled with " + " ".join(f"-D{k}={v}" for k, v in defines.items())
             + ("" if len(spec.variants) == 1 else f" (variant {variant})")]
    if spec.symbols:
        lines.append("- Shape symbols: " + ", ".join(spec.symbols))
    lines.append("- Arguments, in order:")
    tolerances = Problem(params=[], make_case=None, bytes_moved=0, tolerances=spec.tolerances)
    checked = []
    for arg in spec.args:
        arg_dtype = dtype if arg.dtype == KERNEL_DTYPE else arg.dtype
        what = arg_dtype + (f" [{', '.join(arg.shape)}]" if arg.shape else "")
        what += f" = {arg.value}" if arg.value is not None else ""
        lines.append(f"  - `{arg.name}` ({_ROLES[arg.role]}): {what}" + (f" — {arg.doc}" if arg.doc else ""))
        if arg.role in ("out", "inout"):
            t = tolerances.tolerance(arg_dtype)
            checked.append(f"`{arg.name}` rtol {t.rtol:g}, atol {t.atol:g}, norm error {t.max_norm_error:g}"
                           if t.rtol or t.atol else f"`{arg.name}` exactly")
    if checked:
        lines.append("- Tolerance (|out - ref| <= atol + rtol * |ref| elementwise, and the relative norm "
                     "error): " + "; ".join(checked))
    if spec.bytes_moved:
        lines.append(f"- Bytes moved (the bytes floor's numerator): {spec.bytes_moved}")
    return "\n".join(lines)


_GPU_FACTS = (("name", str), ("arch", "arch {}".format), ("multiprocessors", "{} SMs".format),
              ("max_shared_per_block_optin", lambda v: f"{v // 1024} KiB shared memory per block (opt-in)"),
              ("registers_per_multiprocessor", "{} registers per SM".format),
              ("l2_bytes", lambda v: f"{v / 2**20:.0f} MiB L2"))


def describe_gpu(device: dict, copy_bandwidth_gbs: float | None = None, launch_floor_us: float | None = None) -> str:
    """The GPU's facts that shape a kernel: those `device` holds, and the two measured floors."""
    parts = [say(device[key]) for key, say in _GPU_FACTS if device.get(key)]
    parts += [f"measured copy bandwidth {copy_bandwidth_gbs:.0f} GB/s"] if copy_bandwidth_gbs else []
    if launch_floor_us:
        # recordings up to 2026-11-28 say "an empty kernel measured with these results, DATE"
        source = (device.get("launch_floor_from") or "").removeprefix("an empty kernel ")
        where = f": {source}" if source else ""
        parts.append(f"launch floor {launch_floor_us:.2f} us (an empty kernel under CUDA-graph replay{where})")
    return "- GPU: " + "; ".join(parts) if parts else ""


def describe_shapes(rows: list[ShapeRow], *, done_fraction: float = 0.9) -> str:
    """One line per shape against both floors, then which shapes are done and which are not."""
    lines, done, open_, unjudged = [], [], [], []
    for r in rows:
        if r.us is None:
            lines.append(f"- {r.label}: no time")
            unjudged.append(r)
            continue
        parts = [f"{r.us:.2f} us"]
        if r.floor_us:
            parts.append(f"{r.us / r.floor_us:.2f}x the bytes floor of {r.floor_us:.2f} us")
        if r.launch_floor_us:
            parts.append(f"{r.us / r.launch_floor_us:.2f}x the launch floor of {r.launch_floor_us:.2f} us")
        if r.bound():
            parts.append(r.bound())
        if r.baseline_us:
            parts.append(f"speedup {r.baseline_us / r.us:.2f}x over the baseline's {r.baseline_us:.2f} us")
        verdict = r.done(done_fraction)
        if verdict is not None:
            parts.append("done" if verdict else "not done")
        (unjudged if verdict is None else done if verdict else open_).append(r)
        lines.append(f"- {r.label}: " + ", ".join(parts))
    summary = []
    if done or open_:
        summary.append(f"done at {len(done)} of {len(done) + len(open_)} shapes (done: within {done_fraction:.0%} of "
                       f"the bytes floor, or {LATENCY_DONE_RATIO:g}x the launch floor where latency-bound)")
    if open_:
        summary.append("not done: " + ", ".join(f"{r.label} ({r.bound()})" for r in open_))
    if unjudged:
        summary.append("not judged (a time or a floor unknown): " + ", ".join(r.label for r in unjudged))
    if summary:
        text = "; ".join(summary)
        lines.append(text[0].upper() + text[1:] + ".")
    return "\n".join(lines)


def resources(candidate: Candidate) -> str:
    """Registers, spills and occupancy where the compile reported them; empty where not."""
    known = [f"{candidate.registers} registers per thread" if candidate.registers is not None else None,
             {True: "spills to local memory", False: "no spills", None: None}[candidate.spills],
             f"{candidate.occupancy_blocks_per_sm} CTAs per SM" if candidate.occupancy_blocks_per_sm is not None
             else None]
    return ", ".join(k for k in known if k)


def describe_contract(spec: KernelSpec, dtype: str, run_labels: set[str] = frozenset()) -> str:
    """What a kernel must get right before any time counts, as the tester checks it (measure.evaluate
    and odd_shapes): a model that is not told writes a rewrite fast at the timed shapes that fails at
    width 12 and spends its repairs discovering the rules."""
    odd = [spec.label(s) for s in spec.shapes.get("odd", []) if spec.label(s) not in run_labels]
    others = [f"{d} ({v})" for d in spec.dtypes for v in spec.variants if (d, v) != (dtype, "default")]
    lines = ["- Every output is compared with the float64 reference within the tolerance above. Each `out` "
             "argument is filled with NaN before every run, so every element must be written; `in` arguments "
             "must come back unchanged; an `inout` argument must end with the reference's value.",
             "- Checked at every shape below, and, before the kernel may hold any shape, also where a server "
             "runs it untimed: " + (f"the odd shapes {', '.join(odd)} ({'x'.join(spec.symbols)}; sizes no tuning times, "
                                    "as a server meets them)" if odd else "no odd shapes")
             + (f"; and in every other dtype and variant the kernel serves: {', '.join(others)} (the same source, "
                "compiled with that DTYPE and variant)" if others else "") + ". A failure at any of them rejects "
             "the kernel everywhere.",
             "- A shape the kernel cannot handle is declared, never failed: `//@ require EXPRESSION -- why` (of "
             "the shape symbols, ELEM_BYTES and SMS) excludes the shapes where it is false, and another kernel "
             "serves them (e.g. `//@ require " + (spec.symbols[-1] if spec.symbols else "N")
             + " * ELEM_BYTES % 16 == 0 -- whole 16-byte vectors`). A kernel that excludes every odd shape is "
             "kept only where it runs."]
    return "\n".join(lines)


def model_facts(state: AgentState) -> str:
    """Everything measured and declared that a model needs to plan or write a kernel: the
    kernel's meaning, the GPU, the helpers common.cuh gives, and each shape's best time against
    its floors (the front: the fastest correct kernel measured there so far, and which it is)."""
    spec = suite.load(state["kernel"]).spec
    gpu = state.get("gpu") or {}
    base_times = Candidate.model_validate(state["baseline"]).times()
    front = state.get("front") or {}
    rows = [ShapeRow(label, entry["median_us"], entry.get("floor_us"), gpu.get("launch_floor_us"),
                     base_times.get(label)) for label, entry in front.items()]
    holders = "\n".join(f"- {label}: candidate {e['candidate']} ({e['origin']})"
                        + (f" at {e['config']}" if e.get("config") else "") for label, e in front.items())
    run_labels = {spec.label(s) for s in state.get("shapes") or []}
    sections = [("The kernel", describe_kernel(spec, state["dtype"])),
                ("What a kernel must get right (checked before any time counts)",
                 describe_contract(spec, state["dtype"], run_labels)),
                ("The GPU", describe_gpu(gpu.get("device") or {}, gpu.get("copy_bandwidth_gbs"),
                                         gpu.get("launch_floor_us"))),
                ("What common.cuh gives kernels", device_helpers()),
                ("Each shape: the fastest correct kernel measured there so far", describe_shapes(rows)),
                ("Which kernel holds each shape", holders),
                ("Where the time goes, by shape class (profiler evidence)", describe_evidence(front_evidence(state), state.get("nsight")))]
    best = Candidate.model_validate(state["best"]) if state.get("best") else None
    if best is not None and resources(best):
        sections.append((f"Candidate {best.id}'s resources", resources(best)))
    return "\n\n".join(f"## {title}\n{text}" for title, text in sections if text)
