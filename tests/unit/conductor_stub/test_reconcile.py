"""The reconciler against the in-memory store and hand-written reports."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from conductor_stub.findings import (
    LOST_BOOT,
    LOST_DELETE,
    LOST_FAULT,
    LOST_RECORD,
    LOST_RESIZE,
    LOST_SHELVE,
    LOST_VM,
    LOST_VM_FAULT,
    MISPLACED_VM,
    MISSING_ALLOCATION,
    ORPHAN_ALLOCATION,
    OVERCOMMIT,
    RECOVERED_FAULT,
    STALE_REPORT,
    STRAY_VM,
    Finding,
    format_counts,
)
from conductor_stub.reconcile import Reconciler, ReconcileSettings
from scheduler.exceptions import ConsumerDeleted
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    ERROR,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    AllocationRequest,
    Flavor,
    InstanceRecord,
    RequestSpec,
    ServerGroup,
)
from scheduler.store import (
    EndedInstance,
    GroupClaim,
    InstanceReport,
    MemoryStore,
    RunningInstance,
)
from scheduler.store.records import ENDED_DELETE, ENDED_OFFLOAD
from tests.unit.factories import host, populate
from tests.unit.notifying import legacy_checked

TINY = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)
AMOUNTS = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
GRACE = 10.0


@dataclass
class FakeCompute:
    reaped: list[tuple[str, str, str]] = field(default_factory=list)
    reverted: list[tuple[str, str, str]] = field(default_factory=list)

    def reap_instance(self, ctxt: Any, host: str, instance_uuid: str, reason: str) -> None:
        self.reaped.append((host, instance_uuid, reason))

    def revert_resize(
        self, ctxt: Any, dest_host: str, instance_uuid: str, migration_uuid: str
    ) -> None:
        self.reverted.append((dest_host, instance_uuid, migration_uuid))


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    store: MemoryStore
    compute: FakeCompute
    clock: Clock
    reconciler: Reconciler

    def root(self, name: str) -> str:
        return self.store.get_provider_by_name(name).uuid

    def record(self, state: str = ACTIVE, host: str | None = "h1", **kw: Any) -> str:
        uuid = str(uuidlib.uuid4())
        spec = RequestSpec(flavor=TINY, project_id="p", user_id="u", group=kw.pop("group", None))
        self.store.create_instances(
            [
                InstanceRecord(
                    uuid=uuid,
                    state=state,
                    task_state=None,
                    host=host,
                    node=host,
                    request_spec=spec.to_primitive(),
                    **{"updated_at": self.clock.now - 100, **kw},
                )
            ]
        )
        return uuid

    def claim(self, uuid: str, name: str = "h1") -> None:
        self.store.claim(uuid, AllocationRequest({self.root(name): AMOUNTS}, "p", "u"))

    def report(
        self,
        name: str,
        *uuids: str,
        at: float | None = None,
        ended: tuple[EndedInstance, ...] = (),
    ) -> None:
        vms = tuple(RunningInstance(u, AMOUNTS, "p", "u", "req-1") for u in uuids)
        self.store.report_instances(
            [InstanceReport(name, self.clock.now - 1 if at is None else at, vms, ended)]
        )

    def passes(self, n: int = 1, step: float = GRACE) -> list[Finding]:
        """``n`` passes, ``step`` seconds apart; the last one's findings."""
        found: list[Finding] = []
        for _ in range(n):
            found = self.reconciler.run_once()
            self.clock.now += step
        return found


@pytest.fixture
def world() -> World:
    clock = Clock()
    store = MemoryStore(clock=clock)
    populate(store, [host("h1", vcpus=8, ratios={"VCPU": 1.0}), host("h2")])
    compute = FakeCompute()
    settings = ReconcileSettings(interval=1.0, orphan_grace=GRACE, report_max_age=30.0)
    return World(store, compute, clock, Reconciler(store, compute, settings, clock))


