"""The health endpoint: healthy while every check answers, degraded (503) when
one does not, healthy again after; metrics in Prometheus' text format."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import oslo_messaging
import pytest

from scheduler import conf as conf_mod
from scheduler import health


def get(server: Any, path: str) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture
def switch() -> dict[str, bool]:
    return {"store": True}


@pytest.fixture
def endpoint(switch: dict[str, bool]) -> Iterator[tuple[Any, health.HealthMonitor]]:
    monitor = health.HealthMonitor(
        {"store": lambda: switch["store"], "broker": lambda: True}, interval=3600
    )
    monitor.start()
    server = health.serve(monitor, "127.0.0.1", 0)
    yield server, monitor
    server.shutdown()
    monitor.stop()


def test_degraded_while_a_dependency_is_down_and_healthy_after(
    endpoint: tuple[Any, health.HealthMonitor], switch: dict[str, bool]
) -> None:
    server, monitor = endpoint
    code, body = get(server, "/healthz")
    assert (code, json.loads(body)["status"]) == (200, "healthy")
    switch["store"] = False
    monitor.check_now()
    code, body = get(server, "/healthz")
    assert code == 503
    assert json.loads(body) | {"checked_at": 0} == {
        "status": "degraded",
        "store": "down",
        "broker": "up",
        "checked_at": 0,
    }
    switch["store"] = True
    monitor.check_now()
    assert get(server, "/healthz")[0] == 200


def test_a_check_that_raises_counts_as_down(switch: dict[str, bool]) -> None:
    def boom() -> bool:
        raise ConnectionError("refused")

    monitor = health.HealthMonitor({"store": boom})
    monitor.check_now()
    assert monitor.report()[0] is False


def test_metrics_are_exposed(endpoint: tuple[Any, health.HealthMonitor]) -> None:
    health.DECISIONS.labels("placed").inc()
    code, body = get(endpoint[0], "/metrics")
    assert code == 200
    assert b'scheduler_decisions_total{outcome="placed"}' in body
    assert b"scheduler_decision_seconds_bucket" in body
    assert get(endpoint[0], "/nope")[0] == 404


def test_broker_probe_follows_the_transport_url() -> None:
    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    open_port = listener.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()

    def probe(url: str) -> bool:
        return health.broker_probe(
            oslo_messaging.TransportURL.parse(conf_mod.CONF, url), timeout=1
        )()

    try:
        assert probe(f"rabbit://u:p@127.0.0.1:{open_port}/")
        assert not probe(f"rabbit://u:p@127.0.0.1:{closed_port}/")
        assert probe(f"rabbit://u:p@127.0.0.1:{closed_port},u:p@127.0.0.1:{open_port}/")
        assert probe("fake://")
    finally:
        listener.close()
