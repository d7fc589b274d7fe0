#!/usr/bin/env python3
"""Build a wheelhouse for installing astra-kernels on an air-gapped GPU node.

Why this exists: the GPU nodes that run SGLang usually cannot reach PyPI, but
they already carry a large Python stack (torch, numpy, often the CUDA Python
bindings).  Installing astra-kernels there with plain ``pip install`` is not
possible, and copying a whole virtual environment would duplicate (and maybe
shadow) what the node already has.  So, on a machine *with* network, this
script downloads binary wheels for only the packages the node lacks, for the
node's Python version and platform, builds the project's own wheel next to
them, and prints the one command that installs the lot on the node into a
private directory that is put on ``PYTHONPATH``.

How the package list is found: pip cannot "download everything except X", so
each wheel is fetched with ``--no-deps`` and its ``METADATA`` is read for
``Requires-Dist`` lines; dependencies not yet seen and not named in ``--skip``
are fetched in turn, until the closure is complete.  Markers are evaluated for
the *target* interpreter (not the one running this script), so that, e.g.,
``typing-extensions; python_version < "3.11"`` is dropped for a 3.12 node.

Only the standard library is needed; ``packaging`` is used for markers and
version checks when importable (pip's vendored copy counts), and otherwise
markers we cannot evaluate are treated as true (downloading one wheel too many
is harmless; missing one is not).

Example::

    python scripts/build_wheelhouse.py --out .whl --python-version 3.12 \\
        --skip numpy --skip cuda-bindings pydantic rich ml-dtypes
"""

from __future__ import annotations

import argparse
import email.parser
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

try:  # The real library if the build machine has it ...
    from packaging.markers import InvalidMarker, Marker
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
except ImportError:  # pragma: no cover - depends on the machine
    try:  # ... else the copy pip vendors (pip is needed anyway) ...
        from pip._vendor.packaging.markers import InvalidMarker, Marker
        from pip._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # ... else fall back to the conservative rules below.
        Marker = SpecifierSet = None  # type: ignore[assignment,misc]
        InvalidMarker = InvalidSpecifier = ValueError  # type: ignore[assignment,misc]

REPO_ROOT = Path(__file__).resolve().parents[1]

# Roots of the closure: the project's own dependencies (pyproject.toml), less
# what a GPU node that runs SGLang already has. The CUDA packages (cuda-bindings,
# cuda-pathfinder, nvidia-cuda-*) and numpy are left out on purpose: a second
# numpy on PYTHONPATH would shadow the one torch was built against. Name them
# on the command line if a node lacks them. Read from pyproject.toml rather
# than listed here, so a new dependency (LangGraph, Optuna, ...) cannot be
# forgotten by the wheelhouse.
NODE_PROVIDED = frozenset({"numpy", "cuda-bindings", "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"})


def project_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> tuple[str, ...]:
    """[project].dependencies of pyproject.toml, less NODE_PROVIDED."""
    import tomllib

    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return tuple(d for d in deps if normalize_name(_NAME_RE.match(d).group(1)) not in NODE_PROVIDED)

# pip (at least up to 23.x) does not expand an explicit manylinux_2_28 tag to
# the older glibc tags it implies, so list them all: glibc 2.28 (RHEL 8,
# Ubuntu 20.04+) down to the legacy aliases.  Pure-Python wheels
# (py3-none-any) match whatever platforms are given.
DEFAULT_PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)) + (
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)

_NAME_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*")
_PY_VERSION_CLAUSE = re.compile(
    r"""^\s*python_(?:full_)?version\s*(<=|>=|==|!=|<|>)\s*(['"])([0-9.]+)\2\s*$"""
)


def normalize_name(name: str) -> str:
    """Return the PEP 503 normalized form of a distribution name.

    ``Pydantic_Core``, ``pydantic.core`` and ``pydantic-core`` are one project;
    comparing normalized names is what keeps one version of each package.
    """
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Requirement:
    """The parts of a PEP 508 requirement this script needs."""

    name: str  # normalized
    extras: frozenset[str] = frozenset()
    specifier: str = ""  # e.g. ">=2.6,<3"; no parentheses
    marker: str = ""  # text after ';', stripped

    def pip_spec(self) -> str:
        """The requirement as a pip command-line argument (extras dropped: --no-deps)."""
        return self.name + self.specifier