def kinds(findings: list[Finding]) -> list[tuple[str, str, str | None]]:
    return sorted((f.kind, f.uuid, f.host) for f in findings)


def test_a_settled_cloud_has_no_findings(world: World) -> None:
    uuid = world.record()
    world.claim(uuid)
    world.report("h1", uuid)
    world.report("h2")
    assert world.passes(3) == []
    assert world.compute.reaped == []


@pytest.mark.parametrize(
    ("state", "where", "reason"),
    [
        (ERROR, None, "its instance is ERROR"),
        (SHELVED_OFFLOADED, None, "its instance is SHELVED_OFFLOADED"),
        (ACTIVE, "h2", "its record places it on h2"),
    ],
    ids=["error", "shelved", "moved-elsewhere"],
)
def test_a_vm_no_record_keeps_there_is_reaped_after_the_grace(
    world: World, state: str, where: str | None, reason: str
) -> None:
    uuid = world.record(state, where)
    if where:
        world.claim(uuid, where)
    world.report("h1", uuid)
    [first] = world.passes(1)
    assert (first.kind, first.host, first.reason, first.due) == (STRAY_VM, "h1", reason, False)
    assert world.compute.reaped == []  # in its grace
    world.report("h1", uuid)
    before = REGISTRY.get_sample_value("conductor_reconcile_actions_total", {"kind": STRAY_VM})
    [due] = world.passes(1)
    assert due.due and due.outcome == "reap cast"
    after = REGISTRY.get_sample_value("conductor_reconcile_actions_total", {"kind": STRAY_VM})
    assert (after or 0) - (before or 0) == 1
    assert world.compute.reaped == [("h1", uuid, reason)]
    assert world.reconciler.counts == {STRAY_VM: 1}


def test_a_deleted_instances_vm_is_reaped(world: World) -> None:
    uuid = world.record(host="h1")
    world.store.start_delete(uuid)
    world.store.finish_delete(uuid, None, retention=1e6, now=world.clock.now, force=True)
    assert world.store.get_instance(uuid).state == DELETED
    world.report("h1", uuid)  # made before the delete: the VM may be gone since
    assert world.passes(2) == []
    world.report("h1", uuid, at=world.clock.now)  # still there after it
    world.passes(2)
    assert world.compute.reaped == [("h1", uuid, "its instance is DELETED")]


def test_records_in_flight_or_changed_since_the_report_are_no_findings(world: World) -> None:
    building = world.record(BUILDING, "h2")
    resizing = world.record(RESIZING, "h2")
    changed = world.record(ACTIVE, "h2", updated_at=world.clock.now)  # after the report
    world.report("h1", building, resizing, changed)
    assert world.passes(3) == []


def test_a_stale_report_is_not_reconciled(world: World) -> None:
    uuid = world.record(ERROR, None)
    world.report("h1", uuid, at=world.clock.now - 31)
    # Its VM is not judged; its host, which still heartbeats, is a finding.
    assert kinds(world.passes(3)) == [(STALE_REPORT, "", "h1")]


def test_a_host_that_heartbeats_with_a_stale_report_is_a_finding_kept_in_view(
    world: World,
) -> None:
    """Issue 35: a compute whose reports fail leaves the reconciler blind on its
    hosts; it says so (``stale_report``) instead of going quiet. A host that
    stopped heartbeating too is down: no finding."""
    world.report("h1", at=world.clock.now - 31)
    world.report("h2", at=world.clock.now - 31)
    world.store.heartbeat(["h1"], world.clock.now - 5)
    world.store.mark_down(["h2"])
    found = world.passes(3)
    assert kinds(found) == [(STALE_REPORT, "", "h1")]
    [stale] = found
    assert stale.action == "none" and not stale.due and stale.outcome is None
    assert "heartbeats but last reported" in stale.reason
    assert "stale_report" in stale.line() and "kept in view" in stale.line()
    assert "stale_report=1" in format_counts(found)
    assert REGISTRY.get_sample_value("conductor_reconcile_findings", {"kind": STALE_REPORT}) == 1
    world.report("h1")  # it reports again
    assert world.passes() == []


