"""Security: model output never reaches a shell or an interpreter, checkpoints are read in strict
mode, and API keys reach no file the project writes.

The source scan reads the syntax tree of every module the package and its scripts ship, so a
new eval(), shell=True or pickle.loads anywhere fails here with the file and line."""

from __future__ import annotations

import ast
import logging
import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path

import ormsgpack
import pytest
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS, JsonPlusSerializer
from langgraph.types import Command

from support.agent_fakes import FakeGPU, ScriptedChatModel, code_answer, decision
from astra_kernels.graph import RunContext, build_graph, recursion_limit
from astra_kernels.graph.checkpoints import CheckpointError, StrictSerializer, sqlite_checkpointer
from astra_kernels import suite
from support.reliability_stub import FaultyEndpoint, Reply

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ["astra_kernels", "tools", "graph", "nodes", "kernels_sglang", "bench", "scripts"]
SHAPES = [{"T": 16, "D": 4096}, {"T": 64, "D": 8192}]

# Calls that run text as code or as a command, or load objects that can run code.
FORBIDDEN = {
    "eval", "exec", "compile", "__import__", "os.system", "os.popen", "os.execv", "os.execve", "os.execl",
    "os.execlp", "os.execvp", "os.spawnl", "os.spawnv", "os.startfile", "pickle.load", "pickle.loads",
    "pickle.Unpickler", "marshal.load", "marshal.loads", "shelve.open", "yaml.load", "yaml.unsafe_load",
    "dill.load", "dill.loads", "cloudpickle.load", "cloudpickle.loads", "torch.load", "numpy.load", "np.load",
}
# Modules that start processes, each with an argument list (never a shell command line) of its
# own making: pip on a build machine (nothing of the agent imports that script), this package's own
# compiler child (sources go down a pipe, not into argv), compute-sanitizer running this package's
# own child module on a request file it wrote.
# nvcc.py runs nvcc on a file it wrote, with the flags of CompileOptions (a template adds only allowlisted ones);
# bench/multi_gpu.py runs this package's own `astra tune` with its own benchmark's arguments.
SUBPROCESS_USERS = {"scripts/build_wheelhouse.py", "tools/toolchain/compiler_process.py",
                    "tools/measuring/tool_process.py",  # memcheck and ncu over this package's own module: flags and paths
                    "tools/toolchain/nvcc.py", "bench/multi_gpu.py",
                    "scripts/sweep_tables.py",  # `astra tune`/`bench` per GPU: kernel names, numbers and paths only
                    "astra_kernels/jobs/peer_builds.py"}  # this package's own module; the shapes go by stdin
# Unpickling of what the same module pickled into a private temporary folder for its own child.
UNPICKLERS = {"tools/measuring/sanitizer.py", "tools/measuring/nsight.py"}
# Names that would carry a model's text (a kernel source, an answer) into a command line.
MODEL_TEXT = {"source", "code", "answer", "content", "text", "messages", "rationale"}


def _modules():
    for folder in SHIPPED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_no_shipped_module_evaluates_text_runs_a_shell_or_unpickles():
    found = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _dotted(node.func)
            if called in FORBIDDEN and not (called.startswith("pickle.") and name in UNPICKLERS):
                found.append(f"{name}:{node.lineno}: {called}()")
            shell = next((k for k in node.keywords if k.arg == "shell"), None)
            if shell is not None and not (isinstance(shell.value, ast.Constant) and shell.value.value is False):
                found.append(f"{name}:{node.lineno}: {called}(shell=...)")
    assert not found, "code execution from text:\n" + "\n".join(found)


def _argv(call: ast.Call, tree: ast.AST) -> ast.List | None:
    """The list display a process is started with: given inline, or assigned to the name given."""
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
    if isinstance(first, ast.Name):
        bound = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == first.id for t in n.targets)]
        first = bound[0] if len(bound) == 1 else None
    if isinstance(first, ast.BinOp):  # [*base, "--dest", ...] + [...] style concatenations
        first = first.left
    return first if isinstance(first, ast.List) else None


