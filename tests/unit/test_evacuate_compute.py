"""The compute side of an evacuation: the rebuild on the destination (its
result, its failure, its duplicates) and, after an outage, the VMs evacuated
from a host destroyed instead of running twice."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.objects import (
    ACTIVE,
    DELETED,
    REBUILDING,
    RESIZED,
    RESIZING,
    InstanceRecord,
    evacuated_from,
)
from tests.fixtures import simulator
from tests.fixtures.simulator import (
    CTXT,
    INSTANCE,
    MIGRATION,
    rebuild,
)

#: The simulator suite's fixture.
make = simulator.make


def test_a_rebuild_runs_the_vm_and_reports_it_once_then_again_on_a_repeat(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h2")
    rebuild(sim, "h2")
    sim.wait("rebuild_result")
    (_, uuid, migration, host, success), kwargs = sim.conductor.last("rebuild_result")
    assert (uuid, migration, host, success) == (INSTANCE, MIGRATION, "h2", True)
    assert (kwargs["node"], kwargs["availability_zone"]) == ("h2", "z")
    assert sim.sim.hosts_running(INSTANCE) == ["h2"]
    rebuild(sim, "h2")  # the first report may have been lost
    assert sim.conductor.names == ["rebuild_result", "rebuild_result"]
    assert sim.sim.hosts_running(INSTANCE) == ["h2"]


def test_a_failed_rebuild_releases_its_claim_before_handing_back_the_alternates(
    make: Any,
) -> None:
    sim = make(build_time=0.0, fail_hosts=("h2",))
    held: list[bool] = []
    sim.conductor._answers["rebuild_result"] = lambda *a, **k: held.append(
        sim.store.get_consumer(INSTANCE) is not None
    )
    sim.claim(INSTANCE, "h2")
    rebuild(sim, "h2", alternates=("h3",))
    sim.wait("rebuild_result")
    (_, _, _, host, success), kwargs = sim.conductor.last("rebuild_result")
    assert (host, success, held) == ("h2", False, [False])
    assert [a.host for a in kwargs["alternates"]] == ["h3"]  # type: ignore[attr-defined]
    assert sim.sim.hosts_running(INSTANCE) == []


def test_a_rebuild_of_a_deleted_instance_makes_no_vm(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.sim.terminate_instance(CTXT, INSTANCE, "h2")
    rebuild(sim, "h2")
    assert "rebuild_result" not in sim.conductor.names and sim.sim.hosts_running(INSTANCE) == []


def record(state: str, host: str | None, source: str | None = None) -> InstanceRecord:
    return InstanceRecord(uuid=INSTANCE, state=state, host=host, source_host=source)


@pytest.mark.parametrize(
    "found, host, destroyed",
    [
        pytest.param(None, "h1", True, id="gone"),
        pytest.param(record(DELETED, None), "h1", True, id="deleted"),
        pytest.param(record(REBUILDING, "h1", "h1"), "h1", True, id="evacuating-source"),
        pytest.param(record(REBUILDING, "h1", "h1"), "h2", False, id="evacuating-destination"),
        pytest.param(record(ACTIVE, "h2"), "h1", True, id="evacuated"),
        pytest.param(record(ACTIVE, "h1"), "h1", False, id="its-own"),
        pytest.param(record(RESIZING, "h1", "h1"), "h1", False, id="resize-source"),
        pytest.param(record(RESIZED, "h2", "h1"), "h1", False, id="resized-source"),
    ],
)
def test_which_vms_a_host_back_from_an_outage_destroys(
    found: InstanceRecord | None, host: str, destroyed: bool
) -> None:
    assert evacuated_from(found, host) is destroyed


def test_a_heartbeat_after_a_gap_destroys_the_evacuated_vms_first(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.record(state=ACTIVE, host="h1")
    sim.sim.heartbeat()  # no gap: nothing looked at
    assert sim.sim.hosts_running(INSTANCE) == ["h1"]
    sim.store.update_instance(INSTANCE, host="h2")  # evacuated meanwhile
    sim.sim.heartbeat()
    assert sim.sim.hosts_running(INSTANCE) == ["h1"]  # still no gap
    assert sim.sim._last_beat is not None
    sim.sim._last_beat -= sim.sim.service_down_time + 1  # the process was stopped

    sim.sim.heartbeat()

    assert sim.sim.hosts_running(INSTANCE) == []
    assert (
        "build_succeeded" in sim.conductor.names
        and sim.conductor.names.count("build_succeeded") == 1
    )  # never reported
