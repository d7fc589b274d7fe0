"""LangGraph Studio's server runs the agent: `langgraph dev` serves langgraph.json's graph, and a run
through its REST API (the calls Studio itself makes) replays the shipped rmsnorm recording, with plain
context values only, and ends with the recording's own figures."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from astra_kernels import suite
from astra_kernels.suite import recordings

ROOT = Path(__file__).resolve().parents[2]
SPEC = suite.load("rmsnorm").spec
SHAPES = [{"T": 128, "H": 4096}, {"T": 16384, "H": 8192}]
STARTUP_S = 60
RUN_S = 300  # a cold compile cache on two busy cores: about a minute

pytestmark = pytest.mark.slow


def _langgraph() -> str:
    beside = Path(sys.executable).parent / "langgraph"  # the one installed with this interpreter's packages
    found = str(beside) if beside.is_file() else shutil.which("langgraph")
    if found is None:
        pytest.fail("the `langgraph` command is missing: install the test extra (pip install -e '.[test]'), "
                    "which brings langgraph-cli[inmem]")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`langgraph dev` in its own process group, its output in a log file."""

    def __init__(self, tmp_path: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / "langgraph-dev.log"
        self._log = open(self.log_path, "wb")
        # From the repository root: langgraph.json's paths are relative to the working directory.
        self.process = subprocess.Popen(
            [_langgraph(), "dev", "--host", "127.0.0.1", "--port", str(self.port), "--no-browser", "--no-reload",
             "--config", str(ROOT / "langgraph.json")],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            # The served context takes paths only under a root (nodes/context.py StudioContext): the
            # tests' folders are beside this one, under pytest's base folder.
            env={**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
                 "ASTRA_STUDIO_ROOT": str(tmp_path.parent)})

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-20000:]

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"`langgraph dev` exited with {self.process.returncode} before serving:\n{self.log()}")
            try:
                if self.call("GET", "/ok", timeout=2).get("ok"):
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        pytest.fail(f"`langgraph dev` did not answer GET /ok within {STARTUP_S} s:\n{self.log()}")

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        request = urllib.request.Request(self.url + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path} answered {exc.code}: {exc.read()[:2000]!r}") from exc

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


@pytest.fixture(scope="module")
def _served(tmp_path_factory):
    """One server for the module's tests: starting one takes a while on two busy cores."""
    running = Server(tmp_path_factory.mktemp("langgraph-dev"))
    try:
        running.wait_until_up()
        yield running
    finally:
        running.stop()


@pytest.fixture
def server(_served):
    yield _served
    # Captured, so pytest shows it only when the test failed.
    print(f"--- langgraph dev log ({_served.log_path}) ---\n{_served.log()}")


def _recorded(recording: Path, tmp_path: Path) -> dict[str, dict]:
    """Per shape label: the recording's baseline time and every template time it holds (bf16, the
    run's dtype; not the finalists' re-timings, which a search stores apart)."""
    copy = tmp_path / "recording.sqlite"
    copy.write_bytes(gzip.decompress(recording.read_bytes()))
    figures: dict[str, dict] = {}
    with sqlite3.connect(copy) as db:
        rows = db.execute("SELECT which, shape, config, median_us FROM results WHERE status = 'ok' "
                          "AND dtype = 'bf16' AND which IN ('baseline', 'template')")
        for which, shape, config, us in rows:
            entry = figures.setdefault(SPEC.label(json.loads(shape)), {"baseline": None, "template": {}})
            if which == "baseline":
                entry["baseline"] = us
            else:
                entry["template"][json.dumps(json.loads(config), sort_keys=True)] = us
    return figures


def _wait_run(server: Server, thread: str, assistant: str, input: dict, context: dict) -> dict:
    return server.call("POST", f"/threads/{thread}/runs/wait",
                       {"assistant_id": assistant, "input": input, "context": context}, timeout=RUN_S)


