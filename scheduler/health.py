"""Health and metrics over HTTP: ``/healthz`` and ``/metrics`` (Prometheus).

``/healthz`` answers 200 ``{"status": "healthy", ...}`` while the broker and the
store both answer, and 503 ``{"status": "degraded", ...}`` with the one that
does not; the checks run in the background every ``interval`` seconds, so a
probe never waits on a dead service. ``/metrics`` is the process's Prometheus
registry.

The worker's metrics are defined here, once (their names are part of the
operator interface: the README lists them and ``etc/grafana-dashboard.json``
graphs them; keep them stable). Counters are exposed with Prometheus'
``_total`` suffix, durations are histograms in seconds:

* ``scheduler_decisions_total{outcome}``: placed, no_valid_host, invalid, error.
* ``scheduler_decision_seconds``: the deciding of one request alone (refresh,
  filter, weigh, pick, claim), without the wait for the engine.
* ``scheduler_engine_wait_seconds``: how long a request waited for the engine
  (one decision at a time per worker process) before its own began (every
  taker of the engine's lock is counted: explain, a scrape of the view).
* ``scheduler_claim_conflicts_total``: claims another worker's claim beat.
* ``scheduler_hosts_rejected_total{reason}``: hosts the decisions removed, by
  reason (:mod:`scheduler.engine.reasons` and the filters' ``REASON``).
* ``scheduler_no_valid_host_reasons_total{reason}``: NoValidHost decisions, by
  each reason that removed hosts in them.
* ``scheduler_preemptions_total``: requests placed by evicting lower-priority
  preemptible instances (one per preempting claim the store took).
* ``scheduler_preemption_victims_total{priority_class}``: the instances those
  preemptions evicted, by the victim's priority class (``-`` for none).
* ``scheduler_resource_capacity{resource_class}``,
  ``scheduler_resource_used{resource_class}`` and ``scheduler_hosts{state}``
  (up, down, disabled): the cloud as the worker's host view holds it, read at
  scrape time (:class:`ViewCollector`). Every worker exports the same
  cloud: aggregate them with ``max``, not ``sum``.
* ``scheduler_dependency_up{dependency}``: 1 while the broker / the store answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler import rules
from scheduler.log import RepeatLimiter, get_logger

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView

LOG = get_logger(__name__)
#: A scrape every few seconds while the store is away: a few warnings a minute at most.
REPEATS = RepeatLimiter()

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

DECISIONS = Counter("scheduler_decisions", "Scheduling decisions, by outcome.", ["outcome"])
DECISION_SECONDS = Histogram(
    "scheduler_decision_seconds",
    "Time deciding one request (refresh, filter, weigh, pick, claim), without the wait "
    "for the engine (scheduler_engine_wait_seconds).",
    buckets=_BUCKETS,
)
ENGINE_WAIT_SECONDS = Histogram(
    "scheduler_engine_wait_seconds",
    "Time a request waited for the engine (one decision at a time per worker process) "
    "before its own decision began.",
    buckets=_BUCKETS,
)
CLAIM_CONFLICTS = Counter(
    "scheduler_claim_conflicts", "Claims the store refused because another claim got there first."
)
HOSTS_REJECTED = Counter(
    "scheduler_hosts_rejected",
    "Hosts the decisions removed, by reason (each host once per instance decided, under "
    "the first reason that removed it).",
    ["reason"],
)
NO_VALID_HOST_REASONS = Counter(
    "scheduler_no_valid_host_reasons",
    "NoValidHost decisions, by each reason that removed hosts in them.",
    ["reason"],
)
PREEMPTIONS = Counter(
    "scheduler_preemptions",
    "Requests placed by evicting lower-priority preemptible instances (one per "
    "preempting claim the store took).",
)
PREEMPTION_VICTIMS = Counter(
    "scheduler_preemption_victims",
    "Instances evicted by preemptions, by the victim's priority class ('-' for none).",
    ["priority_class"],
)
DEPENDENCY_UP = Gauge("scheduler_dependency_up", "1 while a dependency answers.", ["dependency"])

#: The gauges :class:`ViewCollector` exports: name -> (help, label).
VIEW_GAUGES = {
    "scheduler_resource_capacity": (
        "Capacity per resource class over every provider, (total - reserved) x "
        "allocation_ratio, as the worker's host view holds it.",
        "resource_class",
    ),
    "scheduler_resource_used": (
        "Usage per resource class over every provider, as the worker's host view holds it.",
        "resource_class",
    ),
    "scheduler_hosts": (
        "Compute hosts by state: up (and enabled), down (and enabled), disabled (up or down).",
        "state",
    ),
}
HOST_STATES = ("up", "down", "disabled")


class _Waits(threading.local):
    seconds = 0.0


_WAITS = _Waits()


class EngineLock(AbstractContextManager["EngineLock"]):
    """The engine's lock (one decision at a time per process), timing each wait
    for it: :data:`ENGINE_WAIT_SECONDS` observes every wait, and
    :func:`take_engine_wait` gives the calling thread's waits since its last call,
    so a decision's time can be told apart from its wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> EngineLock:
        start = time.perf_counter()
        self._lock.acquire()
        waited = time.perf_counter() - start
        ENGINE_WAIT_SECONDS.observe(waited)
        _WAITS.seconds += waited
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