def parse_requirement(text: str) -> Requirement:
    """Parse ``name[extras] (specifier) ; marker`` without needing ``packaging``.

    Direct references (``name @ url``) are not supported: a wheelhouse must
    come from an index.  Raises ``ValueError`` on text that is not a requirement.
    """
    body, _, marker = text.partition(";")
    match = _NAME_RE.match(body)
    if not match:
        raise ValueError(f"not a requirement: {text!r}")
    name, rest = match.group(1), body[match.end() :]
    extras: frozenset[str] = frozenset()
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"unclosed extras in requirement: {text!r}")
        extras = frozenset(normalize_name(e.strip()) for e in rest[1:close].split(",") if e.strip())
        rest = rest[close + 1 :]
    rest = rest.strip()
    if rest.startswith("@"):
        raise ValueError(f"direct URL requirements are not supported: {text!r}")
    if rest.startswith("(") and rest.endswith(")"):  # old style: "foo (>=1.0)"
        rest = rest[1:-1]
    specifier = re.sub(r"\s+", "", rest)
    if specifier and not re.match(r"^(~=|==|!=|<=|>=|<|>|===)", specifier):
        raise ValueError(f"bad version specifier in requirement: {text!r}")
    return Requirement(normalize_name(name), extras, specifier, marker.strip())


def target_environment(python_version: str, platforms: Sequence[str]) -> dict[str, str]:
    """Marker environment (PEP 508) of the target node, derived from the CLI options.

    Only what the options determine is meaningful (python version, OS and
    machine); the rest takes CPython-on-Linux values, which is what GPU nodes run.
    """
    parts = python_version.split(".")
    full = python_version if len(parts) >= 3 else ".".join((parts + ["0", "0"])[:3])
    plat = next((p for p in platforms if p != "any"), "linux_x86_64")
    if plat.startswith("win"):
        sys_platform, system, os_name = "win32", "Windows", "nt"
    elif plat.startswith("macosx"):
        sys_platform, system, os_name = "darwin", "Darwin", "posix"
    else:
        sys_platform, system, os_name = "linux", "Linux", "posix"
    machine = re.sub(r"^(manylinux_\d+_\d+|musllinux_\d+_\d+|macosx_\d+_\d+|manylinux\d*|linux|win)_", "", plat)
    machine = {"amd64": "AMD64", "win32": "x86"}.get(machine, machine)
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": os_name,
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": system,
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(parts[:2]),
        "sys_platform": sys_platform,
    }


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _fallback_marker(marker: str, env: dict[str, str], extras: Iterable[str]) -> bool:
    """Evaluate a marker without ``packaging``: exact for the simple cases, else True.

    Handles ``extra == "x"`` and a single ``python_version OP "X.Y"`` clause,
    the forms that matter for the closure.  Anything else is assumed to apply.
    """
    extra = re.fullmatch(r"""\s*extra\s*==\s*(['"])([^'"]+)\1\s*""", marker)
    if extra:
        return normalize_name(extra.group(2)) in {normalize_name(e) for e in extras}
    if re.search(r"\bextra\b", marker):
        return False  # an extra combined with something else: not requested by default
    clause = _PY_VERSION_CLAUSE.match(marker)
    if not clause:
        return True
    op, wanted = clause.group(1), _version_tuple(clause.group(3))
    key = "python_full_version" if "full" in marker else "python_version"
    have = _version_tuple(env[key])
    width = max(len(have), len(wanted))
    have, wanted = have + (0,) * (width - len(have)), wanted + (0,) * (width - len(wanted))
    return {
        "<": have < wanted, "<=": have <= wanted, ">": have > wanted,
        ">=": have >= wanted, "==": have == wanted, "!=": have != wanted,
    }[op]


def marker_applies(marker: str, env: dict[str, str], extras: Iterable[str] = ()) -> bool:
    """Whether a requirement with this marker is needed on the target.

    A requirement guarded by ``extra == "x"`` counts only when extra ``x`` was
    requested for its parent (``pydantic[email]``); by default none are.
    """
    if not marker:
        return True
    if Marker is None:
        return _fallback_marker(marker, env, extras)
    try:
        parsed = Marker(marker)
    except InvalidMarker:
        return True  # unknown syntax: download rather than miss a dependency
    return any(parsed.evaluate({**env, "extra": extra}) for extra in ("", *extras))


