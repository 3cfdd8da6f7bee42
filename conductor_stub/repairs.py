"""The record side of the reconciler's repairs for records the hosts contradict
(:func:`conductor_stub.findings.misplacements`): a lost VM, a forgotten delete,
a forgotten shelve, a VM that runs elsewhere than its record says.

Each is a compare-and-set on the record as the finding saw it (ACTIVE on the
host it named), written *before* the claim is released or moved: a pass
stopped between the two leaves a claim the next pass finds orphaned (or
missing) and settles, never a record that points where nothing is claimed
for good.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from conductor_stub.findings import LOST_VM_FAULT, LOST_VM_LOG, RECOVERED_FAULT, SKIPPED, Finding
from conductor_stub.tasks.base import request_context
from scheduler.build_results import placed_on
from scheduler.objects import (
    ACTIVE,
    DELETED,
    ERROR,
    RESIZE_REVERTING,
    RESIZED,
    SHELVED_OFFLOADED,
    InstanceRecord,
)
from scheduler.store.base import InstanceStore, PlacementStore

#: The availability-zone key of an aggregate's metadata (as Nova has it).
ZONE_KEY = "availability_zone"


class RepairStore(PlacementStore, InstanceStore, Protocol):
    """What these repairs write: records and claims."""


class Reverter(Protocol):
    """The compute call a revert begins with (``ComputeClient`` has it)."""

    def revert_resize(
        self, ctxt: Any, dest_host: str, instance_uuid: str, migration_uuid: str
    ) -> None: ...


def _reported(finding: Finding) -> str:
    return f"{finding.reported_at:.3f}" if finding.reported_at else "?"


def lost_vm(
    store: RepairStore, finding: Finding, action: str, clock: Callable[[], float]
) -> Finding:
    """A lost VM, as ``action`` (``[conductor] lost_vm_action``) says: the record
    ERROR (if it is still ACTIVE on that host) with a fault naming what was
    lost, then its allocation released; or only logged."""
    if action == LOST_VM_LOG:
        return replace(finding, outcome="logged (lost_vm_action = log)")
    return _settled(
        store,
        finding,
        clock,
        state=ERROR,
        fault=LOST_VM_FAULT,
        fault_details=(
            f"lost by the reconciler: {finding.host}'s report of {_reported(finding)} does "
            "not show the VM its record placed there, and no other host runs it"
        ),
    )


def _settled(
    store: RepairStore, finding: Finding, clock: Callable[[], float], **changes: Any
) -> Finding:
    """The record, if it is still ACTIVE on the finding's host, settled as
    ``changes`` say (nothing in flight, no deadline), then its claim
    released; the outcome names the new state."""
    done = store.update_instance(
        finding.uuid,
        expected_states=[ACTIVE],
        expect={"host": finding.host},
        task_state=None,
        updated_at=clock(),
        deadline=None,
        **changes,
    )
    if done is None:
        return replace(finding, outcome=SKIPPED)
    released = store.release(finding.uuid)
    return replace(finding, outcome=done.state + (", released" if released else ""))


def lost_delete(
    store: RepairStore, finding: Finding, retention: float, clock: Callable[[], float]
) -> Finding:
    """A delete the store forgot, finished: the record DELETING (fenced) then
    DELETED, every claim of the instance and its migration released, as the
    conductor's own delete ends (the host destroyed the VM already)."""
    now = clock()
    _, started = store.start_delete(finding.uuid, task_state=None, updated_at=now)
    if not started:  # being deleted, or deleted, meanwhile: that delete finishes it
        return replace(finding, outcome=SKIPPED)
    done = store.finish_delete(finding.uuid, None, retention, now, force=True)
    return replace(finding, outcome="DELETED" if done and done.state == DELETED else SKIPPED)


def lost_resize(
    store: RepairStore,
    compute: Reverter,
    finding: Finding,
    timeout: float,
    clock: Callable[[], float],
) -> Finding:
    """A RESIZED instance whose destination no longer runs it, reverted as the
    conductor reverts one (RESIZE_REVERTING with the resize deadline, so the
    sweeper re-drives it; then ``revert_resize`` to the destination, which
    hands the source's claim back and has the source run its VM again), if
    it is still RESIZED there with nothing in flight."""
    now = clock()
    updated = store.update_instance(
        finding.uuid,
        expected_states=[RESIZED],
        expect={"host": finding.host, "task_state": None},
        task_state=RESIZE_REVERTING,
        redrives=0,
        updated_at=now,
        deadline=now + timeout,
    )
    if updated is None or updated.migration_uuid is None or finding.host is None:
        return replace(finding, outcome=SKIPPED)
    compute.revert_resize(
        request_context(updated), finding.host, finding.uuid, updated.migration_uuid
    )
    return replace(finding, outcome="revert cast")


def lost_shelve(store: RepairStore, finding: Finding, clock: Callable[[], float]) -> Finding:
    """A shelve the store forgot, finished: the record SHELVED_OFFLOADED (if it
    is still ACTIVE on the host that offloaded it), then its claim released."""
    return _settled(store, finding, clock, state=SHELVED_OFFLOADED, **placed_on())


def recovered_record(
    finding: Finding, spec: Mapping[str, Any] | None, now: float
) -> InstanceRecord:
    """The record of a VM that runs with none (``lost_record``), ACTIVE where
    its host reports it, with a fault saying where it came from."""
    assert finding.running is not None and finding.host is not None
    vm, host = finding.running, finding.host
    return InstanceRecord(
        uuid=vm.uuid,
        state=ACTIVE,
        task_state=None,
        host=host,
        node=host,
        attempts=1,
        fault=RECOVERED_FAULT,
        fault_details=(
            f"re-created by the reconciler from {host}'s report of {_reported(finding)} "
            "(the store had no record of a VM that runs there)"
        ),
        request_spec=spec,
        created_at=now,
        updated_at=now,
        request_id=vm.request_id,
    )


def adopt_record(store: RepairStore, finding: Finding, clock: Callable[[], float]) -> bool:
    """The record of a VM that runs elsewhere than it says moved to where it
    runs (``finding.host``), if it still places it where it did
    (``finding.placed``); whether it was. Its claim is the caller's to move."""
    assert finding.host is not None
    listed = store.list_instances([finding.uuid])
    if not listed:
        return False
    zone = _zone_of(store, finding.host)
    if zone is None and finding.placed and _zone_of(store, finding.placed) is None:
        zone = listed[0].availability_zone  # both in the default zone
    if finding.placed is None:  # an unshelve the store forgot
        expected, why = SHELVED_OFFLOADED, f"{SHELVED_OFFLOADED}, it runs on {finding.host}"
    else:
        expected = ACTIVE
        why = (
            f"{finding.placed}'s report of {_reported(finding)} does not show the VM its "
            f"record placed there; it runs on {finding.host}"
        )
    done = store.update_instance(
        finding.uuid,
        expected_states=[expected],
        expect={"host": finding.placed},
        state=ACTIVE,
        task_state=None,
        **placed_on(finding.host, finding.host, zone),
        fault_details=f"adopted by the reconciler: {why}",
        updated_at=clock(),
        deadline=None,
    )
    return done is not None


def _zone_of(store: RepairStore, host: str) -> str | None:
    """The availability zone ``host``'s aggregates name (the first by name), if
    any (None: the default zone)."""
    provider = store.get_provider_by_name(host)
    zones: Mapping[str, Any] = {
        a.metadata[ZONE_KEY]: a
        for a in store.list_aggregates()
        if a.uuid in provider.aggregates and ZONE_KEY in a.metadata
    }
    return min(zones) if zones else None
