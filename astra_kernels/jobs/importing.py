"""`astra import-sglang`: kernel folders whose baseline is SGLang's own CUDA source, as SGLang ships it.

Astra and the two-stage tuner extracted their SGLang kernels by hand; the ports in kernels_sglang/
are written here from SGLang's launch scheme. This job takes the source itself: SGLang's wheel
carries its JIT kernels' CUDA (`sglang/kernels/jit/csrc/...`, with the headers they include under
`sglang/kernels/jit/include/`), and SGLang compiles them with nvcc beside TVM-FFI's headers. For each
op with a recipe here, it writes a folder `sglang_<port>`:

    baseline.cu   an extern "C" entry with the port's arguments that calls SGLang's kernel,
                  compiled unchanged (generated/sglang/*.cu.in: which kernel SGLang's host code
                  picks and its launch geometry, as //@ lines); template.cu the same, with no
                  parameters yet, for the agent's templater to take from there
    spec.py       the port's spec under the new name, its shapes those SGLang's kernel takes,
                  and where it came from (KernelSpec.origin: version, file, op)
    reference.py  the port's float64 reference; peer.py the port's PyTorch peer (SGLang's own
                  forward_native), both imported: one owner of what the op computes

and beside them `_sglang/`: the source files and headers as they ship, SGLang's and TVM-FFI's
licences, and SOURCE.json (versions, where they were read, each file's sha256). Nothing is
edited; the entry point works by compiling SGLang's kernels as device functions
(generated/sglang/device_functions_begin.h says how).

The sources come from an installed sglang (and its apache-tvm-ffi), or from wheels given with
`--from` (the sglang wheel and the apache-tvm-ffi wheel it pins), or from a folder holding an
unpacked `sglang/` and `tvm_ffi/`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from astra_kernels.jobs.generated_files import GENERATED, comment_text, generated_text, py_text
from astra_kernels.tools.errors import UsageError

JIT = "sglang/kernels/jit"
VENDORED = "_sglang"  # beside the kernel folders; no spec.py, so never taken for one


@dataclass(frozen=True)
class Recipe:
    """What it takes to run one SGLang op as the suite runs its port: the file, the op that launches
    it, and the wrapper (generated/sglang/<port>.cu.in) that reproduces SGLang's launch."""

    port: str
    file: str  # under sglang/kernels/jit/csrc/
    op: str
    dtypes: tuple[str, ...] = ("bf16", "fp16")  # what SGLang serves with these kernels

    @property
    def name(self) -> str:
        return f"sglang_{self.port}"


RECIPES = {r.port: r for r in (
    Recipe("rmsnorm", "elementwise/rmsnorm.cuh", "sglang.kernels.ops.layernorm.norm.rmsnorm"),
    Recipe("fused_add_rmsnorm", "elementwise/fused_add_rmsnorm.cuh",
           "sglang.kernels.ops.layernorm.norm.fused_add_rmsnorm"),
    Recipe("silu_and_mul", "elementwise/activation.cuh", "sglang.kernels.ops.activation.activation.silu_and_mul"),
    Recipe("rotary_embedding", "elementwise/rope.cuh",
           "sglang.kernels.ops.attention.rope.apply_rope_with_cos_sin_cache_inplace"),
    Recipe("per_token_group_quant_fp8", "gemm/per_token_group_quant.cuh",
           "sglang.kernels.ops.quantization.per_token_group_quant.per_token_group_quant"),
)}

# The suite's other kernels, and why each is not imported: said by `astra import-sglang` every time.
NOT_IMPORTED = {
    "merge_attn_states": "SGLang's JIT sources hold no merge_attn_states; its production kernel is sgl-kernel's, "
                         "which ships compiled only",
    "topk_softmax": "SGLang's JIT moe/moe_topk_softmax.cuh is a different kernel (fused routing with "
                    "renormalisation); the production topk_softmax is sgl-kernel's, which ships compiled only",
}