def version_satisfies(version: str, specifier: str) -> bool | None:
    """``True``/``False`` if ``version`` meets ``specifier``; ``None`` if unknowable here."""
    if not specifier:
        return True
    if SpecifierSet is None:
        return None
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except InvalidSpecifier:
        return None


@dataclass
class WheelInfo:
    """What the closure needs from one downloaded wheel."""

    path: Path
    name: str  # normalized
    version: str
    requires: list[str] = field(default_factory=list)  # raw Requires-Dist lines


def read_wheel(path: Path) -> WheelInfo:
    """Read Name, Version and Requires-Dist from a wheel's ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(path) as zf:
        candidates = [
            n for n in zf.namelist()
            if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if len(candidates) != 1:
            raise ValueError(f"{path.name}: expected one .dist-info/METADATA, found {candidates}")
        text = zf.read(candidates[0]).decode("utf-8", errors="replace")
    # Headers only: a long description body can be large and is irrelevant.
    meta = email.parser.HeaderParser().parsestr(text)
    return WheelInfo(
        path=path,
        name=normalize_name(meta["Name"]),
        version=meta["Version"],
        requires=list(meta.get_all("Requires-Dist") or []),
    )


Downloader = Callable[[Requirement, Path], Path]


def pip_downloader(python_version: str, platforms: Sequence[str]) -> Downloader:
    """Return a function that downloads one wheel (no dependencies) for the target."""
    base = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--no-deps",
        "--implementation", "cp", "--python-version", python_version,
    ]
    for plat in platforms:
        base += ["--platform", plat]

    def download(req: Requirement, dest: Path) -> Path:
        # A fresh folder per package: the one file in it is the one just fetched,
        # whatever wheels an earlier run left in the wheelhouse.
        tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=dest))
        try:
            proc = subprocess.run([*base, "--dest", str(tmp), req.pip_spec()],
                                  capture_output=True, text=True)
            wheels = list(tmp.glob("*.whl"))
            if proc.returncode != 0 or len(wheels) != 1:
                raise RuntimeError(
                    f"pip download {req.pip_spec()!r} failed (exit {proc.returncode}); "
                    f"no wheel for Python {python_version} on {', '.join(platforms)}?\n"
                    f"{proc.stdout}{proc.stderr}"
                )
            final = dest / wheels[0].name
            shutil.move(wheels[0], final)
            return final
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    return download


def resolve(
    roots: Sequence[Requirement],
    download: Downloader,
    dest: Path,
    env: dict[str, str],
    skip: Iterable[str] = (),
    pins: dict[str, Requirement] | None = None,
    log: Callable[[str], None] = print,
) -> list[WheelInfo]:
    """Download the dependency closure of ``roots``, minus ``skip``, one version each.

    The first requirement seen for a name decides its version (a pin from
    ``--extra`` wins over anything); a later, conflicting requirement is only
    reported, since a full resolver is pip's job and the target is a fixed set.
    """
    skip_names = {normalize_name(s) for s in skip}
    pins = pins or {}
    got: dict[str, WheelInfo] = {}
    wanted_by: dict[str, str] = {}
    extras_done: dict[str, set[str]] = {}
    queue: list[tuple[Requirement, str]] = [(r, "command line") for r in roots]
    while queue:
        req, parent = queue.pop(0)
        if req.name in skip_names:
            continue
        if req.name in got:
            info = got[req.name]
            if version_satisfies(info.version, req.specifier) is False:
                log(f"warning: {parent} wants {req.name}{req.specifier} but {info.version} "
                    f"was kept (asked for by {wanted_by[req.name]})")
        else:
            chosen = pins.get(req.name, req)
            log(f"downloading {chosen.pip_spec()}  (for {parent})")
            info = got[req.name] = read_wheel(download(chosen, dest))
            wanted_by[req.name] = parent
        # Walk the dependencies the first time a package is seen, and again when
        # a later requirement asks for extras (pkg[x]) not walked yet.
        done = extras_done.get(req.name)
        new_extras = set(req.extras) - (done or set())
        if done is not None and not new_extras:
            continue
        for line in info.requires:
            dep = parse_requirement(line)
            if marker_applies(dep.marker, env, new_extras):
                queue.append((dep, f"{info.name} {info.version}"))
        extras_done[req.name] = (done or set()) | new_extras
    return list(got.values())


# Never part of a build: VCS data, virtual environments, earlier build outputs.
SOURCE_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".pytest_cache", ".whl", "out",
)


def copy_source(root: Path, dest: Path) -> Path:
    """Copy the project to ``dest`` for building, leaving build outputs behind.

    pip builds a local folder in place, and setuptools reuses ``build/lib``
    without cleaning it, so a module deleted or moved since the last build would
    still ship.  A clean copy makes the wheel depend on the sources only (and
    leaves no ``build/`` or ``*.egg-info`` in the checkout).
    """
    shutil.copytree(root, dest, ignore=SOURCE_IGNORE, symlinks=True)
    return dest


def build_project_wheel(dest: Path, root: Path = REPO_ROOT) -> Path:
    """Build astra-kernels' own (pure-Python) wheel into ``dest`` and return its path."""
    for old in dest.glob("astra_kernels-*.whl"):
        old.unlink()  # keep one version of the project too
    with tempfile.TemporaryDirectory() as tmp:
        src = copy_source(root, Path(tmp) / "src")
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "--no-deps", "-w", str(dest.resolve()), str(src)],
            check=True,
        )
    built = sorted(dest.glob("astra_kernels-*.whl"))
    if len(built) != 1:
        raise RuntimeError(f"expected one astra_kernels wheel in {dest}, found {built}")
    return built[0]


