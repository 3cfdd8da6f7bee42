"""End to end over RabbitMQ and Redis: boots, reschedules, alternates, overflow,
notifications, bad input."""

from __future__ import annotations

import json
import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from bench.nodes import wait_until
from scheduler import rpc
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import Flavor, InstanceRecord, RequestSpec
from tests.functional.conftest import Cluster

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)


def test_boot_100_with_build_failures_all_end_active(cluster: Cluster, notifications: Any) -> None:
    # Eight attempts make an instance's chance of failing them all 0.2**8.
    cluster.write_config(scheduler={"max_attempts": 8})
    cluster.start_conductor()
    compute = cluster.start_compute(
        20, "--fail-rate", "0.2", "--build-time", "0.01", "--availability-zones", "az1"
    )
    worker = cluster.start_worker()

    result = cluster.boot("--count", "100", "--flavor", "m1.small", "--availability-zone", "az1")

    states = Counter(i["state"] for i in result["instances"])
    assert states == {"ACTIVE": 100}, result["summary"]
    # Where each landed, first build or rescheduled: the zone its Selection
    # named, as the compute reported it back, on the conductor's record.
    assert {i["availability_zone"] for i in result["instances"]} == {"az1"}
    records = [cluster.store.get_instance(i["uuid"]) for i in result["instances"]]
    assert {r.availability_zone for r in records} == {"az1"}
    rescheduled = [i for i in result["instances"] if i["attempts"] > 1]
    assert rescheduled, "with a 20% failure rate some builds must have been rescheduled"
    assert compute.count("build_failed") == sum(i["attempts"] - 1 for i in result["instances"])
    # Reschedules went straight to the alternates: the scheduler decided once
    # per instance and saw no other request.
    assert worker.count("instance_scheduled") == 100
    wait_until(
        lambda: (
            sum(n["event_type"] == "scheduler.run_instance.end" for n in notifications()) == 100
        ),
        what="100 run_instance.end",
    )
    starts = [n for n in notifications() if n["event_type"] == "scheduler.run_instance.start"]
    assert len(starts) == 100
    hosts = {i["host"] for i in result["instances"]}
    assert len(hosts) > 10, "spread weighing should use most of the 20 hosts"


