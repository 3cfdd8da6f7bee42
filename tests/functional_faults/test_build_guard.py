"""Builds that cannot be doubled: a compute builds only while the store holds
the instance's claim on that very host (and its record still waits for the
build), checked when the build starts and again before the VM starts.

* A duplicated build cast arriving after the first attempt failed (and the
  instance was rescheduled elsewhere) is dropped, not taken for a new attempt
  built with no claim.
* A compute frozen (SIGSTOP) longer than the conductor's build timeout but
  shorter than ``service_down_time`` with builds in flight: the conductor
  ends them ERROR "The request timed out." and releases their claims; the
  thawed host drops every one of those builds instead of running VMs with no
  allocation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from compute_sim.hosts import provider_uuid
from scheduler import rpc
from scheduler.exceptions import RequestTimedOut
from scheduler.objects import ERROR, AllocationRequest, RequestSpec, Selection
from scheduler.service import ServiceResolver
from tests.functional_faults.conftest import FaultCluster, Process, wait_until
from tests.functional_faults.storm import start_storm

#: Seed of the flaky compute's draws at fail rate 0.5: the first build fails
#: (0.134), the second would succeed (0.847).
FIRST_FAILS_SEED = "1"
#: The compute events that end one build cast there (or drop it).
BUILD_ENDS = ("build_succeeded", "build_failed", "step_refused")


def ends(proc: Process, uuid: str) -> int:
    """How many build casts for ``uuid`` ``proc`` has finished or dropped."""
    return sum(
        1
        for e in proc.log_events()
        if e.get("event") in BUILD_ENDS and e.get("instance_uuid") == uuid
    )


@pytest.fixture
def compute_client(cluster: FaultCluster, transport: Any) -> Iterator[rpc.ComputeClient]:
    yield rpc.ComputeClient(transport, ServiceResolver(cluster.store))


@pytest.mark.timeout(120)
def test_a_duplicate_build_after_a_failed_attempt_builds_nothing(
    cluster: FaultCluster, compute_client: rpc.ComputeClient
) -> None:
    cluster.write_config(conductor={"build_timeout": 20, "sweep_interval": 0.5})
    cluster.start_conductor()
    # The flaky host is the bigger, so the scheduler tries it first.
    flaky = cluster.start_compute(
        1, "--fail-rate", "0.5", "--seed", FIRST_FAILS_SEED, "--vcpus", "32", name="flaky"
    )
    cluster.start_compute(1, "--vcpus", "8", "--memory-mb", "16384", name="steady")
    cluster.start_worker()
    out = cluster.boot("--count", "1", "--flavor", "m1.tiny", timeout=60)
    assert out["summary"]["states"] == {"ACTIVE": 1}, out
    [record] = list(cluster.store.scan_instances())
    assert record.host == "steady-0000" and "flaky-0000" in record.tried_hosts, record
    assert ends(flaky, record.uuid) == 1  # the first attempt, failed there

    # The first build cast, delivered again to the flaky host: its request,
    # its selection, its request id.
    assert record.request_spec is not None
    spec = RequestSpec.from_primitive(dict(record.request_spec))
    first = Selection(
        host="flaky-0000",
        node="flaky-0000",
        provider_uuid=provider_uuid("flaky-0000"),
        allocation_request=AllocationRequest(
            {provider_uuid("flaky-0000"): spec.resources}, spec.project_id, spec.user_id
        ),
        weight=0.0,
    )
    ctxt = rpc.RequestContext(
        request_id=record.request_id, project_id=spec.project_id, user_id=spec.user_id
    )
    compute_client.build_and_run_instance(ctxt, record.uuid, spec, first, [])
    wait_until(lambda: ends(flaky, record.uuid) == 2, 30, "the duplicate handled")

    assert flaky.refused("build_and_run_instance") == 1
    assert cluster.running_vms() == {record.uuid: {"steady-0000"}}
    again = cluster.store.get_instance(record.uuid)
    assert (again.state, again.host) == ("ACTIVE", "steady-0000")
    print("\nduplicate build after a failure:", json.dumps({"dropped": 1, "second_vms": 0}))
    cluster.check_accounting()


@pytest.mark.timeout(150)
def test_a_compute_frozen_past_the_build_timeout_builds_none_of_the_abandoned(
    cluster: FaultCluster,
) -> None:
    cluster.write_config(
        scheduler={"service_down_time": 60},
        compute={"heartbeat_interval": 1},
        conductor={"build_timeout": 3, "sweep_interval": 0.5, "max_redrives": 0},
    )
    conductor = cluster.start_conductor()
    # Each build runs from its cast's arrival: longer than the whole storm's
    # claims can take on a loaded machine, so that every build is still in
    # flight when the compute stops (with 2 s, "every build timed out" failed
    # once under load: the first builds could finish before the freeze).
    frozen = cluster.start_compute(4, "--build-time", "8", name="frozen")
    cluster.start_worker()
    storm = start_storm(cluster, 12, senders=1)
    # Every instance claimed on the compute: their builds are in flight there.
    wait_until(
        lambda: {c.uuid for c in cluster.store.list_consumers()} == set(storm.uuids),
        30,
        "every build claimed",
        interval=0.05,
    )
    frozen.pause()
    try:
        wait_until(
            lambda: all(r.state == ERROR for r in storm.records()),
            30,
            "every build timed out",
            interval=0.2,
        )
    finally:
        frozen.resume()
    records = storm.records()
    assert {r.fault for r in records} == {RequestTimedOut.USER_MESSAGE}
    assert cluster.store.list_consumers() == [], "the conductor released every claim"
    # Thawed: each build cast it had taken (or still queued) ends there.
    wait_until(
        lambda: all(ends(frozen, u) >= 1 for u in storm.uuids), 30, "the thawed builds ended"
    )
    running = cluster.running_vms()
    figures = {
        "instances": len(storm.uuids),
        "timed_out": len(records),
        "builds_dropped": frozen.refused("build_and_run_instance"),
        "vms_without_allocation": sum(1 for u in storm.uuids if u in running),
        "late_results_released": conductor.count("late_build_result_released")
        + frozen.count("late_build_result_released"),
    }
    print("\ncompute frozen past the build timeout:", json.dumps(figures))
    assert figures["vms_without_allocation"] == 0, running
    assert frozen.count("build_succeeded") == 0
    cluster.check_accounting()
