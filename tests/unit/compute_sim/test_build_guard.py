"""A compute builds (or rebuilds an evacuated instance) only while the store
holds that instance's claim on that very host and its record still waits for
that build: checked when the build starts and again before the VM starts. A
duplicated, stale or late build is dropped: no VM, nothing reported."""

from __future__ import annotations

import time
from typing import Any

import pytest
import structlog

from compute_sim.ledger import BUILD, FAILED, REBUILD
from scheduler.exceptions import StoreUnavailable
from scheduler.objects import BUILDING, DELETING, ERROR, InstanceRecord
from tests.fixtures import simulator
from tests.fixtures.simulator import CTXT, INSTANCE, MIGRATION, SPEC, Sim, rebuild, selection
from tests.unit.factories import uuid_of

#: The simulator suite's fixture.
make = simulator.make


def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def nothing_done(sim: Sim) -> None:
    assert sim.sim.hosts_running(INSTANCE) == []
    assert sim.conductor.names == [] and sim.sim.builds_ok == 0


@pytest.mark.parametrize(
    "state, claim_on",
    [
        pytest.param(BUILDING, "h2", id="claim-on-another-host"),
        pytest.param(BUILDING, None, id="no-claim"),
        pytest.param(ERROR, "h1", id="instance-in-error"),
        pytest.param(DELETING, "h1", id="instance-being-deleted"),
        pytest.param(None, "h1", id="no-record"),
    ],
)
def test_a_build_that_cannot_be_the_live_attempt_is_dropped_at_start(
    make: Any, state: str | None, claim_on: str | None
) -> None:
    sim = make(build_time=0.0)
    if claim_on:
        sim.claim(INSTANCE, claim_on)
    if state is not None:
        sim.record(state=state)
    sim.sim.build_and_run_instance(
        CTXT, INSTANCE, SPEC.to_primitive(), selection("h1").to_primitive(), []
    )
    nothing_done(sim)
    assert (sim.store.get_consumer(INSTANCE) is not None) is (claim_on is not None)


def test_a_duplicate_after_a_failed_attempt_rescheduled_elsewhere_builds_nothing(
    make: Any,
) -> None:
    """Case 2: the first attempt failed on h1 (its claim released) and the
    instance went to h2; a duplicate of the first cast reaches h1 again."""
    sim = make(build_time=0.0, fail_hosts=("h1",))
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("reschedule")
    sim.claim(INSTANCE, "h2")  # the reschedule's claim
    sim.build("h1")  # the duplicate
    assert sim.conductor.names == ["reschedule"] and sim.sim.builds_failed == 1
    assert sim.sim.hosts_running(INSTANCE) == []
    assert sim.store.get_consumer(INSTANCE) is not None, "the live claim is kept"


def test_a_build_whose_claim_went_while_it_ran_makes_no_vm(make: Any) -> None:
    """Case 3: the conductor gave the build up while the host was frozen
    (ERROR, claim released); the thawed host's build finishes."""
    sim = make(build_time=0.2)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.store.update_instance(INSTANCE, state=ERROR, task_state=None)
    sim.store.release(INSTANCE)
    key = (BUILD, "h1", CTXT.request_id)
    until(lambda: sim.sim.ledger.get(INSTANCE, key) == FAILED, "the build dropped")
    nothing_done(sim)
    assert sim.io_ops("h1") == 0, "the dropped build no longer counts as under way"


def test_a_re_driven_build_with_its_claim_builds_and_reports_once(make: Any) -> None:
    sim = make(build_time=0.2)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.build("h1")  # re-driven while under way: ignored
    sim.wait("build_succeeded")
    sim.build("h1")  # re-driven once built: reported again, not built again
    assert sim.conductor.names == ["build_succeeded"] * 2 and sim.sim.builds_ok == 1
    assert sim.sim.hosts_running(INSTANCE) == ["h1"]


# --- an evacuation's rebuild ------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, claim_on",
    [
        pytest.param({}, "h3", id="claim-on-another-host"),
        pytest.param({"migration_uuid": "another-migration"}, "h2", id="another-migration"),
        pytest.param({"state": "ACTIVE"}, "h2", id="evacuation-over"),
    ],
)
def test_a_rebuild_that_cannot_be_the_live_attempt_is_dropped(
    make: Any, changes: dict[str, Any], claim_on: str
) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, claim_on)
    rebuild(sim, "h2", **changes)
    nothing_done(sim)
    assert sim.sim.ledger.get(INSTANCE, (REBUILD, MIGRATION, "h2")) is None, (
        "refused before its ledger"
    )