@dataclass
class Sources:
    """Where SGLang's JIT tree and TVM-FFI's headers were found, and their versions."""

    jit: Path  # .../sglang/kernels/jit
    sglang_version: str
    sglang_licence: Path | None
    tvm_ffi_include: Path
    tvm_ffi_version: str
    tvm_ffi_licences: list[Path]
    origin: str  # said in SOURCE.json: where they were read


def _dist_info(root: Path, project: str) -> Path | None:
    found = sorted(root.glob(f"{project.replace('-', '_')}-*.dist-info"))
    return found[-1] if found else None


def _version_of(dist_info: Path | None) -> str:
    if dist_info is None:
        return "unknown"
    match = re.search(r"^Version:\s*(\S+)", (dist_info / "METADATA").read_text(errors="replace"),
                      re.MULTILINE)
    return match.group(1) if match else "unknown"


def _unpack(wheel: Path, into: Path) -> None:
    """The members this job reads: the JIT tree, TVM-FFI's headers, the licences and metadata."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            wanted = [n for n in archive.namelist()
                      if n.startswith((f"{JIT}/csrc/", f"{JIT}/include/", "tvm_ffi/include/")) or ".dist-info/" in n]
            archive.extractall(into, members=wanted)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"--from {wheel}: not a readable wheel ({exc})") from None


def locate(sources: list[str], workdir: Path) -> Sources:
    """SGLang's JIT tree and TVM-FFI's headers from `sources` (wheels or folders, unpacked into
    `workdir`), or else from the installed packages; UsageError saying what is missing and how to
    get it."""
    roots: list[Path] = []
    for i, given in enumerate(sources):
        path = Path(given).expanduser()
        if path.is_file() and path.suffix == ".whl":
            into = workdir / f"wheel{i}"
            _unpack(path, into)
            roots.append(into)
        elif path.is_dir():
            roots.append(path)
        else:
            raise UsageError(f"--from {given}: neither a wheel (.whl) nor a folder")
    if sources:
        jit = next((r / JIT for r in roots if (r / JIT / "csrc").is_dir()), None)
        tvm = next((r / "tvm_ffi" / "include" for r in roots if (r / "tvm_ffi" / "include" / "tvm").is_dir()), None)
        sgl_root = jit.parents[2] if jit else None
        tvm_root = tvm.parents[1] if tvm else None
        where = ", ".join(sources)
    else:
        jit = tvm = sgl_root = tvm_root = None
        where = "the installed packages"
        spec = importlib.util.find_spec("sglang")  # finds without importing sglang (and torch)
        if spec and spec.submodule_search_locations:
            sgl_root = Path(list(spec.submodule_search_locations)[0]).parent
            jit = sgl_root / JIT if (sgl_root / JIT / "csrc").is_dir() else None
        spec = importlib.util.find_spec("tvm_ffi")
        if spec and spec.submodule_search_locations:
            tvm_root = Path(list(spec.submodule_search_locations)[0]).parent
            tvm = tvm_root / "tvm_ffi" / "include" if (tvm_root / "tvm_ffi" / "include" / "tvm").is_dir() else None
    if jit is None:
        raise UsageError(f"no SGLang JIT kernel sources ({JIT}/csrc) in {where}: install sglang, or give its wheel "
                         "with --from (`pip download --no-deps sglang` fetches it)")
    if tvm is None:
        raise UsageError(f"no TVM-FFI headers (tvm_ffi/include) in {where}: SGLang's kernels include them; "
                         "install apache-tvm-ffi, or give its wheel with --from as well (the version sglang pins: "
                         "`pip download --no-deps apache-tvm-ffi==<pin>`)")
    sgl_info, tvm_info = _dist_info(sgl_root, "sglang"), _dist_info(tvm_root, "apache-tvm-ffi")
    sgl_version = _version_of(sgl_info)
    tvm_version = _version_of(tvm_info)
    if not sources:  # installed: metadata is authoritative where dist-info sits elsewhere
        for project, current in (("sglang", sgl_version), ("apache-tvm-ffi", tvm_version)):
            if current == "unknown":
                try:
                    version = importlib.metadata.version(project)
                except importlib.metadata.PackageNotFoundError:
                    continue
                sgl_version, tvm_version = ((version, tvm_version) if project == "sglang" else (sgl_version, version))
    return Sources(
        jit=jit, sglang_version=sgl_version,
        sglang_licence=next(iter(sorted(sgl_info.glob("licenses/*"))), None) if sgl_info else None,
        tvm_ffi_include=tvm, tvm_ffi_version=tvm_version,
        tvm_ffi_licences=sorted(tvm_info.glob("licenses/*")) if tvm_info else [],
        origin=where)


@dataclass
class Imported:
    """One op's outcome: the folder written, and the port's shapes SGLang's kernel does not take."""

    recipe: Recipe
    folder: Path
    kept: int
    dropped: list[str]  # "T=1 H=4100: why"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _vendor(sources: Sources, dest: Path, recipes: list[Recipe]) -> Path:
    """`dest/_sglang/`: the headers and each recipe's file, as they ship, with the licences and a
    record of where each came from. Written afresh (a second import replaces the first whole)."""
    out = dest / VENDORED
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sources.jit / "include", out / "include")
    for recipe in recipes:
        target = out / "csrc" / recipe.file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sources.jit / "csrc" / recipe.file, target)
    shutil.copytree(sources.tvm_ffi_include, out / "tvm_ffi" / "include")
    for name in ("device_functions_begin.h", "device_functions_end.h"):
        (out / "include" / "astra").mkdir(exist_ok=True)
        shutil.copy2(GENERATED / "sglang" / name, out / "include" / "astra" / name)
    if sources.sglang_licence:
        shutil.copy2(sources.sglang_licence, out / "LICENSE.sglang")
    for licence in sources.tvm_ffi_licences:
        shutil.copy2(licence, out / f"{licence.name}.tvm_ffi")
    record = {
        "read_from": sources.origin,
        "sglang": {"version": sources.sglang_version,
                   "files": {f"{JIT}/csrc/{r.file}": _sha256(sources.jit / "csrc" / r.file) for r in recipes}},
        "apache_tvm_ffi": {"version": sources.tvm_ffi_version},
        "note": "Every file here is as its package ships it, except include/astra/, written by astra import-sglang.",
    }
    (out / "SOURCE.json").write_text(json.dumps(record, indent=2) + "\n")
    return out


