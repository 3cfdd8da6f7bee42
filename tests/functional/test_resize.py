"""Resize end to end over RabbitMQ and Redis: the allocation parked on a
migration consumer, the new flavor claimed on the destination, prep -> resize
-> finish on the compute nodes, then confirm or revert; a destination that
fails, a resize that cannot be placed, and notifications."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from bench.nodes import wait_until
from compute_sim.hosts import provider_uuid
from scheduler.exceptions import NoValidHost
from scheduler.objects import migration_uuid_for
from tests.fixtures.resize import amounts, boot_one, holdings
from tests.functional.conftest import Cluster


@dataclass(frozen=True)
class ResizeCase:
    name: str
    old: str
    new: str
    finish: str  # --confirm or --revert
    host: str  # where the instance ends
    flavor: str  # with which flavor

    @property
    def zone(self) -> str:
        """The zone it ends in: each host is in a zone of its own."""
        return self.host.split("-")[0]


RESIZE_CASES = [
    ResizeCase("confirm", "m1.small", "m1.medium", "--confirm", "dst-0000", "m1.medium"),
    ResizeCase("revert", "m1.small", "m1.medium", "--revert", "src-0000", "m1.small"),
    ResizeCase("smaller-flavor", "m1.medium", "m1.small", "--confirm", "dst-0000", "m1.small"),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=lambda c: c.name)
def test_resize_then_confirm_or_revert(
    cluster: Cluster, notifications: Any, case: ResizeCase
) -> None:
    cluster.start_conductor()
    # The boot goes to the roomier host (RAM weigher); the resize must leave it.
    cluster.start_compute(
        1, "--memory-mb", "131072", "--aggregate", "src:availability_zone=src", name="src"
    )
    dst = cluster.start_compute(1, "--aggregate", "dst:availability_zone=dst", name="dst")
    cluster.start_worker()
    uuid = boot_one(cluster, case.old)["uuid"]
    assert holdings(cluster) == {uuid: {"src-0000": amounts(case.old)}}
    assert cluster.store.get_instance(uuid).availability_zone == "src"

    resized = cluster.resize(uuid, "--flavor", case.new, "--wait")

    assert (resized["exit_code"], resized["state"], resized["host"]) == (
        0,
        "RESIZED",
        "dst-0000",
    ), resized
    migration = cluster.store.get_instance(uuid).migration_uuid
    assert migration is not None
    # The zone is where the instance is now; the source's is kept for a revert.
    resizing = cluster.store.get_instance(uuid)
    assert (resizing.availability_zone, resizing.source_availability_zone) == ("dst", "src")
    # Both held until the user decides: the source's by the migration.
    assert holdings(cluster) == {
        uuid: {"dst-0000": amounts(case.new)},
        migration: {"src-0000": amounts(case.old)},
    }
    assert [dst.count(step) for step in ("prep_resize", "finish_resize")] == [1, 1]

    finished = cluster.resize(uuid, case.finish)

    assert (finished["exit_code"], finished["state"], finished["host"], finished["flavor"]) == (
        0,
        "ACTIVE",
        case.host,
        case.flavor,
    ), finished
    assert finished["task_state"] is None and finished["fault"] is None
    assert holdings(cluster) == {uuid: {case.host: amounts(case.flavor)}}
    record = cluster.store.get_instance(uuid)
    assert (record.migration_uuid, record.source_host, record.deadline) == (None, None, None)
    assert (record.availability_zone, record.source_availability_zone) == (case.zone, None)
    wait_until(
        lambda: Counter(n["event_type"] for n in notifications())["scheduler.resize.end"] == 1,
        what="scheduler.resize.end",
    )
    ends = [n["payload"] for n in notifications() if n["event_type"] == "scheduler.resize.end"]
    assert ends[0]["host"] == "dst-0000" and ends[0]["migration_uuid"] == migration
    assert Counter(n["event_type"] for n in notifications())["scheduler.resize.start"] == 1


def test_a_destination_that_fails_is_released_before_the_retry_on_an_alternate(
    cluster: Cluster,
) -> None:
    cluster.start_conductor()
    # Roomiest first: the boot goes to src; of the destinations, bad weighs
    # best and fails its prep, good takes the retry.
    cluster.start_compute(1, "--memory-mb", "262144", name="src")
    bad = cluster.start_compute(
        1, "--memory-mb", "131072", "--fail-resize-hosts", "bad-0000", name="bad"
    )
    cluster.start_compute(1, name="good")
    cluster.start_worker()
    uuid = boot_one(cluster, "m1.small")["uuid"]
    assert holdings(cluster) == {uuid: {"src-0000": amounts("m1.small")}}

    resized = cluster.resize(uuid, "--flavor", "m1.large", "--confirm")

    assert (resized["exit_code"], resized["state"], resized["host"], resized["flavor"]) == (
        0,
        "ACTIVE",
        "good-0000",
        "m1.large",
    ), resized
    assert resized["tried_hosts"] == ["bad-0000"]
    assert holdings(cluster) == {uuid: {"good-0000": amounts("m1.large")}}
    failed = [e for e in bad.log_events() if e.get("event") == "prep_resize_failed"]
    assert len(failed) == 1 and failed[0]["released"] is True
    assert cluster.store.get_provider(provider_uuid("bad-0000")).usages == {}
    conductor = next(p for p in cluster.processes if p.name == "conductor")
    assert conductor.count("resize_rescheduled") == 1


@pytest.mark.parametrize(
    ("same_host", "filters"),
    [
        # The source is excluded by the request's own ignored hosts, whatever
        # host filters are enabled; RetryFilter, listed, is warned as not needed.
        pytest.param(False, "ComputeFilter", id="source-excluded"),
        pytest.param(False, "ComputeFilter,RetryFilter", id="source-excluded-retry-filter-listed"),
        pytest.param(True, "ComputeFilter", id="same-host"),
    ],
)
def test_a_resize_with_no_other_host(
    cluster: Cluster, notifications: Any, same_host: bool, filters: str
) -> None:
    cluster.write_config(
        scheduler={"allow_resize_to_same_host": same_host},
        filter_scheduler={"enabled_filters": filters},
    )
    cluster.start_conductor()
    cluster.start_compute(1, name="only")
    worker = cluster.start_worker()
    assert worker.count("host_filter_not_needed") == ("RetryFilter" in filters)
    uuid = boot_one(cluster, "m1.small")["uuid"]

    resized = cluster.resize(uuid, "--flavor", "m1.medium", "--wait")

    if not same_host:
        # Cannot be placed: still ACTIVE on its source, with its allocation, and a fault.
        assert (
            resized["exit_code"],
            resized["state"],
            resized["host"],
            resized["flavor"],
            resized["fault"],
        ) == (1, "ACTIVE", "only-0000", "m1.small", NoValidHost.USER_MESSAGE), resized
        assert "1 host already tried" in resized["fault_details"]
        assert holdings(cluster) == {uuid: {"only-0000": amounts("m1.small")}}
        wait_until(
            lambda: any(
                n["event_type"] == "scheduler.resize" and n["priority"] == "ERROR"
                for n in notifications()
            ),
            what="the resize ERROR notification",
        )
        return
    assert (resized["state"], resized["host"]) == ("RESIZED", "only-0000"), resized
    record = cluster.store.get_instance(uuid)
    assert record.migration_uuid == migration_uuid_for(uuid, record.request_id or "")
    assert holdings(cluster) == {
        uuid: {"only-0000": amounts("m1.medium")},
        record.migration_uuid: {"only-0000": amounts("m1.small")},
    }
    confirmed = cluster.resize(uuid, "--confirm")
    assert (confirmed["state"], confirmed["flavor"]) == ("ACTIVE", "m1.medium")
    assert holdings(cluster) == {uuid: {"only-0000": amounts("m1.medium")}}


def test_an_anti_affinity_member_resizes_in_place(cluster: Cluster) -> None:
    # Two members, one per host: the other host is the other member's, so the
    # instance's own host, where its migration keeps its membership, is the
    # only one the group allows it.
    cluster.write_config(scheduler={"allow_resize_to_same_host": True})
    cluster.start_conductor()
    cluster.start_compute(2)
    cluster.start_worker()
    booted = cluster.boot(
        "--count", "2", "--flavor", "m1.small", "--group-policy", "anti-affinity"
    )
    assert [i["state"] for i in booted["instances"]] == ["ACTIVE", "ACTIVE"], booted
    first, second = booted["instances"]
    assert first["host"] != second["host"]
    group_uuid = cluster.store.get_instance(first["uuid"]).request_spec["group"]["uuid"]

    resized = cluster.resize(first["uuid"], "--flavor", "m1.medium", "--wait")

    assert (resized["exit_code"], resized["state"], resized["host"]) == (
        0,
        "RESIZED",
        first["host"],
    ), resized
    migration = cluster.store.get_instance(first["uuid"]).migration_uuid
    assert migration is not None
    assert holdings(cluster) == {
        first["uuid"]: {first["host"]: amounts("m1.medium")},
        migration: {first["host"]: amounts("m1.small")},
        second["uuid"]: {second["host"]: amounts("m1.small")},
    }
    assert cluster.store.group_hosts(group_uuid) == {first["host"]: 2, second["host"]: 1}

    confirmed = cluster.resize(first["uuid"], "--confirm")

    assert (confirmed["exit_code"], confirmed["state"], confirmed["host"]) == (
        0,
        "ACTIVE",
        first["host"],
    ), confirmed
    assert (confirmed["flavor"], confirmed["fault"]) == ("m1.medium", None), confirmed
    assert holdings(cluster) == {
        first["uuid"]: {first["host"]: amounts("m1.medium")},
        second["uuid"]: {second["host"]: amounts("m1.small")},
    }
    assert cluster.store.group_hosts(group_uuid) == {first["host"]: 1, second["host"]: 1}
