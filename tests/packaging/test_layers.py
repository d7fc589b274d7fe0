"""The layers of the README's table, read from the source: every import points down (or sideways
within one layer), no import cycle exists, and every module imports alone in a fresh interpreter.

The order, lowest first (a module may import its own layer and the ones below):
  tools.errors < tools.toolchain < tools.measuring | tools.templating < tools.search | tools.cluster
  < suite, kernels_sglang < defaults, redaction < runtime < jobs, evaluators, testing
  < nodes.state, nodes.context < nodes.shared < nodes < graph < cli
"|" marks peers that must not import each other; no node imports another node.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "astra_kernels"

# (rank, prefixes): a module's layer is the longest prefix that matches its dotted name.
LAYERS = [
    (0, ["tools.errors", "tools"]),
    (1, ["tools.toolchain"]),
    (2, ["tools.measuring", "tools.templating"]),
    (3, ["tools.search", "tools.cluster"]),
    (4, ["suite", "kernels_sglang"]),
    (5, ["", "defaults", "redaction"]),
    (6, ["runtime"]),
    (7, ["jobs", "evaluators", "testing"]),
    (8, ["nodes.state", "nodes.context"]),
    (9, ["nodes.shared", "nodes"]),
    (10, [f"nodes.{n}" for n in ("loader", "planner", "generator", "templater", "tester", "profiler", "tuner",
                                 "reporter")]),
    (11, ["graph"]),
    (12, ["cli"]),
]
# Same layer, but neither may import the other.
PEERS = [("tools.measuring", "tools.templating"), ("tools.search", "tools.cluster")]


def _package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in config.items()}


def _modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, from the folders pyproject.toml maps."""
    modules = {}
    dirs = _package_dirs()
    for package, folder in dirs.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """The package's modules that `name` imports (anywhere in the file), with the line."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from package import submodule` imports the submodule
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in MODULES and "." in target:
                    target = target.rsplit(".", 1)[0]
                out.append((target, node.lineno))
    return out


def _layer(module: str) -> tuple[int, str]:
    short = module.removeprefix(PACKAGE).removeprefix(".")
    best = None
    for rank, prefixes in LAYERS:
        for prefix in prefixes:
            if short == prefix or short.startswith(prefix + ".") or prefix == "" and "." not in short:
                if best is None or len(prefix) > len(best[1]):
                    best = (rank, prefix)
    assert best is not None, f"{module} is in no layer of this test; add it to LAYERS"
    return best


def test_the_layer_table_covers_every_module():
    assert len(MODULES) > 100
    for module in MODULES:
        _layer(module)


def test_every_import_points_down_the_layers():
    wrong = []
    for module, path in sorted(MODULES.items()):
        rank, prefix = _layer(module)
        for target, line in _imports(module, path):
            t_rank, t_prefix = _layer(target)
            where = f"{path.relative_to(ROOT)}:{line}: {module} imports {target}"
            if t_rank > rank:
                wrong.append(f"{where} (layer {t_rank} above {rank})")
            elif t_rank == rank == 10 and t_prefix != prefix:
                wrong.append(f"{where} (a node imports another node: share through nodes/shared/)")
            elif any({prefix, t_prefix} == set(pair) for pair in PEERS):
                wrong.append(f"{where} (peer layers must not import each other)")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph = {m: {t for t, _ in _imports(m, p) if t != m} for m, p in MODULES.items()}
    cycles, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [module, target]) if target in stack
                              else f"{module} -> {target}")
            elif target not in state:
                visit(target, stack + [module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _import_alone(module: str) -> tuple[str, int, str]:
    proc = subprocess.run([sys.executable, "-P", "-c", f"import {module}"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT.parent, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return module, proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """An import that works only after another module was imported first (a cycle hidden by the
    order things happen to load in) fails here. Kernel folders' peer.py files need torch."""
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    modules = [m for m in sorted(MODULES)
               if (have_torch or not m.endswith(".peer")) and not m.endswith(".__main__")]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        failures = [f"{m}: {err}" for m, rc, err in pool.map(_import_alone, modules) if rc != 0]
    assert not failures, "modules that do not import alone:\n" + "\n".join(failures)


def test_every_kernel_folder_is_a_package_the_wheel_installs():
    """A kernel folder pyproject.toml does not list is left out of a wheel's Python files (its
    spec.py), and an installed suite would silently lack the kernel (kernels_sglang/ADDING.md)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {p.parent.name for p in (ROOT / "kernels_sglang").glob("*/spec.py")}
    listed = {p.rsplit(".", 1)[1] for p in config["packages"] if p.startswith(f"{PACKAGE}.kernels_sglang.")}
    assert folders and folders <= listed, f"add to [tool.setuptools] packages: {sorted(folders - listed)}"
