"""What the daemons publish, parsed as a consumer written against
``doc/notification_samples/`` would: a boot, a failed boot, a refused boot,
a resize and one that cannot be placed, select_destinations calls (one
placed, one not) and a boot that preempts, over RabbitMQ, in both formats (the default).

Every versioned notification must match its event's sample (every field
present with the sample's type, each object's version its own: see
:func:`tests.notification_samples.check_against_sample`); every legacy one
must have its versioned twin; in each format every ``.start`` has its
``.end``, request by request.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from bench.nodes import wait_until
from conductor_stub.reconcile import RECONCILE_ACTION
from scheduler import rpc
from scheduler.exceptions import NoValidHost
from scheduler.notifications import EVENTS
from scheduler.notifier import versioned_event_type
from scheduler.objects import (
    AllocationRequest,
    Flavor,
    Image,
    InstanceRecord,
    RequestSpec,
    ServerGroup,
)
from tests import notification_samples
from tests.functional.conftest import Cluster

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20, extra_specs={"k": "v"})


def _versioned_name(note: dict[str, Any]) -> str:
    return versioned_event_type(note["priority"].lower(), note["event_type"])


def _unpaired(notes: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Per (request id, action): .starts without their .end (or the reverse)."""
    balance: Counter[tuple[str, str]] = Counter()
    for note in notes:
        parts: list[str] = str(note["event_type"]).split(".")
        if len(parts) == 3 and parts[2] in ("start", "end"):
            balance[(note["request_id"], parts[1])] += 1 if parts[2] == "start" else -1
    return {key: n for key, n in balance.items() if n}


