"""A real HTTP server on a free port that answers with canned responses, for the smoke test's failures."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    """One answer: a status and a body (a dict is sent as JSON, bytes as they are)."""

    status: int
    body: dict[str, Any] | bytes = b""


@dataclass
class FakeApi:
    """The routes ``(method, path prefix) -> answer``, every request received and every body posted."""

    routes: dict[tuple[str, str], Canned]
    url: str = ""
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)

    def answer(self, method: str, path: str) -> Canned:
        for (route_method, prefix), canned in self.routes.items():
            if route_method == method and path.startswith(prefix):
                return canned
        return Canned(404, {"error": {"code": "NotFound", "message": path}})


@contextmanager
def serve(routes: dict[tuple[str, str], Canned]) -> Iterator[FakeApi]:
    """Serve ``routes`` on 127.0.0.1 (the OS picks the port) until the block ends."""
    api = FakeApi(routes)

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            content = self.rfile.read(length)
            if self.command == "POST":
                api.bodies.append((self.path, content))
            api.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            canned = api.answer(self.command, self.path)
            body = canned.body if isinstance(canned.body, bytes) else json.dumps(canned.body).encode()
            self.send_response(canned.status)
            kind = "text/html" if isinstance(canned.body, bytes) else "application/json"
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply  # http.server dispatches on these names

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
