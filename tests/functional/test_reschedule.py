"""Reschedules end to end: an alternate taken meanwhile, retries exhausted, and
alternates off (the conductor asks the scheduler again)."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from bench.nodes import wait_until
from compute_sim.hosts import provider_uuid
from scheduler.exceptions import MaxRetriesExceeded, NoValidHost
from scheduler.objects import AllocationRequest
from tests.fixtures.cli import boot_nowait
from tests.functional.conftest import Cluster


def test_an_alternate_taken_meanwhile_is_skipped_for_the_next(cluster: Cluster) -> None:
    """Nova's bug 1837955: the conductor gave up when the first alternate's
    claim failed; here it goes on to the next one."""
    cluster.start_conductor()
    # The roomiest host is the primary; its build is slow, then fails.
    cluster.start_compute(
        1, "--memory-mb", "262144", "--fail-hosts", "bad-0000", "--build-time", "4", name="bad"
    )
    cluster.start_compute(2, "--build-time", "0.01", name="good")
    worker = cluster.start_worker()
    (uuid,) = boot_nowait(cluster, "--count", "1")
    worker.wait_for("instance_scheduled")
    scheduled = next(e for e in worker.log_events() if e.get("event") == "instance_scheduled")
    assert scheduled["host"] == "bad-0000"
    first, second = scheduled["alternates"]

    # While the primary builds, another tenant fills the first alternate.
    taken = cluster.store.get_provider(provider_uuid(first))
    filler = str(uuidlib.uuid4())
    cluster.store.claim(
        filler,
        AllocationRequest({taken.uuid: {"MEMORY_MB": taken.free("MEMORY_MB")}}, "other", "other"),
    )

    wait_until(
        lambda: cluster.store.get_instance(uuid).state != "BUILDING",
        timeout=30,
        what="the instance to leave BUILDING",
    )
    record = cluster.store.get_instance(uuid)
    assert (record.state, record.host, record.attempts, record.tried_hosts) == (
        "ACTIVE",
        second,
        2,
        ("bad-0000",),
    ), record
    conductor = next(p for p in cluster.processes if p.name == "conductor")
    skipped = [e for e in conductor.log_events() if e.get("event") == "alternate_skipped"]
    assert [(e["alternate"], e["reason"]) for e in skipped] == [(first, "CapacityExceeded")]
    assert cluster.store.get_consumer(uuid).allocations == {  # type: ignore[union-attr]
        provider_uuid(second): {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    }
    assert cluster.store.release(filler)


def test_retries_exhausted_end_in_error_distinct_from_no_valid_host(cluster: Cluster) -> None:
    cluster.start_conductor()
    hosts = [f"all-{i:04d}" for i in range(3)]
    compute = cluster.start_compute(
        3, "--fail-hosts", ",".join(hosts), "--build-time", "0.01", name="all"
    )
    cluster.start_worker()

    result = cluster.boot("--count", "2")

    assert Counter(i["state"] for i in result["instances"]) == {"ERROR": 2}, result
    for instance in result["instances"]:
        assert instance["fault"] == MaxRetriesExceeded.USER_MESSAGE != NoValidHost.USER_MESSAGE
        record = cluster.store.get_instance(instance["uuid"])
        assert record.attempts == 3 and sorted(record.tried_hosts) == hosts
        assert record.fault_details and record.fault_details.startswith("max retries exceeded")
    assert compute.count("build_failed") == 6
    assert cluster.store.list_consumers() == [], "every failed attempt released its claim"
    # Failing hosts are weighed down, never disabled.
    for service in cluster.store.list_services():
        assert not service.disabled and service.failed_builds >= 1, service


@pytest.mark.parametrize(
    "max_attempts, state, host",
    [
        pytest.param(3, "ACTIVE", "good-0000", id="third-host-builds"),
        pytest.param(2, "ERROR", None, id="max-attempts-reached"),
    ],
)
def test_with_alternates_off_the_conductor_asks_the_scheduler_again(
    cluster: Cluster, notifications: Any, max_attempts: int, state: str, host: str | None
) -> None:
    cluster.write_config(
        scheduler={"max_attempts": max_attempts}, conductor={"return_alternates": False}
    )
    cluster.start_conductor()
    # The two roomy hosts weigh best and fail every build.
    cluster.start_compute(
        2,
        "--memory-mb",
        "131072",
        "--fail-hosts",
        "bad-0000,bad-0001",
        "--build-time",
        "0.01",
        name="bad",
    )
    cluster.start_compute(1, "--build-time", "0.01", name="good")
    cluster.start_worker()

    result = cluster.boot("--count", "1")

    (instance,) = result["instances"]
    assert (instance["state"], instance["host"], instance["attempts"]) == (
        state,
        host,
        max_attempts,
    ), result
    record = cluster.store.get_instance(instance["uuid"])
    assert sorted(record.tried_hosts) == ["bad-0000", "bad-0001"]  # both failed
    conductor = next(p for p in cluster.processes if p.name == "conductor")
    asked = [
        e["ignored"]
        for e in conductor.log_events()
        if e.get("event") == "rescheduled_via_scheduler"
    ]
    # Each retry ignores every host tried so far (removed before the candidate step).
    assert [len(ignored) for ignored in asked] == list(range(1, max_attempts))
    wait_until(
        lambda: (
            Counter(n["event_type"] for n in notifications())["scheduler.select_destinations.end"]
            == max_attempts - 1
        ),
        what="the scheduler asked",
    )
    if state == "ERROR":
        assert instance["fault"] == MaxRetriesExceeded.USER_MESSAGE
        assert cluster.store.list_consumers() == []
        return
    # The failing hosts are weighed down, not disabled: the next boot avoids
    # them although they have the most room.
    again = cluster.boot("--count", "1")
    assert [(i["state"], i["host"], i["attempts"]) for i in again["instances"]] == [
        ("ACTIVE", "good-0000", 1)
    ]
    bad = [s for s in cluster.store.list_services() if s.host.startswith("bad")]
    assert [(s.disabled, s.failed_builds) for s in bad] == [(False, 1), (False, 1)]