def test_select_destinations_returns_primary_and_two_alternates(
    cluster: Cluster, transport: Any
) -> None:
    cluster.start_conductor()
    cluster.start_compute(10, "--availability-zones", "east,west")  # round robin
    # In no zone (the default one), and roomiest: weighed first, so selected.
    cluster.start_compute(2, "--memory-mb", "262144", name="plain")
    cluster.start_worker()
    client = rpc.SchedulerClient(transport)
    spec = RequestSpec(flavor=SMALL, project_id="p", user_id="u", num_instances=3)
    uuids = [str(uuidlib.uuid4()) for _ in range(3)]

    selections = client.select_destinations(rpc.RequestContext(), spec, uuids)

    assert len(selections) == 3
    for uuid, per_instance in zip(uuids, selections, strict=True):
        assert len(per_instance) == 3
        hosts = [s.host for s in per_instance]
        assert len(set(hosts)) == 3, "alternates are other hosts than the primary"
        # Each Selection, alternates too, names the zone of its own host.
        for s in per_instance:
            prefix, number = s.host.rsplit("-", 1)
            zone = "nova" if prefix == "plain" else ("east", "west")[int(number) % 2]
            assert s.availability_zone == zone, s
        consumer = cluster.store.get_consumer(uuid)
        assert consumer is not None, "the primary is claimed"
        assert list(consumer.allocations) == [per_instance[0].provider_uuid]
        for alternate in per_instance[1:]:
            assert alternate.allocation_request.allocations == {
                alternate.provider_uuid: {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
            }
    assert {s.host for per in selections for s in per} >= {"plain-0000", "plain-0001"}
    # Release what the call claimed, as a conductor that gave up would.
    for uuid in uuids:
        assert cluster.store.release(uuid)


def test_select_destinations_mode_boots_through_the_conductor(cluster: Cluster) -> None:
    # The two roomiest hosts fail every build, so the first choices land there
    # and each is rescheduled onto its alternates; five attempts always reach
    # one of the three good hosts. (Failures drawn at random would leave an
    # instance in ERROR in a small share of runs: a flaky test.)
    cluster.start_conductor()
    cluster.start_compute(
        2,
        "--memory-mb",
        "262144",
        "--fail-hosts",
        "bad-0000,bad-0001",
        "--build-time",
        "0.01",
        name="bad",
    )
    cluster.start_compute(3, "--build-time", "0.01", name="good")
    cluster.write_config(scheduler={"max_attempts": 5})
    cluster.start_worker()
    result = cluster.boot("--count", "20", "--mode", "select_destinations")
    assert Counter(i["state"] for i in result["instances"]) == {"ACTIVE": 20}
    assert {i["host"] for i in result["instances"]} <= {"good-0000", "good-0001", "good-0002"}
    records = [cluster.store.get_instance(i["uuid"]) for i in result["instances"]]
    rescheduled = [r for r in records if r.attempts > 1]
    assert rescheduled and all(set(r.tried_hosts) <= {"bad-0000", "bad-0001"} for r in rescheduled)


def test_overfill_ends_the_overflow_in_error_with_generic_fault(
    cluster: Cluster, notifications: Any
) -> None:
    # 4 hosts x (16384 - 512 reserved) MB / 4096 MB per m1.medium = 3 per host.
    cluster.start_conductor()
    cluster.start_compute(4, "--memory-mb", "16384", "--vcpus", "64")
    cluster.start_worker()

    result = cluster.boot("--count", "16", "--flavor", "m1.medium")

    states = Counter(i["state"] for i in result["instances"])
    assert states == {"ACTIVE": 12, "ERROR": 4}, result["summary"]
    errors = [i for i in result["instances"] if i["state"] == "ERROR"]
    assert {i["fault"] for i in errors} == {NoValidHost.USER_MESSAGE}
    record = cluster.store.get_instance(errors[0]["uuid"])
    assert record.fault_details is not None
    assert "0/4 hosts available" in record.fault_details
    assert "insufficient MEMORY_MB" in record.fault_details
    # The user-facing fault names no host.
    assert not any(host in (record.fault or "") for host in ("compute-000",))
    per_host = Counter(i["host"] for i in result["instances"] if i["state"] == "ACTIVE")
    assert max(per_host.values()) == 3
    wait_until(
        lambda: sum(n["priority"] == "ERROR" for n in notifications()) == 4,
        what="four ERROR notifications",
    )
    error_note = next(n for n in notifications() if n["priority"] == "ERROR")
    assert error_note["event_type"] == "scheduler.run_instance"
    assert error_note["payload"]["reason"] == NoValidHost.USER_MESSAGE
    assert "compute-" not in str(error_note["payload"])


def test_notifications_pair_start_with_end(
    cluster: Cluster, notifications: Any, versioned_notifications: Any, transport: Any
) -> None:
    cluster.start_conductor()
    cluster.start_compute(3)
    worker = cluster.start_worker()
    cluster.boot("--count", "4", "--per-request", "2")
    client = rpc.SchedulerClient(transport)
    spec = RequestSpec(
        flavor=Flavor(name="huge", vcpus=1, memory_mb=10**6), project_id="p", user_id="u"
    )
    with pytest.raises(NoValidHost):
        client.select_destinations(rpc.RequestContext(), spec, [str(uuidlib.uuid4())])

    def kinds() -> Counter[str]:
        return Counter(n["event_type"] for n in notifications())

    def versioned_kinds() -> Counter[str]:
        return Counter(n["event_type"] for n in versioned_notifications())

    wait_until(lambda: kinds()["scheduler.select_destinations.end"] == 1, what="notifications")
    wait_until(
        lambda: versioned_kinds()["scheduler.select_destinations.end"] == 1,
        what="versioned notifications",
    )
    seen = kinds()
    assert seen["scheduler.run_instance.start"] == seen["scheduler.run_instance.end"] == 2
    assert seen["scheduler.run_instance.scheduled"] == 4
    assert seen["scheduler.select_destinations.start"] == 1
    assert seen["scheduler.select_destinations"] == 1  # the ERROR one
    # The same in the versioned format, where the failure is <action>.error.
    renamed = {"scheduler.select_destinations": "scheduler.select_destinations.error"}
    assert versioned_kinds() == Counter({renamed.get(e, e): n for e, n in seen.items()})
    publishers = {n["publisher_id"] for n in notifications()}
    assert publishers == {f"scheduler.node-{cluster.ident}"}
    scheduled = [
        n["payload"]
        for n in notifications()
        if n["event_type"] == "scheduler.run_instance.scheduled"
    ]
    assert all(len(p["alternates"]) == 2 for p in scheduled)
    worker.assert_kept_serving()


BAD_SPECS = {
    "missing-flavor": {"project_id": "p", "user_id": "u"},
    "negative-memory": {
        "flavor": {"name": "x", "vcpus": 1, "memory_mb": -5},
        "project_id": "p",
        "user_id": "u",
    },
    "wrong-types": {
        "flavor": {"name": "x", "vcpus": "one", "memory_mb": 1},
        "project_id": 5,
        "user_id": "u",
    },
    "unknown-field": {
        "flavor": {"name": "x", "vcpus": 1, "memory_mb": 1},
        "project_id": "p",
        "user_id": "u",
        "colour": "red",
    },
    "zero-instances": {
        "flavor": {"name": "x", "vcpus": 1, "memory_mb": 1},
        "project_id": "p",
        "user_id": "u",
        "num_instances": 0,
    },
    "ten-thousand-instances": {
        "flavor": {"name": "x", "vcpus": 1, "memory_mb": 1},
        "project_id": "p",
        "user_id": "u",
        "num_instances": 10000,
    },
}


def test_bad_input_is_refused_and_the_worker_keeps_serving(
    cluster: Cluster, transport: Any, notifications: Any
) -> None:
    cluster.start_conductor()
    cluster.start_compute(3)
    worker = cluster.start_worker()
    client = rpc.SchedulerClient(transport)
    ctxt = rpc.RequestContext()

    # A call gets a clear, typed error naming what is wrong.
    for name, spec in BAD_SPECS.items():
        with pytest.raises(InvalidRequest) as err:
            client.call_raw(
                ctxt,
                "select_destinations",
                request_spec=spec,
                instance_uuids=[str(uuidlib.uuid4())],
            )
        assert "invalid request" in str(err.value), name

    # A cast puts the instances in ERROR with the reason, and says so.
    cast_uuids = []
    for spec in BAD_SPECS.values():
        uuid = str(uuidlib.uuid4())
        cluster.store.create_instances([InstanceRecord(uuid=uuid)])
        client.cast_raw(ctxt, "run_instance", request_spec=spec, instance_uuids=[uuid])
        cast_uuids.append(uuid)
    wait_until(
        lambda: all(r.state == "ERROR" for r in cluster.store.list_instances(cast_uuids)),
        what="bad casts to end in ERROR",
    )
    for record in cluster.store.list_instances(cast_uuids):
        assert record.fault and record.fault.startswith("invalid request"), record
    wait_until(
        lambda: sum(n["priority"] == "ERROR" for n in notifications()) >= len(BAD_SPECS),
        what="ERROR notifications",
    )
    assert cluster.store.list_consumers() == [], "nothing was claimed"

    # And then a good request is served.
    result = cluster.boot("--count", "2")
    assert Counter(i["state"] for i in result["instances"]) == {"ACTIVE": 2}
    worker.assert_kept_serving()


def test_two_workers_share_the_topic_without_overcommit(cluster: Cluster) -> None:
    cluster.start_conductor()
    cluster.start_compute(6, "--memory-mb", "16384", "--vcpus", "64")
    cluster.start_worker("worker-a")
    cluster.start_worker("worker-b")
    # 6 hosts x 3 m1.medium fit 18; ask for 24 in parallel requests.
    result = cluster.boot("--count", "24", "--flavor", "m1.medium")
    states = Counter(i["state"] for i in result["instances"])
    assert states == {"ACTIVE": 18, "ERROR": 6}, result["summary"]
    for p in cluster.store.list_providers():
        assert p.usages.get("MEMORY_MB", 0) <= p.inventories["MEMORY_MB"].capacity


def test_one_simulator_serves_a_thousand_hosts(cluster: Cluster) -> None:
    cluster.start_conductor()
    compute = cluster.start_compute(1000, "--build-time", "0.01")
    cluster.start_worker()
    assert len(cluster.store.list_services()) == 1000
    assert {s.rpc_server for s in cluster.store.list_services()} == {
        next(
            e["rpc_server"]
            for e in compute.log_events()
            if e.get("event") == "compute_sim_started"
        )
    }
    result = cluster.boot("--count", "50", "--per-request", "10")
    assert Counter(i["state"] for i in result["instances"]) == {"ACTIVE": 50}
    assert len({i["host"] for i in result["instances"]}) == 50, "spread over empty hosts"


@pytest.mark.timeout(300)
def test_a_flavor_s_priority_class_is_recorded_shown_and_notified(
    cluster: Cluster, versioned_notifications: Any
) -> None:
    """The worker and the conductor read the same ``[priority]`` classes: a
    boot naming one is recorded, listed, shown and notified with it; one
    naming none gets the default; one naming an unknown class is refused in
    one line before anything is recorded or sent."""
    cluster.write_config(
        priority={"classes": "on-demand:1000, spot:10:preemptible", "default_class": "on-demand"}
    )
    cluster.start_conductor()
    cluster.start_compute(2)
    cluster.start_worker()

    spot = cluster.boot("--flavor", "m1.small", "--extra-spec", "sched:priority_class=spot")
    plain = cluster.boot("--flavor", "m1.small")
    (spot_uuid,), (plain_uuid,) = ([i["uuid"] for i in r["instances"]] for r in (spot, plain))
    assert {i["state"] for r in (spot, plain) for i in r["instances"]} == {"ACTIVE"}

    code, out, err = cluster.conductor_stub("show", spot_uuid, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["priority_class"], shown["priority"], shown["preemptible"]) == ("spot", 10, True)
    code, out, err = cluster.conductor_stub("show", spot_uuid)
    assert "  priority    spot (priority 10, preemptible)" in out.splitlines(), out
    code, out, err = cluster.conductor_stub("list", "--json")
    assert code == 0, err
    rows = {r["uuid"]: r for r in json.loads(out)["instances"]}
    assert (rows[plain_uuid]["priority_class"], rows[plain_uuid]["priority"]) == (
        "on-demand",
        1000,
    )
    assert rows[spot_uuid]["priority_class"] == "spot"

    def published() -> dict[str, str | None]:
        """Per instance, the class its run_instance.start named."""
        out: dict[str, str | None] = {}
        for n in versioned_notifications():
            if n["event_type"] != "scheduler.run_instance.start":
                continue
            data = n["payload"]["nova_object.data"]
            chosen = data["request_spec"]["nova_object.data"]["priority_class"]
            out[data["instance_uuids"][0]] = chosen["nova_object.data"]["name"] if chosen else None
        return out

    wait_until(lambda: len(published()) == 2, what="both run_instance.start")
    assert published() == {spot_uuid: "spot", plain_uuid: "on-demand"}

    before = len(cluster.store.list_instances())
    code, out, err = cluster.conductor_stub(
        "boot", "--flavor", "m1.small", "--extra-spec", "sched:priority_class=gold"
    )
    assert (code, out) == (2, "")
    assert (
        err.strip().endswith(
            "flavor.extra_specs 'sched:priority_class' = 'gold': no such priority class is defined"
        )
        and len(err.strip().splitlines()) == 1
    ), err
    assert len(cluster.store.list_instances()) == before