@pytest.mark.timeout(400)
def test_every_notification_of_a_run_parses_against_its_sample(
    cluster: Cluster,
    notifications: Any,
    versioned_notifications: Any,
    transport: Any,
) -> None:
    # Short reconcile deadlines: the orphan claimed below is released (and
    # notified) within seconds.
    cluster.write_config(
        conductor={
            "reconcile_interval": 1.0,
            "orphan_grace": 2.0,
            "report_max_age": 5.0,
            "sweep_interval": 0.5,
        },
        priority={"classes": "on-demand:1000, spot:10:preemptible", "default_class": "on-demand"},
    )
    cluster.start_conductor()
    cluster.start_compute(3, "--memory-mb", "16384")  # m1.xlarge fits nowhere
    worker = cluster.start_worker()
    client = rpc.SchedulerClient(transport)

    # A boot, and one no host can hold.
    booted = cluster.boot("--count", "2", "--flavor", "m1.small")
    assert Counter(i["state"] for i in booted["instances"]) == {"ACTIVE": 2}, booted
    failed = cluster.boot("--count", "1", "--flavor", "m1.xlarge")
    assert [i["state"] for i in failed["instances"]] == ["ERROR"], failed
    # A boot refused as unreadable: its notifications carry no request spec.
    refused = str(uuidlib.uuid4())
    cluster.store.create_instances([InstanceRecord(uuid=refused)])
    client.cast_raw(
        rpc.RequestContext(),
        "run_instance",
        request_spec={"flavor": {"name": "x"}},
        instance_uuids=[refused],
    )
    # A resize, and one no host can hold.
    uuid = booted["instances"][0]["uuid"]
    resized = cluster.resize(uuid, "--flavor", "m1.medium", "--confirm")
    assert (resized["exit_code"], resized["flavor"]) == (0, "m1.medium"), resized
    unplaced = cluster.resize(uuid, "--flavor", "m1.xlarge", "--wait")
    assert (unplaced["state"], unplaced["flavor"]) == ("ACTIVE", "m1.medium"), unplaced
    # select_destinations: one placed (with an image and a group), one not.
    spec = RequestSpec(
        flavor=SMALL,
        project_id="p",
        user_id="u",
        image=Image(id="i-1", properties={"hw_disk_bus": "virtio"}, disk_format="qcow2"),
        group=ServerGroup(uuid=str(uuidlib.uuid4()), policy="soft-anti-affinity"),
    )
    placed = str(uuidlib.uuid4())
    [[primary, *_]] = client.select_destinations(rpc.RequestContext(), spec, [placed])
    huge = spec.replace(flavor=Flavor(name="huge", vcpus=1, memory_mb=10**6))
    with pytest.raises(NoValidHost):
        client.select_destinations(rpc.RequestContext(), huge, [str(uuidlib.uuid4())])
    assert cluster.store.release(placed)  # as a conductor that gave up would
    # A boot that preempts: a spot m1.large on each host (no two fit on one),
    # then an on-demand one that fits only where a spot one is evicted.
    spot = cluster.boot(
        "--count", "3", "--flavor", "m1.large", "--extra-spec", "sched:priority_class=spot"
    )
    assert Counter(i["state"] for i in spot["instances"]) == {"ACTIVE": 3}, spot
    preempting = cluster.boot("--flavor", "m1.large")
    assert [i["state"] for i in preempting["instances"]] == ["ACTIVE"], preempting
    # An allocation no record holds: the conductor's reconciler releases it and
    # notifies scheduler.reconcile.action.
    orphan = str(uuidlib.uuid4())
    root = next(p for p in cluster.store.list_providers() if p.parent_uuid is None)
    cluster.store.claim(orphan, AllocationRequest({root.uuid: {"VCPU": 1}}, "p", "u"))

    def settled() -> bool:
        legacy, versioned = notifications(), versioned_notifications()
        return (
            {n["event_type"] for n in versioned} == set(EVENTS)
            # the last calls' too (the notifier publishes a little after the call returns)
            and any(
                n["event_type"] == "scheduler.select_destinations.end"
                and n["payload"]["nova_object.data"]["instance_uuids"] == [placed]
                for n in versioned
            )
            and not _unpaired(legacy)
            and not _unpaired(versioned)
            and Counter(map(_versioned_name, legacy))
            == Counter(n["event_type"] for n in versioned)
        )

    wait_until(settled, timeout=60, what="every event, each .start with its .end, in both formats")
    legacy, versioned = notifications(), versioned_notifications()
    samples = notification_samples.load()
    assert set(samples) == set(EVENTS)
    for note in versioned:
        notification_samples.check_against_sample(note, samples[note["event_type"]])
    # The worker publishes the scheduling events, the conductor its reconciler's.
    assert {(n["publisher_id"], n["event_type"] == RECONCILE_ACTION) for n in versioned} == {
        (f"scheduler-worker:node-{cluster.ident}", False),
        (f"scheduler-conductor:node-{cluster.ident}", True),
    }
    assert {n["publisher_id"] for n in legacy} == {f"scheduler.node-{cluster.ident}"}
    assert all(n["message_id"] and n["timestamp"] and n["request_id"] for n in versioned)

    # What the run did, as the versioned payloads tell it.
    def data(event_type: str) -> list[dict[str, Any]]:
        return [
            n["payload"]["nova_object.data"] for n in versioned if n["event_type"] == event_type
        ]

    scheduled = data("scheduler.run_instance.scheduled")
    assert {s["selection"]["nova_object.data"]["instance_uuid"] for s in scheduled} == {
        i["uuid"] for i in (*booted["instances"], *spot["instances"])
    }  # the preempting boot is built by the conductor: not "scheduled"
    [preempt] = data("scheduler.preempt")
    assert preempt["instance_uuid"] == preempting["instances"][0]["uuid"]
    [victim] = preempt["victims"]
    assert victim["nova_object.data"]["priority_class"] == "spot"
    assert victim["nova_object.data"]["instance_uuid"] in {i["uuid"] for i in spot["instances"]}
    assert [d["state"] for d in data("scheduler.resize.end")] == ["scheduled", "error"]
    assert {d["request_spec"] is None for d in data("scheduler.run_instance.start")} == {
        True,
        False,
    }
    errors = data("scheduler.run_instance.error")
    kinds = Counter(e["reason"]["nova_object.data"]["exception"] for e in errors)
    assert kinds == {"NoValidHost": 1, "InvalidRequest": 1}, kinds
    [select_end, *_] = [
        d for d in data("scheduler.select_destinations.end") if d["instance_uuids"] == [placed]
    ]
    [selection] = select_end["selections"]
    assert selection["nova_object.data"]["host"] == primary.host
    spec_data = select_end["request_spec"]["nova_object.data"]
    assert spec_data["image"]["nova_object.data"]["properties"] == {"hw_disk_bus": "virtio"}
    assert spec_data["instance_group"]["nova_object.data"]["policy"] == "soft-anti-affinity"
    worker.assert_kept_serving()