def test_a_lost_record_is_recreated_from_the_report_and_its_allocation_healed(
    world: World,
) -> None:
    uuid = str(uuidlib.uuid4())
    world.report("h1", uuid)
    [finding] = world.passes(1)
    assert (finding.kind, finding.due) == (LOST_RECORD, False)
    world.report("h1", uuid)
    [finding] = world.passes(1)
    assert finding.outcome == "recreated"
    record = world.store.get_instance(uuid)
    assert (record.state, record.host, record.task_state) == (ACTIVE, "h1", None)
    assert record.fault == RECOVERED_FAULT and "report" in (record.fault_details or "")
    assert RequestSpec.from_primitive(dict(record.request_spec or {})).resources == AMOUNTS
    held = world.store.get_consumer(uuid)
    assert held is not None and dict(held.allocations[world.root("h1")]) == AMOUNTS
    world.report("h1", uuid, at=world.clock.now)
    assert world.passes(2) == []


def test_a_fenced_vm_with_no_record_is_reaped_not_recreated(world: World) -> None:
    uuid = world.record(host="h1")
    world.store.start_delete(uuid)
    world.store._instances.pop(uuid)  # the record gone, its fence still there
    world.report("h1", uuid)
    world.passes(2)
    assert world.compute.reaped == [("h1", uuid, "its instance is deleted")]
    assert world.store.list_instances([uuid]) == []


def test_a_missing_allocation_is_healed_where_it_fits_and_an_overcommit_kept_in_view(
    world: World,
) -> None:
    group = ServerGroup(uuid=str(uuidlib.uuid4()), policy="anti-affinity")
    fits = world.record(group=group)
    big = world.record()  # h1 (8 VCPU) full but for one
    world.store.claim(big, AllocationRequest({world.root("h1"): {"VCPU": 7}}, "p", "u"))
    world.report("h1", big, fits)
    world.passes(2)
    assert world.store.get_consumer(fits) is not None
    assert world.store.group_hosts(group.uuid) == {"h1": 1}
    # A third VM would take h1 past its 8 VCPU: never healed, never silent.
    over = world.record()
    world.report("h1", big, fits, over)
    for _ in range(3):
        [kept] = [f for f in world.passes(1) if f.uuid == over]
        assert (kept.kind, kept.due, kept.outcome) == (OVERCOMMIT, False, None)
    assert "(kept in view)" in kept.line() and "overcommit=1" in format_counts([kept])
    assert REGISTRY.get_sample_value("conductor_reconcile_findings", {"kind": OVERCOMMIT}) == 1
    assert world.store.get_provider(world.root("h1")).usages["VCPU"] == 8
    assert world.store.get_consumer(over) is None
    assert world.reconciler.counts == {MISSING_ALLOCATION: 1}
    # Room made (an operator moved ``big`` away): the heal is written.
    world.store.release(big)
    world.report("h1", fits, over)
    [healed] = [f for f in world.passes(2) if f.uuid == over]
    assert (healed.kind, healed.outcome) == (MISSING_ALLOCATION, "healed")
    assert world.store.get_provider(world.root("h1")).usages["VCPU"] == 2
    assert REGISTRY.get_sample_value("conductor_reconcile_findings", {"kind": OVERCOMMIT}) == 0


def test_a_lost_record_that_would_overcommit_is_recreated_without_its_claim(
    world: World,
) -> None:
    big = world.record()
    world.store.claim(big, AllocationRequest({world.root("h1"): {"VCPU": 8}}, "p", "u"))
    lost = str(uuidlib.uuid4())
    world.report("h1", big, lost)
    world.passes(1)
    [recreated] = [f for f in world.passes(1) if f.uuid == lost]
    assert recreated.kind == LOST_RECORD
    assert recreated.outcome and recreated.outcome.startswith("recreated; claim refused")
    assert world.store.get_instance(lost).state == ACTIVE
    assert world.store.get_consumer(lost) is None
    world.report("h1", big, lost)
    assert [f.kind for f in world.passes(1) if f.uuid == lost] == [OVERCOMMIT]


