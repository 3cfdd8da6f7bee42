"""The worker's health and metrics endpoint, on a real worker process."""

from __future__ import annotations

import json
import urllib.request

from bench.nodes import free_port
from tests.functional.conftest import Cluster


def test_worker_reports_healthy_and_exposes_metrics(cluster: Cluster) -> None:
    port = free_port()
    cluster.write_config(scheduler={"health_port": port})
    cluster.start_conductor()
    cluster.start_compute(3)
    worker = cluster.start_worker()
    worker.wait_for("health_endpoint")
    cluster.boot("--count", "2")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        assert response.status == 200
        body = json.loads(response.read())
    assert (body["status"], body["broker"], body["store"]) == ("healthy", "up", "up")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert 'scheduler_dependency_up{dependency="broker"} 1.0' in text
    assert 'scheduler_decisions_total{outcome="placed"} 2.0' in text
    assert "scheduler_decision_seconds_count 2.0" in text
