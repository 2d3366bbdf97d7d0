"""A loopback model server for tests: OpenAI chat completions with scripted answers, text and images.

`ModelServer(synthesizer=[...], critic=[...])` is a real HTTP server on 127.0.0.1 (ephemeral port) speaking
POST /v1/chat/completions. A request whose messages carry image_url parts is the critic's, any other the
synthesizer's; each role answers from its own script, one item per request, in order, then from its
`then` function (None: HTTP 599 "script exhausted"). It is a fixture standing in for a model server, not a
model. Script items (made with the helpers below):

    answer(text, usage=..., finish_reason=...)   200 with that message (usage as given, negative or absurd too)
    status(code, body)                           that HTTP status
    hang(seconds)                                accept the request and say nothing for that long (or until the
                                                 server stops), as a hung endpoint does
    a function f(request) -> item                decided from the request (its JSON, role, images)

Every request is kept in `requests` as {role, json, images, bytes}.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"prompt_tokens": 1500, "completion_tokens": 120}


def answer(text: str, usage: dict | None = None, finish_reason: str = "stop") -> tuple:
    return ("answer", text, finish_reason, USAGE if usage is None else usage)


def status(code: int, body: str = "server error") -> tuple:
    return ("status", code, body)


def hang(seconds: float) -> tuple:
    return ("hang", float(seconds))


class ModelServer:
    def __init__(self, synthesizer=(), critic=(), *, then_synthesizer=None, then_critic=None):
        self.scripts = {"synthesizer": list(synthesizer), "critic": list(critic)}
        self.then = {"synthesizer": then_synthesizer, "critic": then_critic}
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                images = sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                             for part in m["content"] if part.get("type") == "image_url")
                role = "critic" if images else "synthesizer"
                request = {"role": role, "json": body, "images": images, "bytes": len(raw)}
                with server._lock:
                    server.requests.append(request)
                    script = server.scripts[role]
                    item = script.pop(0) if script else server.then[role]
                if callable(item):
                    item = item(request)
                if item is None:
                    item = status(599, "script exhausted")
                if item[0] == "hang":
                    server._stopping.wait(item[1])
                    self.close_connection = True
                    return
                if item[0] == "status":
                    code, payload = item[1], item[2].encode()
                else:
                    code = 200
                    payload = json.dumps({"id": "scripted", "object": "chat.completion", "model": body.get("model"),
                                          "choices": [{"index": 0, "finish_reason": item[2],
                                                       "message": {"role": "assistant", "content": item[1]}}],
                                          "usage": item[3]}).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (its read timeout)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def of(self, role: str) -> list[dict]:
        """The requests of one role, in order."""
        with self._lock:
            return [r for r in self.requests if r["role"] == role]

    def __enter__(self) -> "ModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# ----------------------------------------------------------------------------- answers a test composes
def parent_spec(request: dict) -> dict:
    """r*'s spec as the synthesizer's prompt shows it (the JSON line after "as JSON:")."""
    user = request["json"]["messages"][1]["content"]
    return json.loads(user.split("as JSON:\n", 1)[1].split("\n", 1)[0])


def revision(request: dict, k: int) -> str:
    """A well-formed answer: r* with its orientation weight moved to a value of its own (k), nothing else."""
    spec = parent_spec(request)
    spec["terms"]["orientation"]["weight"] = round(0.3 + 0.01 * (k + 1), 3)
    spec.pop("scale", None)
    return json.dumps({"rationale": f"a slightly firmer trunk ({k})", "terms": spec["terms"]})


def is_comparison(request: dict) -> bool:
    return '"preferred"' in request["json"]["messages"][0]["content"]


def said_interval(request: dict) -> float | None:
    """The frame interval the critique prompt states ("one frame every 0.10 s")."""
    text = "".join(p.get("text", "") for p in request["json"]["messages"][1]["content"] if p.get("type") == "text")
    found = re.search(r"one frame every ([0-9.]+) s", text)
    return float(found.group(1)) if found else None
