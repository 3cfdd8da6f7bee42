"""Preemption end to end: a high-priority boot on a full cloud evicts a
preemptible low-priority instance, which the conductor ends through the
delete path before the boot is built on its host (real RabbitMQ, Redis and
processes; see :mod:`conductor_stub.tasks.preempt`)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.nodes import wait_until
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