def _folder_files(recipe: Recipe, sources: Sources, shapes: dict[str, list[dict[str, int]]]) -> dict[str, str]:
    from astra_kernels import suite

    port = suite.load(recipe.port)
    file = f"{JIT}/csrc/{recipe.file}"
    # The version is read from the wheel's METADATA: a file, so text in code only escaped (generated_files.py).
    version = py_text(sources.sglang_version)
    wrapper = (generated_text(f"sglang/{recipe.port}.cu.in").replace("@VERSION@", comment_text(sources.sglang_version))
               .replace("@FILE@", file).replace("@INCLUDE@", recipe.file))
    origin = {"project": "sglang", "version": sources.sglang_version, "file": file, "op": recipe.op,
              "port": recipe.port}
    spec = "\n".join([
        f'"""{recipe.port} as SGLang {version} ships it ({file}), written by `astra import-sglang`:',
        f"the suite's {recipe.port} spec (same arguments, reference and peer), its shapes those SGLang's kernel",
        'takes, and where it came from."""',
        "",
        f"from astra_kernels.kernels_sglang.{recipe.port}.spec import SPEC as PORT",
        "from astra_kernels.suite.schema import Origin",
        "",
        "SPEC = PORT.model_copy(update={",
        f'    "name": {recipe.name!r},',
        f'    "summary": "SGLang {version}\'s own kernel: " + PORT.summary,',
        f'    "dtypes": {list(recipe.dtypes)!r},',
        f'    "shapes": {shapes!r},',
        '    "anchors": [],',
        '    "seeds": [],  # points of the port\'s template; this folder\'s template is SGLang\'s kernel, fixed',
        f'    "origin": Origin(**{origin!r}),',
        "})",
        "",
    ])
    files = {
        "spec.py": spec,
        "reference.py": f'"""The float64 reference of the suite\'s {recipe.port}: one owner of what the op computes."""\n\n'
                        f"from astra_kernels.kernels_sglang.{recipe.port}.reference import *  # noqa: F401,F403\n"
                        f"from astra_kernels.kernels_sglang.{recipe.port}.reference import make_inputs, reference  "
                        "# noqa: F401\n",
        "baseline.cu": wrapper,
        "template.cu": wrapper,
    }
    if (port.path / "peer.py").is_file():
        files["peer.py"] = (f'"""The suite\'s {recipe.port} peer (SGLang\'s forward_native)."""\n\n'
                            f"from astra_kernels.kernels_sglang.{recipe.port}.peer import forward  # noqa: F401\n")
    return files


