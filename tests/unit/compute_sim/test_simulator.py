"""The compute simulator on the in-memory store: builds idempotent per instance
and host, claims released only by their own attempt, the resize walk (on
hosts with child providers too, and counted in the hosts' stats)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from compute_sim.hosts import HostShape, Topology, gpu_name, provider_uuid
from compute_sim.simulator import ComputeSimulator
from scheduler.objects import (
    DELETING,
    DELETING_TASK,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    AllocationRequest,
    InstanceRecord,
)
from scheduler.store import MemoryStore, RunningInstance
from tests.fixtures import simulator
from tests.fixtures.simulator import CTXT, INSTANCE, MIGRATION, SPEC, resized, selection
from tests.unit.factories import Recorded, uuid_of

make = simulator.make


# --- builds -----------------------------------------------------------------------------


def test_a_duplicate_of_a_running_build_is_ignored(make: Any) -> None:
    sim = make(build_time=0.3)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    time.sleep(0.05)
    assert sim.conductor.names == ["build_succeeded"] and sim.sim.builds_ok == 1


def test_a_duplicate_of_a_finished_build_reports_again(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.build("h1")  # the first report may have been lost
    assert sim.conductor.names == ["build_succeeded", "build_succeeded"]
    assert sim.sim.builds_ok == 1


def test_a_build_reports_the_zone_of_its_selection_each_time(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.record()
    zoned = selection("h1", availability_zone="east").to_primitive()
    sim.sim.build_and_run_instance(CTXT, INSTANCE, SPEC.to_primitive(), zoned, [])
    sim.wait("build_succeeded")
    sim.sim.build_and_run_instance(CTXT, INSTANCE, SPEC.to_primitive(), zoned, [])
    reports = [args[1:] for name, args, _ in sim.conductor.calls if name == "build_succeeded"]
    assert reports == [(INSTANCE, "h1", "h1", "east")] * 2


def test_a_cast_after_a_failure_is_a_new_attempt(make: Any) -> None:
    sim = make(build_time=0.0, fail_hosts=("h1",))
    for _ in range(2):
        sim.claim(INSTANCE, "h1")
        sim.build("h1")
        sim.wait("reschedule", len(sim.seen) + 1)
    assert sim.sim.builds_failed == 2
    assert sim.seen == [("reschedule", False)] * 2, "released before handing back"


@pytest.mark.parametrize(
    "claim_on, kept",
    [
        pytest.param("h1", False, id="own-claim-released"),
        pytest.param("h2", True, id="live-claim-elsewhere-kept"),
    ],
)
def test_a_failed_build_releases_only_its_own_claim(make: Any, claim_on: str, kept: bool) -> None:
    """A build whose claim is elsewhere is not even started (the guard, see
    test_build_guard.py): it neither releases nor hands anything back."""
    sim = make(build_time=0.0, fail_hosts=("h1",))
    sim.claim(INSTANCE, claim_on)
    sim.build("h1")
    if not kept:
        sim.wait("reschedule")
    assert (sim.store.get_consumer(INSTANCE) is not None) is kept
    assert sim.conductor.names == ([] if kept else ["reschedule"])


# --- resize -----------------------------------------------------------------------------


def test_a_failed_prep_releases_the_destination_before_the_retry(make: Any) -> None:
    sim = make(build_time=0.0, fail_resize_hosts=("h2",))
    sim.claim(MIGRATION, "h1")  # the source, parked
    sim.claim(INSTANCE, "h2")  # the destination's claim
    sim.prep("h2")
    sim.wait("reschedule")
    assert sim.seen == [("reschedule", False)]
    (_, _, _, failed, _, alternates), kwargs = sim.conductor.last("reschedule")
    assert (failed, [a.host for a in alternates], kwargs) == (  # type: ignore[attr-defined]
        "h2",
        ["h3"],
        {"migration_uuid": MIGRATION},
    )
    assert sim.store.get_consumer(MIGRATION) is not None, "the source stays parked"


def test_prep_resize_finish_then_duplicates(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    sim.prep("h2")
    sim.wait("resize_instance")
    (_, source, instance, migration, dest, node), _ = sim.compute.last("resize_instance")
    assert (source, instance, migration, dest, node) == ("h1", INSTANCE, MIGRATION, "h2", "h2")
    sim.sim.resize_instance(CTXT, INSTANCE, MIGRATION, "h2", "h2")  # as the source would
    sim.wait("finish_resize")
    sim.sim.finish_resize(CTXT, INSTANCE, MIGRATION, "h2", "h2")  # as the destination would
    assert sim.conductor.last("resize_result")[0][1:] == (INSTANCE, MIGRATION, "h2", True)
    sim.prep("h2")  # a re-drive after the end: report again
    assert sim.conductor.names.count("resize_result") == 2


def test_a_finished_resize_reports_the_zone_of_its_selection_each_time(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    sim.prep("h2", zone="west")
    sim.wait("resize_instance")
    sim.sim.resize_instance(CTXT, INSTANCE, MIGRATION, "h2", "h2")
    sim.wait("finish_resize")
    sim.sim.finish_resize(CTXT, INSTANCE, MIGRATION, "h2", "h2")
    assert sim.conductor.last("resize_result")[1] == {"availability_zone": "west"}
    sim.prep("h2", zone="west")  # a re-drive after the end reports it again
    assert sim.conductor.names.count("resize_result") == 2
    assert sim.conductor.last("resize_result")[1] == {"availability_zone": "west"}


def test_a_prep_for_an_abandoned_migration_walks_no_further(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h2")  # the migration holds nothing: given up meanwhile
    sim.prep("h2")
    time.sleep(0.1)
    assert sim.compute.calls == [] and sim.conductor.calls == []


@pytest.mark.parametrize(
    "confirm, holders",
    [
        pytest.param(True, {INSTANCE: "h2"}, id="confirm-drops-the-source"),
        pytest.param(False, {INSTANCE: "h1"}, id="revert-drops-the-destination"),
    ],
)
def test_confirm_or_revert(make: Any, confirm: bool, holders: dict[str, str]) -> None:
    sim = make(build_time=0.0)
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    resized(sim, RESIZE_CONFIRMING if confirm else RESIZE_REVERTING)
    (sim.sim.confirm_resize if confirm else sim.sim.revert_resize)(CTXT, INSTANCE, MIGRATION)
    names = {p.uuid: p.name for p in sim.store.list_providers()}
    assert {
        c.uuid: names[next(iter(c.allocations))] for c in sim.store.list_consumers()
    } == holders
    if confirm:
        assert sim.conductor.names == ["resize_confirmed"]
        return
    # The source finishes the revert, whichever process serves it.
    (_, source, instance, migration), _ = sim.compute.last("finish_revert_resize")
    assert (source, instance, migration, sim.conductor.names) == ("h1", INSTANCE, MIGRATION, [])


def test_a_revert_runs_the_vm_on_the_source_again_in_the_source_s_process(make: Any) -> None:
    """The destination's process stops its VM and does not start the source's:
    the source's own process does (a VM it ran once, in its memory)."""
    source, dest = make(build_time=0.0), make(build_time=0.0)
    dest.store = source.store
    source.claim(MIGRATION, "h1")
    source.claim(INSTANCE, "h2")
    resized(source, RESIZE_REVERTING)
    dest.sim.vms.start(RunningInstance(INSTANCE), "h2")
    dest.sim.store = dest.sim.guard.store = source.store
    dest.sim.revert_resize(CTXT, INSTANCE, MIGRATION)
    assert dest.sim.hosts_running(INSTANCE) == [] and dest.conductor.names == []
    (ctxt, host, instance, migration), _ = dest.compute.last("finish_revert_resize")
    source.sim.finish_revert_resize(ctxt, str(instance), str(migration), str(host))
    assert source.sim.hosts_running(INSTANCE) == ["h1"]
    assert source.conductor.names == ["resize_reverted"]
    # A re-driven revert finds the allocation moved already and asks the source again.
    dest.sim.revert_resize(CTXT, INSTANCE, MIGRATION)
    assert dest.compute.names.count("finish_revert_resize") == 2
    assert dest.compute.last("finish_revert_resize")[0][1] == "h1"