def test_processes_are_started_by_few_modules_with_argument_lists_free_of_model_text():
    users, importers, problems = set(), [], []
    for name, tree in _modules():
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("subprocess", "pty", "pexpect") for n in names):
                users.add(name)
            if any("build_wheelhouse" in n for n in names):
                importers.append(name)
            starts = ("subprocess.run", "subprocess.Popen", "subprocess.check_call", "subprocess.check_output")
            if isinstance(node, ast.Call) and _dotted(node.func) in starts:
                argv = _argv(node, tree)
                if argv is None:
                    problems.append(f"{name}:{node.lineno}: not started with an argument list")
                    continue
                mentioned = {n.id for n in ast.walk(argv) if isinstance(n, ast.Name)} | {
                    n.attr for n in ast.walk(argv) if isinstance(n, ast.Attribute)}
                if mentioned & MODEL_TEXT:
                    problems.append(f"{name}:{node.lineno}: argv uses {sorted(mentioned & MODEL_TEXT)}")
    assert users <= SUBPROCESS_USERS, f"new modules start processes: {sorted(users - SUBPROCESS_USERS)}"
    assert importers == [] and not problems, problems


def test_dynamic_imports_take_only_names_of_the_suites_own_folders():
    """astra_kernels/suite and peers.py import a kernel's modules by name: the name is checked against the
    suite's folders first (and a user's on ASTRA_KERNELS_PATH, whose names must be identifiers),
    and the import is under the suite's package or the user kernels' own, so no text picks a module."""
    sites = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func) == "importlib.import_module":
                arg = node.args[0]
                first = arg.values[0].value if isinstance(arg, ast.JoinedStr) else None
                assert first is not None and (_dotted(first) == "__package__" or (
                    isinstance(first, ast.Call) and _dotted(first.func) == "_package")), \
                    f"{name}:{node.lineno}: import_module of {ast.unparse(arg)}"
                sites.append(name)
    assert sites and set(sites) <= {"astra_kernels/suite/__init__.py", "astra_kernels/jobs/torch_tensors.py"}
    assert suite._package("rmsnorm") == "astra_kernels.kernels_sglang.rmsnorm"
    with pytest.raises(suite.UnknownKernelError):
        suite.load("../../os")