def _supported_shapes(recipe: Recipe, baseline_text: str, folder: Path) -> tuple[dict[str, list[dict[str, int]]], list[str]]:
    """The port's shape sets (but its odd edge cases) cut to the shapes SGLang's kernel takes, by the
    wrapper's own //@ require lines; each shape cut, with the reason."""
    from astra_kernels import suite
    from astra_kernels.tools.templating.template import Exclusion, parse_template

    port = suite.load(recipe.port)
    template = parse_template(baseline_text, f"{recipe.name}/baseline.cu", suite.template_symbols(port.spec), folder)
    kept: dict[str, list[dict[str, int]]] = {}
    dropped: list[str] = []
    for set_name, shapes in port.spec.shapes.items():
        if set_name == "odd":  # the port's own edge cases, shapes no model has
            continue
        for shape in shapes:
            reasons = {instance.reason for dtype in recipe.dtypes for variant in port.spec.variants
                       if isinstance(instance := template.instantiate(
                           {}, suite.environment(port.spec, shape, dtype, variant)), Exclusion)}
            if reasons:
                dropped.append(f"{set_name} {port.spec.label(shape)}: {'; '.join(sorted(reasons))}")
            else:
                kept.setdefault(set_name, []).append(shape)
    return kept, dropped


def import_sglang(dest: Path, ports: list[str], sources: Sources, force: bool = False) -> list[Imported]:
    """Write one folder per recipe in `ports` (every recipe when empty) under `dest`.

    A kernel folder already there is refused, as `astra new` refuses one, unless `force`: a second
    import used to write over it silently, and a spec.py a person had edited since was lost."""
    unknown = [p for p in ports if p not in RECIPES]
    if unknown:
        reasons = "; ".join(f"{p}: {NOT_IMPORTED[p]}" if p in NOT_IMPORTED else f"{p}: no such suite kernel"
                            for p in unknown)
        raise UsageError(f"cannot import {', '.join(unknown)} ({reasons}); importable: {', '.join(RECIPES)}")
    recipes = [RECIPES[p] for p in (ports or RECIPES)]
    missing = [r.file for r in recipes if not (sources.jit / "csrc" / r.file).is_file()]
    if missing:
        raise UsageError(f"SGLang {sources.sglang_version} ({sources.origin}) has no {', '.join(missing)}; "
                         "this importer knows the layout of SGLang 0.5.23's JIT tree")
    there = [str(dest / r.name) for r in recipes if (dest / r.name).exists()]
    if there and not force:
        raise UsageError(f"{', '.join(there)} exists already (and may hold your edits): import into another "
                         "folder, or give --force to write over it")
    dest.mkdir(parents=True, exist_ok=True)
    _vendor(sources, dest, recipes)
    done = []
    for recipe in recipes:
        folder = dest / recipe.name
        folder.mkdir(exist_ok=True)
        wrapper = _folder_files(recipe, sources, {})["baseline.cu"]
        (folder / "baseline.cu").write_text(wrapper)
        shapes, dropped = _supported_shapes(recipe, wrapper, folder)
        for name, text in _folder_files(recipe, sources, shapes).items():
            (folder / name).write_text(text)
        done.append(Imported(recipe, folder, sum(len(v) for v in shapes.values()), dropped))
    return done