def test_orphan_allocations_are_released_after_the_grace(world: World) -> None:
    # ``elsewhere`` is a lost VM too (h1 reports it not): only found here.
    world.reconciler.settings = replace(world.reconciler.settings, lost_vm_action="log")
    nobody = str(uuidlib.uuid4())
    world.claim(nobody)
    errored = world.record(ERROR, None)
    world.claim(errored)
    elsewhere = world.record(ACTIVE, "h1")
    world.claim(elsewhere, "h2")
    # Not orphans: a build in flight, a move's migration, a VM that runs on it.
    building = world.record(BUILDING, None)
    world.claim(building)
    migration = str(uuidlib.uuid4())
    moving = world.record(RESIZING, "h2", migration_uuid=migration, source_host="h1")
    world.claim(migration)
    world.claim(moving, "h2")
    # ... nor the migration of an evacuated instance deleted while its source is
    # down (issue 28's B6: only moves counted, and it was released).
    parked = str(uuidlib.uuid4())
    world.record(DELETING, "h2", migration_uuid=parked, source_host="h1")
    world.claim(parked)
    lost = str(uuidlib.uuid4())
    world.claim(lost)
    world.report("h1", lost)
    found = world.passes(1)
    orphans = kinds([f for f in found if f.kind == ORPHAN_ALLOCATION])
    assert orphans == sorted(
        [
            (ORPHAN_ALLOCATION, nobody, "h1"),
            (ORPHAN_ALLOCATION, errored, "h1"),
            (ORPHAN_ALLOCATION, elsewhere, "h2"),
        ]
    )
    world.report("h1", lost)
    world.passes(1)
    held = {c.uuid for c in world.store.list_consumers()}
    assert held == {building, migration, moving, parked, lost}
    assert world.reconciler.counts[ORPHAN_ALLOCATION] == 3


def test_a_finding_that_goes_away_starts_its_grace_again(world: World) -> None:
    uuid = world.record(ERROR, None)
    world.report("h1", uuid)
    world.passes(1, step=GRACE * 0.6)
    world.report("h1")  # gone from one report
    world.passes(1, step=GRACE * 0.6)
    world.report("h1", uuid)
    [again] = world.passes(1, step=GRACE * 0.6)
    assert not again.due and world.compute.reaped == []


def test_an_orphan_that_settled_meanwhile_is_left_alone(world: World) -> None:
    uuid = str(uuidlib.uuid4())
    world.claim(uuid)
    found = world.reconciler.audit()
    world.clock.now += GRACE
    found = world.reconciler.audit()
    world.store.create_instances(
        [InstanceRecord(uuid=uuid, state=ACTIVE, task_state=None, host="h1")]
    )
    [skipped] = world.reconciler.repair(found)
    assert skipped.outcome == "skipped"
    assert world.store.get_consumer(uuid) is not None
    assert world.reconciler.counts == {}


def test_lost_boot_records_are_counted_never_acted_on(world: World) -> None:
    uuid = world.record(ERROR, None, fault=LOST_FAULT)
    found = world.passes(3)
    assert kinds(found) == [(LOST_BOOT, uuid, None)]
    assert not found[0].due and found[0].action == "none"
    assert "lost_boot=1 " in format_counts(found)


def test_a_group_member_healed_joins_its_group_on_that_host(world: World) -> None:
    group = ServerGroup(uuid=str(uuidlib.uuid4()), policy="affinity")
    uuid = world.record(group=group, host="h2")
    world.report("h2", uuid)
    world.passes(2)
    held = world.store.get_consumer(uuid)
    assert held is not None and held.member_host(group.uuid) == "h2"
    assert GroupClaim.for_spec(
        RequestSpec(flavor=TINY, project_id="p", user_id="u", group=group), "h2"
    )


