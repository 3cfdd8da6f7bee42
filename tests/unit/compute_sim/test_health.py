"""A compute whose reports fail for longer than ``report_max_age`` says so in
its health endpoint and its metrics (:mod:`compute_sim.health`)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

from prometheus_client import REGISTRY

from compute_sim.cmd import _report_loop
from compute_sim.health import ReportFreshness
from scheduler import health
from scheduler.exceptions import StoreUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_reports_that_fail_past_the_report_age_are_stale() -> None:
    clock = Clock()
    freshness = ReportFreshness(30.0, clock)
    freshness.reported()
    clock.now += 29
    freshness.failed(StoreUnavailable(reason="down"))
    assert freshness.fresh() and freshness.failures == 1
    clock.now += 2
    assert not freshness.fresh() and freshness.age() == 31
    freshness.reported()
    assert freshness.fresh() and freshness.age() == 0


def test_the_health_endpoint_and_metrics_say_the_reports_are_stale() -> None:
    clock = Clock()
    freshness = ReportFreshness(30.0, clock)
    freshness.export()
    monitor = health.HealthMonitor({"reports": freshness.fresh}, interval=60)
    server = health.serve(monitor, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monitor.check_now()
        assert json.load(urllib.request.urlopen(f"{url}/healthz"))["reports"] == "up"
        failed_before = REGISTRY.get_sample_value("compute_reports_failed_total") or 0
        freshness.failed(StoreUnavailable(reason="down"))
        clock.now += 31
        monitor.check_now()
        try:
            urllib.request.urlopen(f"{url}/healthz")
            raise AssertionError("a stale compute answered 200")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            body: dict[str, Any] = json.load(exc)
        assert body["status"] == "degraded" and body["reports"] == "down"
        assert REGISTRY.get_sample_value("compute_reports_stale") == 1
        assert REGISTRY.get_sample_value("compute_report_age_seconds") == 31
        assert REGISTRY.get_sample_value("compute_reports_failed_total") == failed_before + 1
    finally:
        server.shutdown()
        server.server_close()


def test_the_report_loop_counts_a_failed_report() -> None:
    stop = threading.Event()

    class Broken:
        freshness = ReportFreshness(60.0)

        def report_instances(self) -> None:
            stop.set()
            raise RuntimeError("a report that cannot be written")

    _report_loop(Broken(), 0.01, stop)  # type: ignore[arg-type]
    assert Broken.freshness.failures == 1
