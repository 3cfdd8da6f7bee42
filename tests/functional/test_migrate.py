"""Cold migration end to end over RabbitMQ and Redis: a resize to the
instance's own flavor, to a host the scheduler picks with the instance's own
request spec (its server group included) or to one an admin names, then
confirm or revert; and the requests refused before anything moves."""

from __future__ import annotations

from typing import Any

import pytest

from bench.nodes import wait_until
from tests.fixtures.resize import amounts, boot_one, holdings
from tests.functional.conftest import Cluster


def migrate(cluster: Cluster, uuid: str, *args: str) -> dict[str, Any]:
    return cluster.resize(uuid, *args, command="migrate")


def three_hosts(cluster: Cluster) -> None:
    """big (weighed first), mid, small: each its own compute process."""
    cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", "262144", name="big")
    cluster.start_compute(1, "--memory-mb", "131072", name="mid")
    cluster.start_compute(1, "--memory-mb", "65536", name="small")
    cluster.start_worker()


@pytest.mark.parametrize("finish, ends_on", [("--confirm", "mid-0000"), ("--revert", "big-0000")])
def test_migrate_then_confirm_or_revert(
    cluster: Cluster, notifications: Any, finish: str, ends_on: str
) -> None:
    three_hosts(cluster)
    uuid = boot_one(cluster, "m1.small")["uuid"]
    assert holdings(cluster) == {uuid: {"big-0000": amounts("m1.small")}}

    moved = migrate(cluster, uuid, "--wait")

    # Never the source; of the others, the RAM weigher's choice; its own flavor.
    assert (moved["exit_code"], moved["state"], moved["host"], moved["new_flavor"]) == (
        0,
        "RESIZED",
        "mid-0000",
        "m1.small",
    ), moved
    migration = cluster.store.get_instance(uuid).migration_uuid
    assert migration is not None
    assert holdings(cluster) == {
        uuid: {"mid-0000": amounts("m1.small")},
        migration: {"big-0000": amounts("m1.small")},
    }

    done = migrate(cluster, uuid, finish)

    assert (done["exit_code"], done["state"], done["host"], done["flavor"]) == (
        0,
        "ACTIVE",
        ends_on,
        "m1.small",
    ), done
    assert holdings(cluster) == {uuid: {ends_on: amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {ends_on}}
    # The move's decision is published as every decision is, naming the migration.
    wait_until(
        lambda: any(
            n["event_type"] == "scheduler.select_destinations.end"
            and n["payload"].get("migration_uuid") == migration
            for n in notifications()
        ),
        what="the migration's select_destinations.end",
    )
    (end,) = [
        n["payload"]
        for n in notifications()
        if n["event_type"] == "scheduler.select_destinations.end"
        and n["payload"].get("migration_uuid") == migration
    ]
    assert end["hosts"] == ["mid-0000"] and end["instance_uuids"] == [uuid]


def test_an_admin_names_the_destination(cluster: Cluster) -> None:
    three_hosts(cluster)
    uuid = boot_one(cluster, "m1.small")["uuid"]

    moved = migrate(cluster, uuid, "--host", "small-0000", "--admin", "--confirm")

    # The weigher prefers mid; the admin's host wins, through the filters and claim.
    assert (moved["exit_code"], moved["state"], moved["host"]) == (0, "ACTIVE", "small-0000")
    assert holdings(cluster) == {uuid: {"small-0000": amounts("m1.small")}}
    record = cluster.store.get_instance(uuid)
    assert record.requested_destination is None
    assert "requested_destination" not in (record.request_spec or {})


def test_a_migration_keeps_the_instance_s_server_group(cluster: Cluster) -> None:
    three_hosts(cluster)
    booted = cluster.boot("--count", "2", "--group-policy", "anti-affinity")
    on = {i["host"]: i["uuid"] for i in booted["instances"]}
    assert sorted(on) == ["big-0000", "mid-0000"], booted

    moved = migrate(cluster, on["big-0000"], "--confirm")

    # mid would weigh best, but holds the other member: the group forbids it.
    assert (moved["exit_code"], moved["state"], moved["host"]) == (0, "ACTIVE", "small-0000")


def test_bad_migrations_are_refused_and_change_nothing(cluster: Cluster) -> None:
    three_hosts(cluster)
    uuid = boot_one(cluster, "m1.small")["uuid"]
    before = (cluster.store.get_instance(uuid), holdings(cluster))
    unknown = "00000000-0000-4000-8000-000000000000"
    cases = [
        (("migrate", uuid, "--host", "mid-0000"), "requires an admin context"),
        (("migrate", uuid, "--host", "big-0000", "--admin"), "already runs on big-0000"),
        (("migrate", unknown), unknown),
    ]
    for args, message in cases:
        code, stdout, stderr = cluster.conductor_stub(*args)
        assert (code, stdout) == (2, ""), (args, stderr)
        assert message in stderr and len(stderr.strip().splitlines()) == 1, (args, stderr)
    assert (cluster.store.get_instance(uuid), holdings(cluster)) == before

    # A RESIZED instance cannot be migrated again until confirmed or reverted.
    assert migrate(cluster, uuid, "--wait")["state"] == "RESIZED"
    code, _, stderr = cluster.conductor_stub("migrate", uuid)
    assert code == 2 and "not ACTIVE" in stderr, stderr
