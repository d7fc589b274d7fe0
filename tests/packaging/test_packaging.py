"""Packaging tests: what the wheel holds, whether a clean install works, and the
offline logic of scripts/build_wheelhouse.py.

The wheel tests need an index (pip builds in an isolated environment and the
install pulls the CUDA/numpy dependencies, ~300 MB, through pip's cache); they
skip, saying why, when no index answers.  Nothing here needs a GPU.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = "Scripts" if os.name == "nt" else "bin"


def _load_wheelhouse_script():
    """Import scripts/build_wheelhouse.py by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("build_wheelhouse", ROOT / "scripts" / "build_wheelhouse.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


bw = _load_wheelhouse_script()


def _clean_env() -> dict[str, str]:
    """Environment for child interpreters that cannot see this checkout or this venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# --------------------------------------------------------------------------- wheel


@pytest.fixture(scope="module")
def index_reachable(tmp_path_factory) -> None:
    """Skip unless pip can fetch a tiny package (the wheel tests need an index)."""
    dest = tmp_path_factory.mktemp("probe")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), "mdurl"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_clean_env())
    except subprocess.TimeoutExpired:
        pytest.skip("no package index reachable: `pip download mdurl` timed out")
    if proc.returncode != 0:
        pytest.skip(f"no package index reachable: `pip download mdurl` failed:\n{proc.stderr[-2000:]}")


@pytest.fixture(scope="module")
def wheel(index_reachable, tmp_path_factory) -> Path:
    """Build the project's wheel once for this module, from a clean copy of the checkout.

    pip builds a folder in place and setuptools reuses a stale build/lib, which
    could put (or keep) files in the wheel that the sources no longer have.
    """
    out = tmp_path_factory.mktemp("wheel")
    src = bw.copy_source(ROOT, tmp_path_factory.mktemp("src") / "src")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_clean_env(), cwd=out)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("astra_kernels-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_keeps_everything_under_astra_kernels(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "astra_kernels/__init__.py" in names
    assert "astra_kernels/tools/__init__.py" in names
    assert "astra_kernels/kernels_sglang/recorded/h200-2026-11-28/rmsnorm.sqlite.gz" in names  # for --replay recorded
    assert "astra_kernels/kernels_sglang/tuned/h100/warm/rmsnorm.json" in names  # astra export --l2 warm
    assert "astra_kernels/tools/measuring/device_checks.cu" in names  # every evaluation's checks compile it
    top = {n.split("/", 1)[0] for n in names}
    for stray in ("tools", "graph", "nodes", "kernels_sglang", "tests", "bench", "scripts"):
        assert stray not in top, f"wheel installs a top-level {stray}/: {sorted(top)}"
    dist_info = [t for t in top if t.endswith(".dist-info")]
    assert len(dist_info) == 1 and top == {"astra_kernels", dist_info[0]}, sorted(top)


@pytest.mark.slow
def test_wheel_ships_the_newest_recording_of_each_kernel_per_gpu_kind_and_no_other(wheel):
    """Of kernels_sglang/recorded/ (six sessions, 11.7 MB on 2026-11-29) the wheel carries the
    newest session of each kernel on each GPU kind: what `--replay recorded` takes, and an H100's
    own. The older ones stay in the checkout for the docs' reruns. A session recorded later fails
    this until pyproject.toml's package-data names it."""
    from astra_kernels.suite import recordings

    newest = {}
    for r in recordings.shipped():  # oldest first, so the last of each (kind, kernel) stays
        newest[(r.session.split("-", 1)[0], r.kernel)] = r
    wanted = {f"astra_kernels/kernels_sglang/recorded/{r.session}/{r.path.name}" for r in newest.values()}
    packed = {n for n in zipfile.ZipFile(wheel).namelist() if "/kernels_sglang/recorded/" in n}
    assert packed == wanted, (f"add to pyproject.toml's package-data: {sorted(wanted - packed)}; "
                              f"drop from it: {sorted(packed - wanted)}")


@pytest.mark.slow
def test_wheel_metadata_matches_pyproject(wheel):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(wheel) as zf:
        info = next(n.split("/")[0] for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert re.search(r"^astra\s*=\s*astra_kernels\.cli:main\s*$", entry_points, re.M), entry_points
    reqs = [bw.parse_requirement(r) for r in bw.read_wheel(wheel).requires]
    required = {r.name for r in reqs if not r.marker}  # the test extra's lines carry markers
    assert required == {bw.parse_requirement(r).name for r in project["dependencies"]}


# The install below pulls ~300 MB; pytest-timeout (the test extra) counts fixture set-up
# against the first test that uses it, so give these tests room whatever the global timeout.
if importlib.util.find_spec("pytest_timeout"):
    slow_install = pytest.mark.timeout(1800)
else:  # no such marker without the plugin
    def slow_install(test):
        return test


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A plain fresh venv (no system site-packages) with the wheel and its deps from the index."""
    venv_dir = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True, timeout=300)
    python = venv_dir / BIN / "python"
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=1800, env=_clean_env(), cwd=venv_dir,
    )
    assert proc.returncode == 0, f"pip install of the wheel failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return venv_dir


@pytest.mark.slow
@slow_install
def test_installed_console_script_runs(installed, tmp_path):
    astra = installed / BIN / "astra"
    assert astra.exists(), "the wheel did not install an `astra` console script"
    # cwd elsewhere: the checkout must not be importable, only the installed copy.
    proc = subprocess.run([str(astra), "--help"], capture_output=True, text=True,
                          timeout=120, env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, f"astra --help exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "astra" in (proc.stdout + proc.stderr).lower()


@pytest.mark.slow
@slow_install
def test_installed_package_imports_from_the_venv(installed, tmp_path):
    code = ("import astra_kernels, astra_kernels.tools; from astra_kernels.graph import graph; "
            "from astra_kernels.nodes.shared.chat import prompt; assert 'What was tried so far' in prompt('planner'); "
            "assert prompt('templater'); print(astra_kernels.tools.__file__)")
    proc = subprocess.run([str(installed / BIN / "python"), "-c", code], capture_output=True,
                          text=True, timeout=120, env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).resolve().is_relative_to(installed.resolve()), proc.stdout


@pytest.mark.slow
@slow_install
def test_installed_command_works_from_the_repository_root(installed):
    """Run where a user types it, in the checkout: `python -m` would import the checkout's
    astra_kernels/ (which holds only part of the package) in every child process; the children
    run with -P, so the command compiles through its compiler process with the installed copy.
    On a machine without a GPU `astra check` compiles every binary it would test (with the
    worker's compile deadline, hence in the compiler process)."""
    proc = subprocess.run([str(installed / BIN / "astra"), "check", "silu_and_mul", "--set", "astra"],
                          capture_output=True, text=True, timeout=900, env=_clean_env(), cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"astra check exited {proc.returncode}:\n{output}"
    assert "Traceback" not in output
    if "no GPU here" in output:
        assert re.search(r"compiled \d+ binaries of silu_and_mul \(0 failed\)", " ".join(output.split())), output


def test_the_checkout_s_package_finds_its_subpackages_beside_it(tmp_path):
    """A process that imports astra_kernels from the checkout instead of an install (a Ray worker,
    which puts its driver's working directory first on sys.path) finds tools/ and kernels_sglang/
    at the checkout's top level, where the install maps them from. -S: no site-packages, so no
    editable install's finder can answer instead."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib.util, astra_kernels; "
            "print(importlib.util.find_spec('astra_kernels.tools').origin); "
            "print(importlib.util.find_spec('astra_kernels.kernels_sglang.rmsnorm').origin); "
            "print(importlib.util.find_spec('astra_kernels.suite').origin)")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(ROOT / "tools" / "__init__.py"), str(ROOT / "kernels_sglang" / "rmsnorm" / "__init__.py"),
                                   str(ROOT / "astra_kernels" / "suite" / "__init__.py")]


# ------------------------------------------------------------- build_wheelhouse.py

TARGET_312 = bw.target_environment("3.12", bw.DEFAULT_PLATFORMS)


@pytest.mark.parametrize("raw, normalized", [
    ("pydantic", "pydantic"),
    ("Pydantic_Core", "pydantic-core"),
    ("typing.extensions", "typing-extensions"),
    ("ml__dtypes", "ml-dtypes"),
    ("Markdown-It-Py", "markdown-it-py"),
])
def test_normalize_name(raw, normalized):
    assert bw.normalize_name(raw) == normalized


@pytest.mark.parametrize("text, name, extras, spec, marker", [
    ("rich", "rich", set(), "", ""),
    ("pydantic-core==2.50.4", "pydantic-core", set(), "==2.50.4", ""),
    ("pygments<3.0.0,>=2.13.0", "pygments", set(), "<3.0.0,>=2.13.0", ""),
    ("mdurl ~= 0.1", "mdurl", set(), "~=0.1", ""),
    ("typing-extensions>=4.0.0,<5.0; python_version < '3.11'",
     "typing-extensions", set(), ">=4.0.0,<5.0", "python_version < '3.11'"),
    ('email-validator>=2.0.0; extra == "email"', "email-validator", set(), ">=2.0.0", 'extra == "email"'),
    ("Foo_Bar[Email, Socks] (>=1.0) ; os_name == 'posix'",
     "foo-bar", {"email", "socks"}, ">=1.0", "os_name == 'posix'"),
])
def test_parse_requirement(text, name, extras, spec, marker):
    req = bw.parse_requirement(text)
    assert (req.name, set(req.extras), req.specifier, req.marker) == (name, extras, spec, marker)
    assert req.pip_spec() == name + spec


@pytest.mark.parametrize("text", ["", "  ", "foo @ https://example.com/foo.whl", "foo bar", "foo[x"])
def test_parse_requirement_rejects(text):
    with pytest.raises(ValueError):
        bw.parse_requirement(text)


def test_target_environment():
    assert TARGET_312["python_version"] == "3.12"
    assert TARGET_312["python_full_version"] == "3.12.0"
    assert TARGET_312["sys_platform"] == "linux"
    assert TARGET_312["platform_machine"] == "x86_64"
    arm = bw.target_environment("3.11", ["manylinux2014_aarch64"])
    assert (arm["python_version"], arm["platform_machine"]) == ("3.11", "aarch64")


MARKER_CASES = [
    ("", (), True),
    ('python_version < "3.11"', (), False),
    ("python_version >= '3.9'", (), True),
    ('python_version == "3.12"', (), True),
    ('python_full_version >= "3.12.1"', (), False),
    ('extra == "email"', (), False),
    ('extra == "email"', ("email",), True),
]


@pytest.mark.parametrize("marker, extras, expected", MARKER_CASES + [
    ('sys_platform == "win32"', (), False),
    ('platform_machine == "x86_64" and python_version >= "3.10"', (), True),
    ('python_version < "3.11" and extra == "email"', ("email",), False),
])
def test_marker_applies(marker, extras, expected):
    assert bw.marker_applies(marker, TARGET_312, extras) is expected


@pytest.mark.parametrize("marker, extras, expected", MARKER_CASES + [
    ('sys_platform == "win32"', (), True),  # cannot tell: include rather than miss
    ('python_version < "3.11" and extra == "email"', (), False),
])
def test_marker_applies_without_packaging(monkeypatch, marker, extras, expected):
    monkeypatch.setattr(bw, "Marker", None)
    assert bw.marker_applies(marker, TARGET_312, extras) is expected


def test_version_satisfies(monkeypatch):
    assert bw.version_satisfies("2.50.4", "==2.50.4") is True
    assert bw.version_satisfies("2.50.4", ">=2.6,<2.50") is False
    assert bw.version_satisfies("1.0", "") is True
    monkeypatch.setattr(bw, "SpecifierSet", None)
    assert bw.version_satisfies("1.0", ">=2") is None


def make_wheel(dest: Path, name: str, version: str, requires=()) -> Path:
    """Write a minimal wheel whose METADATA names its dependencies."""
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    path = dest / f"{stem}-py3-none-any.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{stem}.dist-info/METADATA", "\n".join(meta) + "\n\nA long description.\n")
        zf.writestr(f"{stem.split('-')[0]}/__init__.py", "")
    return path


def test_read_wheel(tmp_path):
    info = bw.read_wheel(make_wheel(tmp_path, "Pydantic_Core", "2.50.4", ["typing-extensions>=4.14.1"]))
    assert (info.name, info.version, info.requires) == ("pydantic-core", "2.50.4", ["typing-extensions>=4.14.1"])


def test_slim_wheel_drops_what_a_gpu_node_never_loads_and_keeps_an_installable_record(tmp_path):
    """--slim ray: the jars and unused libraries out, ELF binaries through strip, every member
    LZMA-compressed, and RECORD naming exactly what is left with its hash and size (what pip reads)."""
    import base64
    import hashlib
    import zipfile

    path = tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
    members = {"ray/__init__.py": b"VERSION = 1\n", "ray/jars/ray_dist.jar": b"j" * 4096,
               "ray/rllib/algo.py": b"x = 1\n", "ray/core/src/ray/raylet/raylet": b"\x7fELF" + b"\0" * 100,
               "ray/dashboard/client/build/main.js": b"js", "ray/dashboard/agent.py": b"agent = 1\n",
               "ray-2.60.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n",
               "ray-2.60.0.dist-info/RECORD": b"stale\n"}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    stripped = []

    def strip(binary):
        stripped.append(binary.read_bytes()[:4])
        binary.write_bytes(b"\x7fELF stripped")

    bw.slim_wheel(path, bw.SLIM["ray"], strip=strip)
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        assert names == {"ray/__init__.py", "ray/core/src/ray/raylet/raylet", "ray/dashboard/agent.py",
                         "ray-2.60.0.dist-info/METADATA", "ray-2.60.0.dist-info/RECORD"}
        assert all(i.compress_type == zipfile.ZIP_LZMA for i in wheel.infolist())
        assert wheel.read("ray/core/src/ray/raylet/raylet") == b"\x7fELF stripped" and stripped == [b"\x7fELF"]
        rows = wheel.read("ray-2.60.0.dist-info/RECORD").decode().splitlines()
        for row in rows[:-1]:
            name, digest, size = row.split(",")
            data = wheel.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        assert rows[-1] == "ray-2.60.0.dist-info/RECORD,," and len(rows) == len(names)


# A tiny index for resolve(): name -> (version, Requires-Dist lines).
CATALOGUE = {
    "pydantic": ("2.14.3", ["annotated-types>=0.6.0", "pydantic-core==2.50.4", "typing-extensions>=4.14.1",
                            "typing-inspection>=0.4.2", 'email-validator>=2.0.0; extra == "email"']),
    "pydantic-core": ("2.50.4", ["typing-extensions>=4.14.1"]),
    "annotated-types": ("0.8.0", ['typing-extensions>=4.0.0; python_version < "3.9"']),
    "typing-inspection": ("0.4.5", ["typing-extensions>=4.12.0"]),
    "typing-extensions": ("4.16.0", []),
    "rich": ("15.0.0", ["markdown-it-py>=2.2.0", "pygments<3.0.0,>=2.13.0",
                        'typing-extensions<5.0,>=4.0.0; python_version < "3.11"']),
    "markdown-it-py": ("4.3.0", ["mdurl~=0.1", 'pytest; extra == "testing"']),
    "mdurl": ("0.1.2", []),
    "pygments": ("2.21.0", ['colorama>=0.4.6; extra == "windows-terminal"']),
    "email-validator": ("2.3.0", ["dnspython>=2.0.0"]),
    "dnspython": ("2.8.0", []),
}


class FakeIndex:
    """A downloader for resolve()/main() that writes wheels from CATALOGUE."""

    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, req, dest: Path) -> Path:
        self.asked.append(req.pip_spec())
        version, requires = CATALOGUE[req.name]
        if req.specifier.startswith("=="):
            version = req.specifier[2:]
        return make_wheel(dest, req.name, version, requires)


def test_resolve_closure_skips_and_markers(tmp_path):
    index, log = FakeIndex(), []
    roots = [bw.parse_requirement("pydantic"), bw.parse_requirement("rich")]
    got = bw.resolve(roots, index, tmp_path, TARGET_312, skip=["Typing_Extensions"], log=log.append)
    assert sorted(w.name for w in got) == [
        "annotated-types", "markdown-it-py", "mdurl", "pydantic", "pydantic-core",
        "pygments", "rich", "typing-inspection",
    ]
    assert len(index.asked) == len(got), "each package is downloaded once"
    assert "pydantic-core==2.50.4" in index.asked  # the dependent's specifier is passed on
    assert not any("warning" in line for line in log), log


def test_resolve_requested_extras_and_pins(tmp_path):
    index, log = FakeIndex(), []
    pins = {"pydantic-core": bw.parse_requirement("pydantic-core==2.49.0")}
    roots = [*pins.values(), bw.parse_requirement("pydantic"), bw.parse_requirement("pydantic[email]")]
    got = {w.name: w.version for w in bw.resolve(roots, index, tmp_path, TARGET_312, pins=pins, log=log.append)}
    assert got["pydantic-core"] == "2.49.0"  # the pin wins, one version kept
    assert {"email-validator", "dnspython"} <= got.keys()  # walked again for the new extra
    assert "colorama" not in got and "pytest" not in got
    assert any("wants pydantic-core==2.50.4" in line for line in log), log


def test_main_offline(tmp_path, capsys):
    out = tmp_path / "wh"
    out.mkdir()
    stale = make_wheel(out, "numpy", "1.0.0")
    rc = bw.main(["--out", str(out), "--no-project", "--skip", "typing-extensions", "rich"], download=FakeIndex())
    assert rc == 0
    printed = capsys.readouterr().out
    assert not stale.exists(), "wheels not chosen by this run must not be installed by *.whl"
    assert sorted(p.name.split("-")[0] for p in out.glob("*.whl")) == ["markdown_it_py", "mdurl", "pygments", "rich"]
    assert re.search(r"^rich\s+15\.0\.0\s+\S+ \S*B$", printed, re.M), printed
    assert "python3 -m pip install --no-index --no-deps --target" in printed
    assert "export PYTHONPATH=" in printed


def test_main_rejects_bad_arguments(capsys):
    assert bw.main(["--no-project", "foo @ https://example.com/x.whl"], download=FakeIndex()) == 2
    with pytest.raises(SystemExit):
        bw.main(["--python-version", "312"])


def test_default_arguments():
    args = bw.parse_args([])
    assert args.requirements == list(bw.DEFAULT_REQUIREMENTS)
    assert args.out == Path(".whl") and args.python_version == "3.12"
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= set(args.platforms)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_ci_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], check=True)


def test_copy_source_leaves_build_outputs_behind(tmp_path):
    root = tmp_path / "repo"
    for rel in ("pyproject.toml", "astra_kernels/__init__.py", "tools/x.py", "build/lib/tools/old.py",
                "astra_kernels.egg-info/PKG-INFO", ".venv/bin/python", ".git/HEAD", "tools/__pycache__/x.pyc"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    copied = bw.copy_source(root, tmp_path / "copy")
    assert sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file()) == [
        "astra_kernels/__init__.py", "pyproject.toml", "tools/x.py",
    ]


def test_default_roots_are_the_projects_dependencies_less_what_gpu_nodes_have():
    names = {bw.normalize_name(bw._NAME_RE.match(r).group(1)) for r in bw.DEFAULT_REQUIREMENTS}
    assert {"pydantic", "langgraph", "langchain-openai", "optuna", "ml-dtypes"} <= names
    assert not names & bw.NODE_PROVIDED
