"""A local OpenAI-compatible chat endpoint that answers from a script: a test double, not a model.

The agent talks to chat models through langchain-openai. A scripted LangChain model object would
skip that client (its HTTP requests, retries, JSON handling); this server keeps it in the path:
point `RunContext(model="openai:NAME", base_url=stub.url)` at it and the agent's requests travel
over HTTP to 127.0.0.1 exactly as they would to vLLM or OpenAI. The answers are whatever the
script says, so whatever the agent does with them shows its plumbing, never a model's judgement.

    with OpenAIStub(lambda messages: "ready") as stub:
        RunContext(model="openai:scripted", base_url=stub.url)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A script: the request's messages ([{"role": ..., "content": ...}, ...]) -> the answer's text.
Script = Callable[[list[dict]], str]


class OpenAIStub:
    """Serves POST /v1/chat/completions on 127.0.0.1 (a free port) from `script`.

    `script` is a function of the request's messages, or a sequence of answers given in order.
    Every request body is kept in `requests`. An exception in the script, or a sequence that ran
    out, is answered with HTTP 500 and the reason, which the client reports as an API error.
    """

    def __init__(self, script: Script | Sequence[str], model: str = "scripted-stub"):
        if not callable(script):
            answers = list(script)

            def script(messages: list[dict]) -> str:
                if not answers:
                    raise LookupError(f"the script ran out after {len(self.requests) - 1} answer(s)")
                return answers.pop(0)

        self.script, self.model, self.requests = script, model, []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._lock = threading.Lock()  # the script sees requests one at a time, in arrival order
        self._thread = threading.Thread(target=self.server.serve_forever, name="openai-stub", daemon=True)
        self._thread.start()

    def _answer(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(body)
            try:
                text = self.script(body.get("messages", []))
            except Exception as exc:  # a script error must reach the client, not kill the server thread
                return 500, {"error": {"message": f"stub script: {type(exc).__name__}: {exc}", "type": "server_error"}}
        return 200, {
            "id": f"stub-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": self.model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep a notebook's output to what the agent says
                pass

            def do_POST(self):
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": f"the stub serves only chat completions, not {self.path}"}}
                else:
                    status, payload = stub._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "OpenAIStub":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