def test_langgraph_dev_serves_the_agent_and_replays_the_recording(server, tmp_path):
    found = server.call("POST", "/assistants/search", {"graph_id": "astra"})
    assert [a["graph_id"] for a in found] == ["astra"], found
    assistant = found[0]["assistant_id"]
    schemas = server.call("GET", f"/assistants/{assistant}/schemas")
    # What Studio draws its forms from: the input (kernel, shapes) and the plain context fields.
    assert {"kernel", "shapes", "dtype"} <= set((schemas.get("input_schema") or {}).get("properties", {})), schemas
    assert "replay" in schemas["context_schema"]["properties"]

    recording = recordings.find("rmsnorm").path
    digest = hashlib.sha256(recording.read_bytes()).hexdigest()
    results, out = tmp_path / "work" / "results.sqlite", tmp_path / "work" / "out"
    context = {"replay": "recorded", "tune_seconds": 4, "results": str(results), "out": str(out)}
    thread = server.call("POST", "/threads", {})["thread_id"]
    final = _wait_run(server, thread, assistant, {"kernel": "rmsnorm", "shapes": SHAPES}, context)

    assert "__error__" not in final, final["__error__"]
    report = final["report"]
    assert report is not None, final.get("stop_reason")
    assert report["best"]["origin"] == "tune" and report["geomean_speedup"] > 1.0, report["stop_reason"]
    recorded = _recorded(recording, tmp_path)
    assert [row["shape"] for row in report["shapes"]] == [SPEC.label(s) for s in SHAPES]
    for row in report["shapes"]:
        figures = recorded[row["shape"]]
        assert row["baseline_us"] == figures["baseline"]  # the recording's own figure, not an estimate
        assert row["best_us"] == figures["template"][json.dumps(row["config"], sort_keys=True)]
        assert row["best_us"] <= row["baseline_us"]
    # The run's store is a working copy in the run's results path; the shipped recording is untouched.
    assert results.is_file() and hashlib.sha256(recording.read_bytes()).hexdigest() == digest
    assert json.loads((out / "report.json").read_text()) == report
    state = server.call("GET", f"/threads/{thread}/state")
    assert state["values"]["report"] == report and not state["next"]

    # What a person types into Studio's form is checked: a wrong shape is named, not a KeyError.
    thread = server.call("POST", "/threads", {})["thread_id"]
    bad = _wait_run(server, thread, assistant, {"kernel": "rmsnorm", "shapes": [{"tokens": 128}]}, context)
    assert "is not a rmsnorm shape" in json.dumps(bad), bad


def test_an_unknown_kernel_comes_back_as_the_projects_own_message(server, tmp_path):
    """LangGraph's server shows a node's exception to the client only for a few builtin types and
    replaces any other's message with "An internal error occurred": a kernel name typed into
    Studio's form must come back as the suite's own message, naming the kernels it has."""
    with pytest.raises(suite.UnknownKernelError) as raised:
        suite.load("nosuch")
    message = str(raised.value)
    assert "nosuch" in message and "rmsnorm" in message, message
    assistant = server.call("POST", "/assistants/search", {"graph_id": "astra"})[0]["assistant_id"]
    thread = server.call("POST", "/threads", {})["thread_id"]
    context = {"replay": "recorded", "tune_seconds": 4, "results": str(tmp_path / "results.sqlite")}
    answer = _wait_run(server, thread, assistant, {"kernel": "nosuch"}, context)
    text = json.dumps(answer)
    assert "An internal error occurred" not in text, answer
    assert message in text, answer


def test_a_context_outside_the_working_root_comes_back_refused_by_name(server, tmp_path):
    """Any client of the server (a web page in the user's browser too: it answers CORS `*`) sets the
    context: a path outside the root or a model server elsewhere is refused with the field's name."""
    assistant = server.call("POST", "/assistants/search", {"graph_id": "astra"})[0]["assistant_id"]
    for field, value in (("out", "/etc/astra"), ("base_url", "http://attacker.example/v1")):
        thread = server.call("POST", "/threads", {})["thread_id"]
        context = {"replay": "recorded", "results": str(tmp_path / "results.sqlite"), field: value}
        text = json.dumps(_wait_run(server, thread, assistant, {"kernel": "rmsnorm"}, context))
        assert f"Studio context: {field} " in text, text
    assert not Path("/etc/astra").exists()