def take_engine_wait() -> float:
    """Seconds the calling thread waited for an :class:`EngineLock` since its last
    call (0 on its first), and start counting afresh."""
    waited, _WAITS.seconds = _WAITS.seconds, 0.0
    return waited


def view_totals(view: HostView, now: float, service_down_time: float) -> dict[str, dict[str, int]]:
    """Per gauge of :data:`VIEW_GAUGES`, its value per label: capacity and usage per
    resource class (hosts' and child providers' summed), hosts per state
    (up / down judged by :func:`rules.is_up`, as the engine does)."""
    classes = view.resource_classes
    capacity = view.capacity.sum(axis=1) if view.size else np.zeros(len(classes))
    used = view.used.sum(axis=1) if view.size else np.zeros(len(classes))
    if view.kid_size:
        capacity = capacity + view.kid_capacity.sum(axis=1)[: len(capacity)]
        used = used + view.kid_used.sum(axis=1)[: len(used)]
    up = rules.is_up(now, view.last_seen, service_down_time)
    disabled = view.disabled.astype(bool)
    return {
        "scheduler_resource_capacity": {
            rc: int(c) for rc, c in zip(classes, capacity, strict=False)
        },
        "scheduler_resource_used": {rc: int(u) for rc, u in zip(classes, used, strict=False)},
        "scheduler_hosts": {
            "up": int((up & ~disabled).sum()),
            "down": int((~up & ~disabled).sum()),
            "disabled": int(disabled.sum()),
        },
    }


class ViewCollector(Collector):
    """The cloud's capacity, usage and hosts per state, read from the engine's
    host view (caught up with the store first) at scrape time."""

    def __init__(
        self,
        fresh_view: Callable[[], AbstractContextManager[HostView]],
        service_down_time: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fresh_view = fresh_view
        self._down_time = service_down_time
        self._clock = clock

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(n, h, labels=[label]) for n, (h, label) in VIEW_GAUGES.items()]

    def collect(self) -> Iterator[Metric]:
        try:
            with self._fresh_view() as view:
                totals = view_totals(view, self._clock(), self._down_time)
        except Exception as exc:  # noqa: BLE001 - the rest of /metrics must still answer
            # The store is away (scheduler_dependency_up says so): no gauges
            # rather than stale ones, and no failed scrape.
            REPEATS.log(LOG, "warning", "view_metrics_unavailable", error=str(exc))
            return
        for name, (help_text, label) in VIEW_GAUGES.items():
            family = GaugeMetricFamily(name, help_text, labels=[label])
            for value_label, value in totals[name].items():
                family.add_metric([value_label], value)
            yield family


_VIEW_COLLECTOR: list[ViewCollector] = []


def export_view(
    fresh_view: Callable[[], AbstractContextManager[HostView]], service_down_time: float
) -> None:
    """Export the :data:`VIEW_GAUGES` of this engine's view on the process's
    registry (in place of any exported before: one engine per process)."""
    collector = ViewCollector(fresh_view, service_down_time)
    if _VIEW_COLLECTOR:
        REGISTRY.unregister(_VIEW_COLLECTOR.pop())
    REGISTRY.register(collector)
    _VIEW_COLLECTOR.append(collector)


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


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that answers whole bodies, never cached, and logs no request
    (probes and page polls every few seconds would flood the log)."""

    def send_body(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


def serve(monitor: HealthMonitor, host: str, port: int) -> ThreadingHTTPServer:
    """Start the HTTP endpoint on a daemon thread; returns the server (port 0: any)."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/healthz":
                healthy, body = monitor.report()
                code = 200 if healthy else 503
                self.send_body(code, "application/json", json.dumps(body).encode())
            elif self.path == "/metrics":
                self.send_body(200, CONTENT_TYPE_LATEST, generate_latest())
            else:
                self.send_body(404, "text/plain", b"not found\n")

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    LOG.info("health_endpoint", address=f"http://{host}:{server.server_address[1]}/healthz")
    return server