def test_a_vm_with_no_record_and_no_amounts_is_reaped(world: World) -> None:
    uuid = str(uuidlib.uuid4())
    bare = InstanceReport("h1", world.clock.now - 1, (RunningInstance(uuid),))
    world.store.report_instances([bare])
    world.passes(2)
    assert world.compute.reaped == [
        ("h1", uuid, "runs with no record, and its host reports no amounts")
    ]
    assert world.store.list_instances([uuid]) == []


def test_an_action_that_fails_is_said_so_and_not_counted(world: World) -> None:
    def unreachable(*args: Any) -> None:
        raise ConnectionError("the broker is down")

    world.compute.reap_instance = unreachable  # type: ignore[method-assign]
    uuid = world.record(ERROR, None)
    world.report("h1", uuid)
    world.passes(1)
    world.report("h1", uuid)
    [failed] = world.passes(1)
    assert failed.outcome is not None and failed.outcome.startswith("failed: ConnectionError")
    assert not failed.repaired and world.reconciler.counts == {}


# --- lost VMs (issue 29) --------------------------------------------------------------


def test_an_active_instance_its_host_does_not_run_is_lost_then_errored_and_released(
    world: World,
) -> None:
    uuid = world.record(ACTIVE, "h1")
    world.claim(uuid, "h1")
    world.report("h1")  # h1 runs nothing
    [first] = world.passes(1)
    assert (first.kind, first.host, first.due) == (LOST_VM, "h1", False)
    assert world.store.get_instance(uuid).state == ACTIVE  # in its grace
    world.report("h1")
    [due] = world.passes(1)
    assert due.due and due.outcome == "ERROR, released"
    record = world.store.get_instance(uuid)
    assert (record.state, record.fault) == (ERROR, LOST_VM_FAULT)
    assert record.fault_details and "h1" in record.fault_details
    assert world.store.get_consumer(uuid) is None
    assert world.reconciler.counts == {LOST_VM: 1}
    assert "lost_vm=1" in format_counts([due])


@dataclass
class RecordingNotifier:
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def info(self, ctxt: Any, event_type: str, payload: Any) -> None:
        self.sent.append((event_type, legacy_checked("info", event_type, payload)))


def test_every_action_is_notified_as_its_sample_shows(world: World) -> None:
    notifier = RecordingNotifier()
    world.reconciler.notifier = notifier  # type: ignore[assignment]
    lost = world.record(ACTIVE, "h1")
    world.claim(lost, "h1")
    in_grace = world.record(ACTIVE, "h2")
    world.claim(in_grace, "h2")
    world.report("h1")
    world.passes(1)
    world.report("h1")
    world.report("h2")
    world.passes(1)
    # Only what was acted on: the one past its grace, not the one in it.
    assert [(e, n["kind"], n["instance_uuid"], n["outcome"]) for e, n in notifier.sent] == [
        ("scheduler.reconcile.action", LOST_VM, lost, "ERROR, released")
    ]


def test_a_notifier_that_fails_does_not_undo_the_repair(world: World) -> None:
    class Broken:
        def info(self, *args: Any) -> None:
            raise RuntimeError("the broker is away")

    world.reconciler.notifier = Broken()  # type: ignore[assignment]
    uuid = world.record(ACTIVE, "h1")
    world.report("h1")
    world.passes(1)
    world.report("h1")
    [done] = world.passes(1)
    assert done.outcome == "ERROR" and world.store.get_instance(uuid).state == ERROR


