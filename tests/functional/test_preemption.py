"""Preemption end to end: a high-priority boot on a full cloud evicts a
preemptible low-priority instance, which the conductor ends through the
delete path before the boot is built on its host (real RabbitMQ, Redis and
processes; see :mod:`conductor_stub.tasks.preempt`); and what the operator
sees of it and of a boot waiting for capacity: ``scheduler-admin
preemptions`` and ``pending``, the metrics, the dashboard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.nodes import free_port, wait_until
from tests.fixtures.cli import admin_cli
from tests.fixtures.metrics import scrape, start_dashboard, value
from tests.functional.chromium import Browser
from tests.functional.conftest import Cluster

CLASSES = {"classes": "on-demand:1000, spot:10:preemptible", "default_class": "on-demand"}
SPOT = ("--flavor", "m1.small", "--extra-spec", "sched:priority_class=spot")


@pytest.mark.timeout(300)
def test_a_high_priority_boot_on_a_full_cloud_evicts_a_spot_instance(
    cluster: Cluster, notifications: Any, versioned_notifications: Any
) -> None:
    cluster.write_config(priority=CLASSES, conductor={"sweep_interval": 0.5})
    cluster.start_conductor()
    # One host, room for two m1.small (2048 MB each; 512 MB reserved).
    cluster.start_compute(1, "--memory-mb", "5000", "--vcpus", "4")
    worker = cluster.start_worker()
    spot = cluster.boot(*SPOT, "--count", "2")
    spot_uuids = [i["uuid"] for i in spot["instances"]]
    assert {i["state"] for i in spot["instances"]} == {"ACTIVE"}

    booted = cluster.boot("--flavor", "m1.small")
    (instance,) = booted["instances"]
    assert instance["state"] == "ACTIVE", booted
    preemptor = cluster.store.get_instance(instance["uuid"])
    assert (preemptor.priority_class, preemptor.victims) == ("on-demand", ())
    records = {r.uuid: r for r in cluster.store.list_instances(spot_uuids)}
    evicted = [r for r in records.values() if r.state == "DELETED"]
    kept = [r for r in records.values() if r.state == "ACTIVE"]
    assert len(evicted) == 1 and len(kept) == 1, records
    (victim,) = evicted
    assert victim.fault == f"preempted by instance {preemptor.uuid}"
    assert victim.preempted_by == preemptor.uuid
    assert preemptor.host == victim.host == kept[0].host

    def preempts(read: Any) -> list[dict[str, Any]]:
        return [n["payload"] for n in read() if n["event_type"] == "scheduler.preempt"]

    wait_until(lambda: preempts(notifications) and preempts(versioned_notifications))
    (legacy,) = preempts(notifications)
    assert legacy["instance_uuid"] == preemptor.uuid
    assert legacy["victims"] == [
        {"instance_uuid": victim.uuid, "priority_class": "spot", "priority": 10}
    ]
    (versioned,) = preempts(versioned_notifications)
    assert versioned["nova_object.name"] == "PreemptionPayload"
    assert versioned["nova_object.data"]["host"] == preemptor.host

    # A spot boot now finds no host and evicts nothing: no lower priority.
    refused = cluster.boot(*SPOT)
    assert [i["state"] for i in refused["instances"]] == ["ERROR"]
    assert cluster.store.get_instance(kept[0].uuid).state == "ACTIVE"
    worker.assert_kept_serving()


@pytest.mark.timeout(300)
def test_in_nova_s_flow_the_conductor_s_build_waits_for_the_victim(cluster: Cluster) -> None:
    """``select_destinations``, then the builds cast by the caller: the build
    cast at once is refused while the victim runs, and the conductor casts it
    again once the victim is DELETED."""
    cluster.write_config(priority=CLASSES, conductor={"sweep_interval": 0.5})
    cluster.start_conductor()
    compute = cluster.start_compute(1, "--memory-mb", "5000", "--vcpus", "4")
    cluster.start_worker()
    spot = cluster.boot(*SPOT, "--count", "2", "--mode", "select_destinations")
    assert {i["state"] for i in spot["instances"]} == {"ACTIVE"}
    booted = cluster.boot("--flavor", "m1.small", "--mode", "select_destinations")
    (instance,) = booted["instances"]
    assert instance["state"] == "ACTIVE", booted
    victims = [
        r
        for r in cluster.store.list_instances([i["uuid"] for i in spot["instances"]])
        if r.state == "DELETED"
    ]
    assert [v.preempted_by for v in victims] == [instance["uuid"]]
    events = [
        (e["event"], e["instance_uuid"])
        for e in compute.log_events()
        if e.get("event") in ("vm_started", "vm_stopped")
    ]
    started = events.index(("vm_started", instance["uuid"]))
    assert ("vm_stopped", victims[0].uuid) in events[:started], events


@pytest.mark.timeout(300)
def test_the_operator_sees_the_preemption_and_the_wait_in_commands_metrics_and_page(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A real preemption and a real PENDING boot: ``scheduler-admin
    preemptions`` and ``pending`` list them, the worker's and the conductor's
    /metrics count them, the dashboard shows them; the wait, once placed, is
    measured."""
    worker_port, conductor_port = free_port(), free_port()
    cluster.write_config(
        priority={**CLASSES, "pending_retry_interval": 3600},
        scheduler={"health_port": worker_port},
        conductor={"sweep_interval": 0.5, "health_port": conductor_port},
    )
    cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", "5000", "--vcpus", "4")
    cluster.start_worker().wait_for("health_endpoint")
    spot = [i["uuid"] for i in cluster.boot(*SPOT, "--count", "2")["instances"]]
    (booted,) = cluster.boot("--flavor", "m1.small")["instances"]
    assert booted["state"] == "ACTIVE", booted
    (victim,) = [r for r in cluster.store.list_instances(spot) if r.state == "DELETED"]
    (kept,) = [u for u in spot if u != victim.uuid]
    # A spot boot finds no host, may evict no one (no lower priority): it waits.
    code, out, err = cluster.conductor_stub("boot", *SPOT, "--wait-for-capacity")
    assert code == 0, err
    waiting = out.strip()
    wait_until(lambda: cluster.store.get_instance(waiting).state == "PENDING")

    out = admin_cli(cluster, "preemptions", "-f", "json")
    assert out.returncode == 0, out.stderr
    (entry,) = json.loads(out.stdout)["preemptions"]
    assert (entry["instance_uuid"], entry["host"]) == (booted["uuid"], "compute-0000")
    assert (entry["priority_class"], entry["priority"]) == ("on-demand", 1000)
    assert entry["victims"] == [{"uuid": victim.uuid, "priority_class": "spot", "priority": 10}]
    out = admin_cli(cluster, "pending", "-f", "value")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == [waiting, "spot", "10"]
    out = admin_cli(cluster, "pending")
    assert out.returncode == 0 and waiting in out.stdout, out.stderr
    assert "1 shown, 1 in the pending index" in out.stdout

    worker = scrape(worker_port)
    assert value(worker, "scheduler_preemptions_total") == 1
    assert value(worker, "scheduler_preemption_victims_total", priority_class="spot") == 1
    wait_until(lambda: value(scrape(conductor_port), "conductor_pending_requests") == 1)

    dashboard, url = start_dashboard(cluster)
    browser = Browser(tmp_path / "chromium")
    try:
        browser.open(url)
        browser.wait_for("document.body && Number(document.body.dataset.polls) >= 1")
        page = browser.evaluate(READ_QUEUE)
        assert page["waiting"] == "1", page
        assert page["preemptions"] == "1", page
        (row,) = page["rows"]
        assert row[1:4] == [booted["uuid"], "compute-0000", "on-demand (1000)"], row
        assert row[4] == f"{victim.uuid} spot (10)", row
    finally:
        browser.close()
        dashboard.terminate()
        dashboard.wait(10)

    # Room made: the waiting boot is placed, and its wait measured.
    code, _, err = cluster.conductor_stub("delete", kept, "--wait", timeout=90)
    assert code == 0, err
    wait_until(lambda: cluster.store.get_instance(waiting).state == "ACTIVE", timeout=60)
    placed = {"outcome": "placed"}
    wait_until(
        lambda: (
            value(scrape(conductor_port), "conductor_pending_wait_seconds_count", **placed) == 1
        ),
        what="the placed wait to be measured",
    )
    assert value(scrape(conductor_port), "conductor_pending_requests") == 0
    out = admin_cli(cluster, "pending")
    assert out.stdout.strip() == "no request waits for capacity (0 in the pending index)"


#: The page's queue figures: the two cards and the rows of its preemptions table.
READ_QUEUE = """(() => {
  const text = (e) => e.textContent.trim();
  const card = (name) => text(document.querySelector(`[data-card="${name}"] .value`));
  return {
    waiting: card("waiting for capacity"),
    preemptions: card("preemptions"),
    rows: [...document.querySelectorAll('#preemptions tbody tr')]
      .filter((r) => !r.querySelector('.empty')).map((r) => [...r.cells].map(text)),
  };
})()"""