def human_size(n: int) -> str:
    """Bytes as a short human-readable string (``1.5 MiB``)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def summary_table(wheels: Sequence[WheelInfo]) -> str:
    """A plain-text table of name, version and file size, with a total line."""
    rows = [(w.name, w.version, human_size(w.path.stat().st_size)) for w in wheels]
    total = sum(w.path.stat().st_size for w in wheels)
    rows.append(("total", f"{len(wheels)} wheels", human_size(total)))
    widths = [max(len(r[i]) for r in [("name", "version", "size"), *rows]) for i in range(3)]
    fmt = f"{{:<{widths[0]}}}  {{:<{widths[1]}}}  {{:>{widths[2]}}}"
    lines = [fmt.format("name", "version", "size"), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*r) for r in rows[:-1]]
    lines += ["  ".join("-" * w for w in widths), fmt.format(*rows[-1])]
    return "\n".join(lines)


# What --slim NAME leaves out of a wheel: parts a GPU node running `astra tune --ray` never loads.
# Ray's wheel is 79 MB (its Java jars 32 MB, its libraries for training, serving, data and LLMs,
# the dashboard's web client), more than a lent GPU's 64 MiB for the tree and wheels together;
# slimmed, its binaries stripped and its members LZMA-compressed, it is 25 MB and runs a local
# cluster (docs/scaling.md's four-H200 runs used it).
SLIM = {
    "ray": ("ray/jars/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/tune/", "ray/train/", "ray/llm/",
            "ray/dashboard/client/build/"),
}
_ELF = b"\x7fELF"


def slim_wheel(path: Path, drop: Sequence[str], strip: Callable[[Path], None] | None = None) -> Path:
    """Rewrite the wheel at `path` in place without the members under the `drop` prefixes, each
    ELF binary passed through `strip` (default: `strip --strip-unneeded` where binutils has it), every
    member LZMA-compressed (pip reads any method zipfile does), and RECORD written anew for what is
    left, so pip installs it as it would the original."""
    if strip is None and shutil.which("strip"):
        def strip(binary: Path) -> None:
            subprocess.run(["strip", "--strip-unneeded", str(binary)], check=False, capture_output=True)
    with zipfile.ZipFile(path) as source:
        record = next((n for n in source.namelist() if n.endswith(".dist-info/RECORD")), None)
        kept: list[tuple[zipfile.ZipInfo, bytes]] = []
        with tempfile.TemporaryDirectory() as scratch:
            for info in source.infolist():
                if info.filename == record or any(info.filename.startswith(prefix) for prefix in drop):
                    continue
                data = source.read(info)
                if strip is not None and data[:4] == _ELF:
                    binary = Path(scratch) / "binary"
                    binary.write_bytes(data)
                    strip(binary)
                    data = binary.read_bytes()
                kept.append((info, data))
    rows = [f"{info.filename},sha256={_urlsafe_digest(data)},{len(data)}" for info, data in kept if not info.is_dir()]
    slimmed = path.with_suffix(".slim")
    with zipfile.ZipFile(slimmed, "w", compression=zipfile.ZIP_LZMA) as target:
        for info, data in kept:
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr, member.compress_type = info.external_attr, zipfile.ZIP_LZMA
            target.writestr(member, data)
        if record is not None:
            target.writestr(record, "\n".join([*rows, f"{record},,"]) + "\n")
    slimmed.replace(path)
    return path


def _urlsafe_digest(data: bytes) -> str:
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_instructions(out: Path, python_version: str) -> str:
    """The commands to run on the target node, after copying ``out`` there."""
    site = "$HOME/.astra/site-" + python_version
    return "\n".join([
        f"# copy {out}/ to the GPU node, then, from the folder holding it:",
        f"# (python3 there must be Python {python_version}; the wheels are built for it)",
        f"python3 -m pip install --no-index --no-deps --target {site} {out.name}/*.whl",
        f'export PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}',
        f'export PATH={site}/bin:$PATH',
        "astra --help",
    ])


DEFAULT_REQUIREMENTS = project_requirements()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Download wheels an air-gapped GPU node lacks, plus astra-kernels' own wheel.",
        epilog="Example: %(prog)s --skip numpy --skip typing-extensions pydantic rich ml-dtypes",
    )
    parser.add_argument("requirements", nargs="*", default=list(DEFAULT_REQUIREMENTS),
                        help="roots of the closure (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path(".whl"),
                        help="wheelhouse folder (default: %(default)s)")
    parser.add_argument("--python-version", default="3.12",
                        help="the target's Python, e.g. 3.11 (default: %(default)s)")
    parser.add_argument("--platform", dest="platforms", action="append", default=None,
                        help="target platform tag, repeatable (default: manylinux_2_28 .. "
                             "manylinux1, x86_64); pure-Python wheels match any")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME",
                        help="package the target already has, repeatable (e.g. numpy)")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME==VER",
                        help="extra package (pinned) to include, repeatable; the pin "
                             "also wins if the package is a dependency")
    parser.add_argument("--slim", action="append", default=[], metavar="NAME", choices=sorted(SLIM),
                        help="rewrite this package's wheel without what a GPU node never loads (ray: its jars, "
                             "RLlib, Data, Serve, Tune, Train, LLM and dashboard client; 79 -> 25 MB), binaries "
                             "stripped, LZMA-compressed; repeatable")
    parser.add_argument("--no-project", action="store_true",
                        help="do not build astra-kernels' own wheel")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        parser.error(f"--python-version must look like 3.12, not {args.python_version!r}")
    args.platforms = args.platforms or list(DEFAULT_PLATFORMS)
    return args


def main(argv: Sequence[str] | None = None, download: Downloader | None = None) -> int:
    """Entry point; ``download`` can be replaced (tests) to avoid the network."""
    args = parse_args(argv)
    try:
        roots = [parse_requirement(r) for r in args.requirements]
        pins = {p.name: p for p in map(parse_requirement, args.extra)}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = target_environment(args.python_version, args.platforms)
    download = download or pip_downloader(args.python_version, args.platforms)

    try:
        wheels = resolve([*pins.values(), *roots], download, out, env, args.skip, pins)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name in args.slim:
        for wheel in (w for w in wheels if w.name == name):
            before = wheel.path.stat().st_size
            slim_wheel(wheel.path, SLIM[name])
            print(f"slimmed {wheel.path.name}: {before / 1e6:.1f} -> {wheel.path.stat().st_size / 1e6:.1f} MB")
    if not args.no_project:
        print("building the astra-kernels wheel")
        wheels.append(read_wheel(build_project_wheel(out)))

    # The install command takes *.whl, so wheels from earlier runs that this
    # run did not choose (other versions, packages now skipped) must go.
    keep = {w.path.resolve() for w in wheels}
    for stale in sorted(out.glob("*.whl")):
        if stale.resolve() not in keep and not (args.no_project and stale.name.startswith("astra_kernels-")):
            print(f"removing stale {stale.name}")
            stale.unlink()

    print()
    print(summary_table(sorted(wheels, key=lambda w: w.name)))
    if "numpy" in {w.name for w in wheels}:
        print("\nnote: numpy is in the wheelhouse; if the node has numpy (torch needs it), "
              "rebuild with --skip numpy so PYTHONPATH does not shadow it.")
    print("\nOn the target node:\n")
    print(install_instructions(out, args.python_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
