"""An OpenAI-compatible endpoint on 127.0.0.1 that misbehaves on cue, for the reliability suite.

The real langchain-openai client talks to it over HTTP, so every fault takes the path a real
outage would: status codes through the client's retries, bodies through its parsing, a silence
through its timeout, a closed socket through its connection handling. Each request is answered
by the next `Reply` of the script (a plain string is a normal answer); a script that runs out
answers 500, which a test sees as an unexpected extra request.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0  # seconds before answering (past the client's timeout: a timeout)
    body: bytes | None = None  # sent as is instead of a chat completion (HTML, cut-off JSON)
    finish_reason: str = "stop"  # "length": the model hit its output limit
    echo_auth: bool = False  # an error body quoting the request's Authorization header, as some proxies do
    drop: bool = False  # close the connection without a word
    down: bool = False  # drop, and stop listening: every later request finds the port closed


class FaultyEndpoint:
    def __init__(self, script):
        self.script = [Reply(r) if isinstance(r, str) else r for r in script]
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint._lock:
                    endpoint.requests.append(body)
                    endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
                    reply = endpoint.script.pop(0) if endpoint.script else Reply(status=500, content="script ran out")
                time.sleep(reply.delay)
                if reply.drop or reply.down:
                    if reply.down:
                        threading.Thread(target=endpoint.close, daemon=True).start()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                kind = "application/json"
                if reply.body is not None:
                    payload, kind = reply.body, "text/html"
                elif reply.status != 200:
                    said = reply.content
                    if reply.echo_auth:
                        said += f" (you sent {self.headers.get('Authorization')})"
                    payload = json.dumps({"error": {"message": said, "type": "server_error"}}).encode()
                else:
                    payload = json.dumps({
                        "id": "stub", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(payload)))
                    self.send_header("retry-after-ms", "5")  # keep the client's backoff short
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Down: the port stops accepting, as an endpoint that went away mid-run."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FaultyEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