def test_a_prep_counts_as_an_io_op_on_the_destination_while_under_way(make: Any) -> None:
    sim = make(build_time=0.3)
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    sim.prep("h2")
    sim.prep("h2")  # a duplicate is not counted twice
    assert (sim.io_ops("h1"), sim.io_ops("h2")) == (0, 1)
    sim.wait("resize_instance")
    assert sim.io_ops("h2") == 0


def test_the_source_is_the_root_of_a_parked_allocation_on_a_tree(make: Any) -> None:
    sim = make(build_time=0.0, topology=Topology(vgpus_per_gpu=2))
    gpu = provider_uuid(gpu_name("h1", 0))
    # The child provider listed first: a GPU pool is not a host to cast to.
    sim.store.claim(
        MIGRATION,
        AllocationRequest({gpu: {"VGPU": 1}, provider_uuid("h1"): SPEC.resources}, "p", "u"),
    )
    sim.claim(INSTANCE, "h2")
    sim.prep("h2")
    sim.wait("resize_instance")
    (_, source, *_), _ = sim.compute.last("resize_instance")
    assert source == "h1"


def test_a_deleted_instance_is_forgotten_after_the_retention(make: Any) -> None:
    """A delete drops the instance's build memory at once, and the instance
    itself once the retention has passed: the simulator's memory follows the
    deletes of the retention, not every delete it ever saw."""
    sim = make(build_time=0.0)
    sim.sim.ledger.retention = 0.05
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    assert sim.sim.ledger.steps_of(INSTANCE)
    deleting = {"state": DELETING, "task_state": DELETING_TASK, "pending_hosts": ("h1",)}
    sim.record(**deleting)
    sim.sim.terminate_instance(CTXT, INSTANCE, "h1")
    assert sim.sim.ledger.steps_of(INSTANCE) == {} and sim.sim.ledger.deleted(INSTANCE)
    time.sleep(0.1)
    other = uuid_of("other-instance")
    sim.store.create_instances([InstanceRecord(other)])
    sim.store.update_instance(other, **deleting)
    sim.sim.terminate_instance(CTXT, other, "h1")  # the next delete prunes
    assert sim.sim.ledger.deleted_instances() == {other}


def test_registered_hosts_are_fed_with_their_heartbeat_so_they_count_up_at_once() -> None:
    store = MemoryStore()
    cursor = store.compact_snapshot().cursor
    sim = ComputeSimulator(
        store,
        Recorded(),  # type: ignore[arg-type]
        ["h1", "h2"],
        "sim",
        HostShape(),
    )
    try:
        before = time.time()
        sim.register()
        fed = {c.data.host: c.data for c in store.changes(cursor) if c.kind == "service"}
        assert set(fed) == {"h1", "h2"}
        # A fed record with no heartbeat reads as down in a worker's view.
        assert all(s.last_seen >= before for s in fed.values())
    finally:
        sim.stop()