def test_a_users_folder_named_like_a_module_path_is_named_but_never_imported(tmp_path, monkeypatch):
    for name in ("os.path", "my-norm"):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "spec.py").write_text("raise SystemExit('imported')\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "spec.py").write_text("SPEC = None\n")
    monkeypatch.setenv(suite.KERNELS_PATH, str(tmp_path))
    suite.load.cache_clear()
    for name in ("os.path", "my-norm"):  # listed, so a user sees it, but never imported
        with pytest.raises(suite.KernelFolderError, match="must be a Python identifier"):
            suite.load(name)
    assert suite._package("mine") == f"{suite.USER_PACKAGE}.mine"
    with pytest.raises(suite.KernelFolderError, match="defines no SPEC"):
        suite.load("mine")
    suite.load.cache_clear()


class _Marker:
    """A pickle that creates a file when loaded: what a planted checkpoint would carry."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_pickled_checkpoint_value_is_refused_not_loaded(tmp_path):
    marker = tmp_path / "pwned"
    blob = pickle.dumps(_Marker(marker))
    JsonPlusSerializer(pickle_fallback=True).loads_typed(("pickle", blob))
    assert marker.exists()  # the threat is real with a permissive serializer
    marker.unlink()
    with pytest.raises(CheckpointError, match="stored as 'pickle'.*never loaded"):
        StrictSerializer().loads_typed(("pickle", blob))
    with pytest.raises(CheckpointError, match="stored as 'json'"):
        StrictSerializer().loads_typed(("json", b'{"lc": 2, "type": "constructor", "id": ["os", "system"]}'))
    assert not marker.exists()


def _constructor(module: str, name: str, *args) -> ormsgpack.Ext:
    return ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb([module, name, list(args)]))


def test_a_msgpack_object_of_a_module_off_the_safe_list_is_never_built(tmp_path, caplog):
    made = tmp_path / "made-by-a-checkpoint"
    blob = ormsgpack.packb({"stop_reason": _constructor("os", "mkdir", str(made))})
    JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", blob))
    assert made.is_dir()  # LangGraph's permissive mode calls os.mkdir
    made.rmdir()
    with caplog.at_level(logging.WARNING):
        value = StrictSerializer().loads_typed(("msgpack", blob))
    assert not made.exists() and value == {"stop_reason": [str(made)]}  # inert data
    assert "Blocked deserialization of os.mkdir" in caplog.text


def _agent_run(tmp_path, model, thread="t", approve=False, payload=None):
    saver = sqlite_checkpointer(tmp_path / "checkpoints.sqlite")
    ctx = RunContext(chat_model=model, evaluator=FakeGPU(), results=str(tmp_path / "results.sqlite"),
                     tune_sample=12, tune_seconds=20, approve=approve)
    app = build_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": recursion_limit(ctx)}
    payload = payload if payload is not None else {"kernel": "silu_and_mul", "shapes": SHAPES}
    return app, config, app.invoke(payload, config=config, context=ctx)


def test_the_agent_resumes_through_the_strict_checkpointer_with_nothing_blocked(tmp_path, caplog):
    """The state is plain JSON and interrupts are on LangGraph's safe list, so strict mode costs
    the agent nothing: an approval pause and its resume read back whole."""
    answers = ["ready", decision("rewrite"), code_answer("us=1.5"), decision("stop")]
    with caplog.at_level(logging.WARNING):
        app, config, paused = _agent_run(tmp_path, ScriptedChatModel(answers=answers), "approve", approve=True)
        assert paused["__interrupt__"][0].value["candidate"] == 1
        resumed = build_graph().compile(checkpointer=sqlite_checkpointer(tmp_path / "checkpoints.sqlite"))
        ctx = RunContext(chat_model=ScriptedChatModel(answers=answers[3:]), evaluator=FakeGPU(),
                         results=str(tmp_path / "results.sqlite"), approve=True)
        result = resumed.invoke(Command(resume=True), config=config, context=ctx)
    assert [c["verdict"] for c in result["history"]] == ["accepted"]
    assert "Blocked deserialization" not in caplog.text and "unregistered type" not in caplog.text


def test_a_planted_object_in_a_checkpoint_file_stays_inert_on_resume(tmp_path):
    app, config, _ = _agent_run(tmp_path, None)
    made = tmp_path / "made-on-resume"
    with sqlite3.connect(tmp_path / "checkpoints.sqlite") as db:
        row_id, kind, blob = db.execute("SELECT checkpoint_id, type, checkpoint FROM checkpoints "
                                        "ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
        checkpoint = StrictSerializer().loads_typed((kind, blob))
        checkpoint["channel_values"]["stop_reason"] = _constructor("os", "mkdir", str(made))
        db.execute("UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?",
                   (ormsgpack.packb(checkpoint, option=ormsgpack.OPT_NON_STR_KEYS), row_id))
    state = build_graph().compile(checkpointer=sqlite_checkpointer(tmp_path / "checkpoints.sqlite")).get_state(config)
    assert not made.exists() and state.values["stop_reason"] == [str(made)]


def test_a_file_that_is_not_a_checkpoint_database_is_named(tmp_path):
    path = tmp_path / "checkpoints.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(CheckpointError, match=f"checkpoints {path}: file is not a database"):
        sqlite_checkpointer(path)
    assert path.read_bytes() == b"not a database at all" * 100


KEY = "sk-planted-4f1c9e2b7a6d5c3e8b0a1f2e3d4c5b6a"


def _written_files(*roots: Path):
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                yield path


def test_a_planted_key_reaches_no_file_and_no_log_of_astra_optimize(tmp_path):
    """The CLI over the shipped recording with the stub as the model: the key is in the
    environment and sent in every request, and a server error quotes it back. Every file the run
    wrote (checkpoints and their journals, results store, report, kernel, compile cache) and its
    whole output are searched for the key's bytes."""
    rewrite = "// one CTA per row, wider vectors\n" + suite.load("rmsnorm").baseline.source
    echo = Reply(status=500, content="upstream failed", echo_auth=True)
    # round 3's plan meets the echoing error on every attempt the client makes (1 + 4 retries)
    script = ["ready", decision("tune"), decision("rewrite"), f"Wider.\n```cuda\n{rewrite}```", *[echo] * 5]
    out, cache = tmp_path / "out", Path(os.environ["ASTRA_CACHE_DIR"])
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    with FaultyEndpoint(script) as endpoint:
        proc = subprocess.run(
            [sys.executable, "-m", "astra_kernels.cli", "optimize", "rmsnorm", "--replay", "recorded",
             "--shapes", "128x4096,16384x8192", "--model", "openai:stub", "--base-url", endpoint.url,
             "--fixes", "0", "--tune-seconds", "4", "--out", str(out), "--thread", "planted"],
            capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(h["authorization"] == f"Bearer {KEY}" for h in endpoint.headers)  # the key was in use
    report = (out / "report.md").read_text()
    assert "Error code: 500" in report and "[redacted]" in report  # the echoed error was recorded, cut
    assert {"checkpoints.sqlite", "results.sqlite", "report.json", "report.md", "kernels"} <= {
        p.name for p in out.iterdir()}
    for path in _written_files(out, cache):
        assert KEY.encode() not in path.read_bytes(), f"the key is in {path}"
    assert KEY not in proc.stdout and KEY not in proc.stderr


def test_a_key_in_the_base_url_is_not_printed(tmp_path):
    url = f"http://user:{KEY}@127.0.0.1:9/v1?api-key={KEY}"
    proc = subprocess.run([sys.executable, "-m", "astra_kernels.cli", "optimize", "rmsnorm", "--replay", "recorded",
                           "--model", "openai:stub", "--base-url", url, "--timeout", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "did not answer" in proc.stdout
    assert KEY not in proc.stdout + proc.stderr
    for path in _written_files(tmp_path):
        assert KEY.encode() not in path.read_bytes(), path


def test_a_key_in_the_model_object_or_the_run_config_reaches_no_checkpoint(tmp_path):
    """In Python: a key given to the model object, and one passed in `configurable` (which LangGraph
    copies into every checkpoint's metadata), are not in the checkpoint or results files."""
    with FaultyEndpoint(["ready", decision("tune"), Reply(status=500, content="x", echo_auth=True)]) as endpoint:
        model = ChatOpenAI(model="stub", base_url=endpoint.url, api_key=KEY, max_retries=0, timeout=10)
        ctx = RunContext(chat_model=model, evaluator=FakeGPU(), results=str(tmp_path / "results.sqlite"),
                         tune_sample=12, tune_seconds=20, out=str(tmp_path / "out"), max_retries=0)
        app = build_graph().compile(checkpointer=sqlite_checkpointer(tmp_path / "checkpoints.sqlite"))
        config = {"configurable": {"thread_id": "cfg", "openai_api_key": KEY, "note": f"Bearer {KEY}"},
                  "recursion_limit": recursion_limit(ctx)}
        result = app.invoke({"kernel": "silu_and_mul", "shapes": SHAPES}, config=config, context=ctx)
    assert endpoint.headers[0]["authorization"] == f"Bearer {KEY}"
    assert any("[redacted]" in e for e in result["report"]["events"])
    assert app.get_state(config).values["best"] == result["best"]  # the thread still resolves
    for path in _written_files(tmp_path):
        assert KEY.encode() not in path.read_bytes(), path