def test_a_rebuild_whose_claim_went_while_it_ran_makes_no_vm(make: Any) -> None:
    sim = make(build_time=0.2)
    sim.claim(INSTANCE, "h2")
    rebuild(sim, "h2")
    sim.store.release(INSTANCE)  # the conductor gave the evacuation up meanwhile
    until(
        lambda: sim.sim.ledger.get(INSTANCE, (REBUILD, MIGRATION, "h2")) == FAILED,
        "the rebuild dropped",
    )
    nothing_done(sim)


def test_a_build_the_store_cannot_check_is_dropped_and_its_re_drive_builds(
    make: Any, monkeypatch: Any
) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.record()

    def down(uuid: str) -> Any:
        raise StoreUnavailable(reason="restarting")

    monkeypatch.setattr(sim.store, "get_instance", down)
    sim.build("h1")
    nothing_done(sim)
    monkeypatch.undo()
    sim.build("h1")  # the conductor's re-drive, same request id
    sim.wait("build_succeeded")
    assert sim.sim.hosts_running(INSTANCE) == ["h1"] and sim.sim.builds_ok == 1


# --- a request's builds in one cast ---------------------------------------------------


def batched(uuid: str, host: str, *alternates: str) -> dict[str, Any]:
    return {
        "instance_uuid": uuid,
        "selection": selection(host).to_primitive(),
        "host_list": [selection(a).to_primitive() for a in alternates],
    }


def test_each_build_of_a_batch_is_guarded_and_built_as_a_single_one(make: Any) -> None:
    """One cast: the live build builds, one whose claim is elsewhere, one with
    no record and one for a host not served here are dropped, and one that
    fails is handed back with its alternates."""
    sim = make(build_time=0.0, fail_hosts=("h3",))
    live, elsewhere, unknown, stranger, failing = (
        uuid_of(n) for n in ("live", "elsewhere", "unknown", "stranger", "failing")
    )
    sim.store.create_instances(
        InstanceRecord(u, request_spec=SPEC.to_primitive(), request_id=CTXT.request_id)
        for u in (live, elsewhere, stranger, failing)
    )
    for uuid, host in ((live, "h1"), (elsewhere, "h2"), (stranger, "h1"), (failing, "h3")):
        sim.claim(uuid, host)
    with structlog.testing.capture_logs() as logs:
        sim.sim.build_and_run_instances(
            CTXT,
            SPEC.to_primitive(),
            [
                batched(live, "h1"),
                batched(elsewhere, "h1"),
                batched(unknown, "h1"),
                batched(stranger, "h9"),
                batched(failing, "h3", "h2"),
            ],
        )
        sim.wait("build_succeeded")
        sim.wait("reschedule")
    refused = {e["instance_uuid"]: e["why"] for e in logs if e["event"] == "step_refused"}
    assert refused == {
        elsewhere: "no claim on h1",
        unknown: "no instance record",
        stranger: "host h9 is not served here",
    }
    assert sorted(sim.conductor.names) == ["build_succeeded", "reschedule"]
    (_, uuid, *_), _ = sim.conductor.last("build_succeeded")
    assert uuid == live and sim.sim.hosts_running(live) == ["h1"]
    (_, uuid, _, failed_host, _, alternates), _ = sim.conductor.last("reschedule")
    assert (uuid, failed_host, [a.host for a in alternates]) == (failing, "h3", ["h2"])
    assert sim.store.get_consumer(failing) is None, "the failed build's claim released"
    assert all(sim.sim.hosts_running(u) == [] for u in (elsewhere, unknown, stranger, failing))


def test_a_batch_s_guards_are_read_in_one_store_round_trip(make: Any) -> None:
    sim = make(build_time=1.0)  # the builds end after the start is looked at
    uuids = [uuid_of(f"batched-{i}") for i in range(3)]
    sim.store.create_instances(
        InstanceRecord(u, request_spec=SPEC.to_primitive(), request_id=CTXT.request_id)
        for u in uuids
    )
    for uuid, host in zip(uuids, ("h1", "h2", "h3"), strict=True):
        sim.claim(uuid, host)
    reads: list[list[tuple[str, str | None]]] = []
    step_reads = sim.store.step_reads

    def counted(asked: Any) -> Any:
        reads.append(list(asked))
        return step_reads(asked)

    sim.store.step_reads = counted  # type: ignore[method-assign]
    sim.sim.build_and_run_instances(
        CTXT,
        SPEC.to_primitive(),
        [batched(u, h) for u, h in zip(uuids, ("h1", "h2", "h3"), strict=True)],
    )
    assert reads == [[(uuids[0], "h1"), (uuids[1], "h2"), (uuids[2], "h3")]]
    sim.wait("build_succeeded", 3)
    assert sorted(h for u in uuids for h in sim.sim.hosts_running(u)) == ["h1", "h2", "h3"]