def test_lost_vm_action_log_only_finds_it(world: World) -> None:
    world.reconciler.settings = replace(world.reconciler.settings, lost_vm_action="log")
    uuid = world.record(ACTIVE, "h1")
    world.claim(uuid, "h1")
    world.report("h1")
    world.passes(1)
    world.report("h1")
    [due] = world.passes(1)
    assert due.outcome == "logged (lost_vm_action = log)"
    assert world.store.get_instance(uuid).state == ACTIVE
    assert world.store.get_consumer(uuid) is not None


def test_no_vm_is_called_lost_without_a_fresh_report_that_should_show_it(world: World) -> None:
    # Its host's report is stale (the host is down: evacuation's business).
    down = world.record(ACTIVE, "h2")
    world.report("h2", at=world.clock.now - 31)
    # Changed since its host's report (a build or move that just landed).
    landed = world.record(ACTIVE, "h1", updated_at=world.clock.now)
    world.report("h1")
    assert not [f for f in world.passes(1) if f.kind == LOST_VM]
    # Reported by another host: a move the record forgot, not a loss.
    elsewhere = world.record(ACTIVE, "h2")
    world.report("h2")
    world.report("h1", elsewhere)
    found = world.passes(1)
    assert [f.kind for f in found if f.uuid == elsewhere] == [MISPLACED_VM], found
    assert {world.store.get_instance(u).state for u in (down, landed, elsewhere)} == {ACTIVE}


def test_the_only_vm_of_an_instance_placed_elsewhere_is_adopted_not_reaped(
    world: World,
) -> None:
    # A revert the store forgot: the record says h2 (and its claim is there),
    # h2 runs nothing, the VM runs on h1.
    uuid = world.record(ACTIVE, "h2")
    world.claim(uuid, "h2")
    world.report("h2")
    world.report("h1", uuid)
    [first] = world.passes(1)
    assert (first.kind, first.host, first.due) == (MISPLACED_VM, "h1", False)
    assert "runs on h1" in first.reason
    world.report("h2")
    world.report("h1", uuid)
    [adopted] = world.passes(1)
    assert adopted.outcome == "adopted on h1; healed"
    record = world.store.get_instance(uuid)
    assert (record.state, record.host, record.node) == (ACTIVE, "h1", "h1")
    assert record.fault_details and "adopted by the reconciler" in record.fault_details
    held = world.store.get_consumer(uuid)
    assert held is not None and list(held.allocations) == [world.root("h1")]
    assert world.compute.reaped == []
    # Settled: the next reports and pass find nothing.
    world.report("h2")
    world.report("h1", uuid)
    assert world.passes(1) == []


def test_an_unshelve_the_store_forgot_is_adopted_a_shelve_given_up_is_reaped(
    world: World,
) -> None:
    unshelved = world.record(SHELVED_OFFLOADED, None)
    given_up = world.record(SHELVED_OFFLOADED, None)
    shelved_at = world.clock.now - 100  # both records' last change
    vms = (
        RunningInstance(unshelved, AMOUNTS, "p", "u", "req-2", started_at=shelved_at + 50),
        RunningInstance(given_up, AMOUNTS, "p", "u", "req-1", started_at=shelved_at - 50),
    )
    for _ in range(2):
        world.store.report_instances([InstanceReport("h1", world.clock.now - 1, vms)])
        found = {f.uuid: f for f in world.passes(1)}
    assert (found[unshelved].kind, found[unshelved].outcome) == (
        MISPLACED_VM,
        "adopted on h1; healed",
    )
    assert (found[given_up].kind, found[given_up].outcome) == (STRAY_VM, "reap cast")
    record = world.store.get_instance(unshelved)
    assert (record.state, record.host, record.task_state) == (ACTIVE, "h1", None)
    assert world.store.get_consumer(unshelved) is not None
    assert [uuid for _, uuid, _ in world.compute.reaped] == [given_up]


