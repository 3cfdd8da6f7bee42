"""The dashboard's HTTP server: the page, and the JSON it polls.

``GET /`` is the page (``index.html``, plain HTML and JavaScript from this
package: no build step); ``GET /api/state`` is
:meth:`~scheduler.dashboard.state.StateSource.get`, for a caller that presents
the token (``Authorization: Bearer TOKEN``; the page reads it from its URL's
fragment, which no server or proxy log sees). Read-only: nothing here writes.
Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import hmac
import json
import threading
from http.server import ThreadingHTTPServer
from importlib import resources

from scheduler.dashboard.state import StateSource
from scheduler.health import QuietHandler
from scheduler.log import RepeatLimiter, get_logger

LOG = get_logger(__name__)
#: The same failure at every poll (the store away): a few warnings a minute at most.
REPEATS = RepeatLimiter()


def page() -> bytes:
    """The page, as the package holds it."""
    return resources.files("scheduler.dashboard").joinpath("index.html").read_bytes()


def make_server(source: StateSource, token: str, host: str, port: int) -> ThreadingHTTPServer:
    """The server (not yet serving; port 0: any free one)."""
    html = page()
    expected = f"Bearer {token}".encode()

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self.send_body(200, "text/html; charset=utf-8", html)
            elif path == "/api/state":
                given = self.headers.get("Authorization", "").encode()
                if not hmac.compare_digest(given, expected):
                    self.send_body(
                        401, "application/json", b'{"error": "a valid token is needed"}'
                    )
                    return
                try:
                    body = json.dumps(source.get()).encode()
                except Exception as exc:  # noqa: BLE001 - the page says what failed
                    REPEATS.log(LOG, "warning", "dashboard_state_failed", error=str(exc))
                    body = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
                    self.send_body(503, "application/json", body)
                    return
                self.send_body(200, "application/json", body)
            else:
                self.send_body(404, "text/plain", b"not found\n")

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True)
    thread.start()
    return thread
