"""Health and metrics over HTTP: ``/healthz`` and ``/metrics`` (Prometheus).

``/healthz`` answers 200 ``{"status": "healthy", ...}`` while the broker and the
store both answer, and 503 ``{"status": "degraded", ...}`` with the one that
does not; the checks run in the background every ``interval`` seconds, so a
probe never waits on a dead service. ``/metrics`` is the process's Prometheus
registry (decisions, their latency, NoValidHost count, claim conflicts).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from scheduler.log import get_logger

LOG = get_logger(__name__)

DECISIONS = Counter("scheduler_decisions", "Scheduling decisions, by outcome.", ["outcome"])
DECISION_SECONDS = Histogram(
    "scheduler_decision_seconds",
    "Time to decide (and claim) one request.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
CLAIM_CONFLICTS = Counter(
    "scheduler_claim_conflicts", "Claims the store refused because another claim got there first."
)
DEPENDENCY_UP = Gauge("scheduler_dependency_up", "1 while a dependency answers.", ["dependency"])


def broker_probe(transport_url: Any, timeout: float = 2.0) -> Callable[[], bool]:
    """A TCP connect to each broker host of a parsed ``TransportURL``; True if one answers.

    Cheap and independent of oslo.messaging's own (hidden) connection state:
    a broker that accepts no TCP connection is certainly down for the worker.
    The in-process ``fake`` transport is always up.
    """
    hosts = [(h.hostname, h.port or 5672) for h in transport_url.hosts if h.hostname]
    if transport_url.transport == "fake" or not hosts:
        return lambda: True

    def probe() -> bool:
        for host, port in hosts:
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    return True
            except OSError:
                continue
        return False

    return probe


class HealthMonitor:
    """Runs the dependency checks in the background and keeps their last answer."""

    def __init__(self, checks: dict[str, Callable[[], bool]], interval: float = 2.0) -> None:
        self._checks = checks
        self._interval = interval
        self._state = {name: True for name in checks}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)

    def start(self) -> None:
        self.check_now()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def check_now(self) -> None:
        for name, check in self._checks.items():
            try:
                up = bool(check())
            except Exception:  # noqa: BLE001 - a failing check means "down"
                up = False
            if up != self._state[name]:
                if up:
                    LOG.warning("dependency_up", dependency=name)
                else:
                    LOG.warning("dependency_down", dependency=name)
            self._state[name] = up
            DEPENDENCY_UP.labels(name).set(1 if up else 0)

    def report(self) -> tuple[bool, dict[str, Any]]:
        healthy = all(self._state.values())
        return healthy, {
            "status": "healthy" if healthy else "degraded",
            **{name: "up" if up else "down" for name, up in self._state.items()},
            "checked_at": time.time(),
        }

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.check_now()


def serve(monitor: HealthMonitor, host: str, port: int) -> ThreadingHTTPServer:
    """Start the HTTP endpoint on a daemon thread; returns the server (port 0: any)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/healthz":
                healthy, body = monitor.report()
                self._send(200 if healthy else 503, "application/json", json.dumps(body).encode())
            elif self.path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest())
            else:
                self._send(404, "text/plain", b"not found\n")

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # probes every few seconds would flood the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    LOG.info("health_endpoint", address=f"http://{host}:{server.server_address[1]}/healthz")
    return server