def test_a_resized_instance_its_destination_does_not_run_is_reverted(world: World) -> None:
    # A revert cut short (the destination stopped its VM, the source never
    # heard) or forgotten: the record RESIZED on h2, its migration holding h1.
    migration = str(uuidlib.uuid4())
    uuid = world.record(RESIZED, "h2", source_host="h1", migration_uuid=migration)
    world.claim(uuid, "h2")
    world.claim(migration, "h1")
    settled = world.record(RESIZED, "h2", source_host="h1", migration_uuid=str(uuidlib.uuid4()))
    world.report("h2", settled)
    world.report("h1")
    [first] = world.passes(1)
    assert (first.kind, first.uuid, first.host) == (LOST_RESIZE, uuid, "h2")
    world.report("h2", settled)
    [done] = world.passes(1)
    assert done.outcome == "revert cast"
    assert world.compute.reverted == [("h2", uuid, migration)]
    record = world.store.get_instance(uuid)
    assert (record.state, record.task_state) == (RESIZED, RESIZE_REVERTING)
    assert record.deadline is not None  # the sweeper re-drives it from here
    # In flight now: no finding, no second revert.
    world.report("h2", settled)
    world.report("h1")
    assert world.passes(2) == [] and len(world.compute.reverted) == 1


def test_a_vm_on_two_hosts_while_its_record_places_it_on_one_that_runs_it_is_a_stray(
    world: World,
) -> None:
    uuid = world.record(ACTIVE, "h2")
    world.claim(uuid, "h2")
    world.report("h2", uuid)
    world.report("h1", uuid)
    assert [(f.kind, f.host) for f in world.passes(1)] == [(STRAY_VM, "h1")]


def test_a_delete_the_store_forgot_is_finished_from_the_hosts_tombstone(world: World) -> None:
    uuid = world.record(ACTIVE, "h1")
    world.claim(uuid, "h1")
    tomb = EndedInstance(uuid, ENDED_DELETE, world.clock.now - 2)
    world.report("h1", ended=(tomb,))
    [first] = world.passes(1)
    assert (first.kind, first.host) == (LOST_DELETE, "h1")
    world.report("h1", ended=(tomb,))
    [done] = world.passes(1)
    assert done.outcome == "DELETED"
    assert world.store.list_instances([uuid])[0].state == DELETED
    assert world.store.get_consumer(uuid) is None
    with pytest.raises(ConsumerDeleted):  # fenced, as any delete leaves it
        world.claim(uuid, "h1")


def test_a_shelve_the_store_forgot_is_finished_from_the_hosts_tombstone(world: World) -> None:
    uuid = world.record(ACTIVE, "h1")
    world.claim(uuid, "h1")
    tomb = EndedInstance(uuid, ENDED_OFFLOAD, world.clock.now - 2)
    world.report("h1", ended=(tomb,))
    world.passes(1)
    world.report("h1", ended=(tomb,))
    [done] = world.passes(1)
    assert (done.kind, done.outcome) == (LOST_SHELVE, "SHELVED_OFFLOADED, released")
    record = world.store.get_instance(uuid)
    assert (record.state, record.host) == (SHELVED_OFFLOADED, None)
    assert world.store.get_consumer(uuid) is None


def test_a_tombstone_older_than_the_record_explains_nothing(world: World) -> None:
    # Offloaded from h1 long ago, unshelved onto h1 since (the record is newer):
    # the VM is lost, not shelved; a delete tombstone just as old is ignored too.
    uuid = world.record(ACTIVE, "h1", updated_at=world.clock.now - 10)
    world.claim(uuid, "h1")
    old = world.clock.now - 50
    world.report("h1", ended=(EndedInstance(uuid, ENDED_OFFLOAD, old),))
    other = world.record(ACTIVE, "h2", updated_at=world.clock.now - 10)
    world.claim(other, "h2")
    world.report("h2", other, ended=(EndedInstance(other, ENDED_DELETE, old),))
    assert [(f.kind, f.uuid) for f in world.passes(1)] == [(LOST_VM, uuid)]
