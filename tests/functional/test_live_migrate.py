"""Live migration end to end over RabbitMQ and Redis: the source's allocation
parked on a migration consumer, a destination selected (scheduler.select_
destinations notified) and claimed, pre-checks on both computes, the VM off
the source and on the destination; an admin-named host, refusals, a failed
pre-check that tries the alternate, one that leaves nothing to try, and a
delete while the migration is in flight."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from bench.nodes import wait_until
from compute_sim.hosts import provider_uuid
from conductor_stub.tasks.delete import Deleter
from scheduler.exceptions import MaxRetriesExceeded
from scheduler.render import render_instance
from scheduler.rpc import ComputeClient
from scheduler.service import ServiceResolver
from tests.fixtures.resize import amounts, boot_one, holdings
from tests.functional.conftest import Cluster


def live_migrate(cluster: Cluster, uuid: str, *args: str) -> dict[str, Any]:
    """``conductor-stub live-migrate UUID --wait --json ...``; the instance as it ended."""
    code, stdout, stderr = cluster.conductor_stub(
        "live-migrate", uuid, "--wait", "--json", "--timeout", "60", *args, timeout=120
    )
    assert code in (0, 1), stderr[-4000:]
    return {"exit_code": code, **json.loads(stdout)}


def refused(cluster: Cluster, *args: str) -> str:
    """Run a live-migrate that must be refused; its one line of error."""
    code, stdout, stderr = cluster.conductor_stub("live-migrate", *args)
    assert (code, stdout) == (2, ""), (code, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_live_migrate_to_a_chosen_host_then_to_a_named_one(
    cluster: Cluster, notifications: Any
) -> None:
    cluster.start_conductor()
    # The boot goes to the roomier host (RAM weigher); the migration must leave it.
    cluster.start_compute(
        1, "--memory-mb", "131072", "--aggregate", "src:availability_zone=src", name="src"
    )
    dst = cluster.start_compute(1, "--aggregate", "dst:availability_zone=dst", name="dst")
    cluster.start_worker()
    uuid = boot_one(cluster, "m1.small")["uuid"]
    before = holdings(cluster)
    assert before == {uuid: {"src-0000": amounts("m1.small")}}

    # Bad input: one line, exit 2, nothing changed (an unknown uuid and a wrong
    # state are refused as these are: see the unit tests of LiveMigrator.start).
    assert "requires an admin context" in refused(cluster, uuid, "--host", "dst-0000")
    assert "needs another host" in refused(cluster, uuid, "--host", "src-0000", "--admin")
    record = cluster.store.get_instance(uuid)
    assert (record.state, record.host, record.migration_uuid) == ("ACTIVE", "src-0000", None)
    assert holdings(cluster) == before

    moved = live_migrate(cluster, uuid, "--block-migration")

    assert (moved["exit_code"], moved["state"], moved["host"], moved["fault"]) == (
        0,
        "ACTIVE",
        "dst-0000",
        None,
    ), moved
    assert moved["availability_zone"] == "dst"
    assert holdings(cluster) == {uuid: {"dst-0000": amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {"dst-0000"}}
    record = cluster.store.get_instance(uuid)
    assert (record.migration_uuid, record.source_host, record.deadline) == (None, None, None)
    assert record.task_state is None and record.block_migration is False
    [check] = [
        e for e in dst.log_events() if e.get("event") == "check_can_live_migrate_destination"
    ]
    assert check["block_migration"] is True
    wait_until(
        lambda: (
            Counter(n["event_type"] for n in notifications())["scheduler.select_destinations.end"]
            == 1
        ),  # the boot went through run_instance
        what="scheduler.select_destinations.end",
    )
    ends = [
        n["payload"]
        for n in notifications()
        if n["event_type"] == "scheduler.select_destinations.end"
    ]
    assert ends[-1]["hosts"] == ["dst-0000"]
    starts = Counter(n["event_type"] for n in notifications())
    assert starts["scheduler.select_destinations.start"] == 1

    # An admin names the way back: the named host still passes the claim.
    back = live_migrate(cluster, uuid, "--host", "src-0000", "--admin")

    assert (back["exit_code"], back["state"], back["host"], back["fault"]) == (
        0,
        "ACTIVE",
        "src-0000",
        None,
    ), back
    assert (back["availability_zone"], back["requested_host"]) == ("src", None)
    assert holdings(cluster) == {uuid: {"src-0000": amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {"src-0000"}}


def test_a_failed_pre_check_tries_the_alternate_and_none_left_goes_back(
    cluster: Cluster, notifications: Any
) -> None:
    cluster.start_conductor()
    # Roomiest first: the boot goes to src; of the destinations, bad weighs
    # best and fails its pre-check, good takes the alternate.
    cluster.start_compute(1, "--memory-mb", "262144", name="src")
    bad = cluster.start_compute(
        1, "--memory-mb", "131072", "--live-migration-fail-rate", "1", name="bad"
    )
    cluster.start_compute(1, name="good")
    cluster.start_worker()
    uuid = boot_one(cluster, "m1.small")["uuid"]

    moved = live_migrate(cluster, uuid)

    assert (moved["exit_code"], moved["state"], moved["host"], moved["fault"]) == (
        0,
        "ACTIVE",
        "good-0000",
        None,
    ), moved
    # The failed destination and the one that worked, as a rescheduled build counts.
    assert (moved["tried_hosts"], moved["attempts"]) == (["bad-0000"], 2)
    assert holdings(cluster) == {uuid: {"good-0000": amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {"good-0000"}}
    failed = [e for e in bad.log_events() if e.get("event") == "live_migration_precheck_failed"]
    assert len(failed) == 1 and failed[0]["released"] is True, failed
    assert cluster.store.get_provider(provider_uuid("bad-0000")).usages == {}
    conductor = next(p for p in cluster.processes if p.name == "conductor")
    assert conductor.count("live_migration_rescheduled") == 1

    # Named to the failing host: no alternate to try, back ACTIVE where it was.
    stayed = live_migrate(cluster, uuid, "--host", "bad-0000", "--admin")

    assert (stayed["exit_code"], stayed["state"], stayed["host"], stayed["fault"]) == (
        1,
        "ACTIVE",
        "good-0000",
        MaxRetriesExceeded.USER_MESSAGE,
    ), stayed
    assert "pre-check failure on the destination" in stayed["fault_details"], stayed
    assert stayed["tried_hosts"] == ["bad-0000"]
    assert holdings(cluster) == {uuid: {"good-0000": amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {"good-0000"}}
    record = cluster.store.get_instance(uuid)
    assert (record.migration_uuid, record.requested_destination, record.deadline) == (
        None,
        None,
        None,
    )
    assert cluster.store.get_provider(provider_uuid("bad-0000")).usages == {}


def test_a_live_migration_in_flight_is_deleted(cluster: Cluster, transport: Any) -> None:
    cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", "131072", name="src")
    # The destination's pre-check takes long: the delete (sent from here, not
    # from a process that takes seconds to start) comes in the middle.
    slow = cluster.start_compute(1, "--build-time", "5", name="slow")
    cluster.start_worker()
    uuid = boot_one(cluster, "m1.small")["uuid"]
    code, _, stderr = cluster.conductor_stub("live-migrate", uuid)
    assert code == 0, stderr
    slow.wait_for("check_can_live_migrate_destination")
    record = cluster.store.get_instance(uuid)
    assert (record.state, record.task_state) == ("MIGRATING", "migrating")
    assert holdings(cluster) == {
        uuid: {"slow-0000": amounts("m1.small")},
        record.migration_uuid: {"src-0000": amounts("m1.small")},
    }
    shown = render_instance(cluster.store, uuid, admin=False)  # what ``show`` prints
    assert f"live migration  from src-0000; migration {record.migration_uuid}" in shown, shown
    assert "slow-0000" not in shown, shown  # the destination is admin-only

    deleter = Deleter(cluster.store, ComputeClient(transport, ServiceResolver(cluster.store)))
    deleter.delete(uuid)
    left, timed_out = deleter.wait([uuid], timeout=30)

    assert (left, timed_out) == ([], False)
    assert cluster.store.get_instance(uuid).state == "DELETED"
    assert holdings(cluster) == {}
    wait_until(
        lambda: slow.count("live_migration_cancelled_by_delete") == 1,
        timeout=40,
        what="the pre-check cancelled",
    )
    assert cluster.running_vms() == {}
