"""The instance record's state machine, as the conductor drives it.

Every transition is decided by a compare-and-set on the record's state
(:meth:`Store.update_instance` with ``expected_states``) *before* anything
is done to allocations, so when two actors race (a result arriving while the
sweeper gives the request up, two copies of one re-driven request) exactly
one of them wins and the loser changes nothing::

    BUILDING --build_succeeded--> ACTIVE
    BUILDING --no host / retries exhausted / timed out--> ERROR (claim released)
    BUILDING --no host, and the request waits--> PENDING (nothing held; indexed)
    PENDING --retried--> BUILDING;  PENDING --waited max_wait--> ERROR
    ACTIVE --resize or cold migrate--> RESIZING --finished on the destination--> RESIZED
    RESIZING --cannot be placed / retries exhausted / timed out--> ACTIVE + fault
                                            (the source's allocation handed back)
    RESIZED --confirm--> ACTIVE on the destination (the source's allocation dropped)
    RESIZED --revert--> ACTIVE on the source (the destination's dropped, the
                                            source's handed back)
    ACTIVE on a down host --evacuate--> REBUILDING --rebuilt on the destination-->
        ACTIVE there (the source's allocation, parked on the migration, dropped)
    REBUILDING --cannot be placed / retries exhausted / timed out--> ACTIVE on the
        down source + fault (the source's allocation handed back; evacuate again)
    ACTIVE --live-migrate--> MIGRATING --landed on the destination--> ACTIVE there
                                            (the source's allocation dropped)
    MIGRATING --pre-checks failed on every destination / cannot be placed /
        timed out--> ACTIVE on the source + fault (the source's handed back)
    any but DELETED --delete--> DELETING (fenced: no claim lands) --every host
        that may run it destroyed it / re-drives exhausted--> DELETED (every
        claim released; the record expires after a retention)

An instance in ERROR holds no allocation: whatever a late attempt claims for
it is released when its result arrives, and once more when the record's
clean-up deadline passes (see :mod:`conductor_stub.redrive`).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.build_results import placed_on
from scheduler.exceptions import InvalidRequest
from scheduler.log import get_logger, mask_secrets
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    ERROR,
    MIGRATING,
    REBUILDING,
    RESIZED,
    RESIZING,
    Destination,
    Flavor,
    InstanceRecord,
    RequestSpec,
    ServerGroup,
    migration_uuid_for,
)
from scheduler.store import InstanceStore, PendingIndex, PlacementStore, ServiceStore

LOG = get_logger(__name__)


@dataclass(frozen=True)
class ConductorSettings:
    """The conductor's options, read once and passed in.

    ``build_timeout`` / ``resize_timeout`` / ``live_migration_timeout`` /
    ``delete_timeout``: seconds to
    wait for an answer before re-driving; ``deleted_retention``: seconds a
    DELETED record is kept; ``max_redrives``: re-drives before the request has
    timed out; ``return_alternates``: reschedule onto the alternates (else
    ask the scheduler again); ``max_attempts``: hosts tried per instance.
    """

    build_timeout: float = 120.0
    resize_timeout: float = 300.0
    live_migration_timeout: float = 300.0
    delete_timeout: float = 60.0
    deleted_retention: float = 86400.0
    max_redrives: int = 3
    sweep_interval: float = 5.0
    return_alternates: bool = True
    max_attempts: int = 3
    allow_resize_to_same_host: bool = False


Clock = Callable[[], float]


class ConductorStore(PlacementStore, InstanceStore, PendingIndex, ServiceStore, Protocol):
    """What the conductor uses: the instance records it owns and the index of
    those waiting for capacity, placement (it claims alternates, releases and
    hands allocations back), and the service records (an evacuation needs its
    source's compute down)."""


def fail_build(
    store: ConductorStore,
    uuid: str,
    fault: str,
    details: str,
    *,
    cleanup_after: float | None = None,
    clock: Clock = time.time,
    state: str = BUILDING,
) -> bool:
    """BUILDING (or ``state``: PENDING, which timed out) -> ERROR with
    ``fault``, then release the instance's claim.

    ``fault`` and ``details`` are written masked
    (:func:`~scheduler.log.mask_secrets`), whatever text they quote. With
    ``cleanup_after``, the record keeps a deadline that many seconds out, when
    the sweeper releases once more whatever a late attempt claimed. False if
    the instance was no longer in ``state`` (nothing done).
    """
    now = clock()
    fault, details = mask_secrets(fault), mask_secrets(details)
    done = store.update_instance(
        uuid,
        expected_states=[state],
        state=ERROR,
        task_state=None,
        **placed_on(),
        fault=fault,
        fault_details=details,
        updated_at=now,
        deadline=None if cleanup_after is None else now + cleanup_after,
    )
    if done is None:
        return False
    released = store.release(uuid)
    LOG.info("instance_error", instance_uuid=uuid, fault=fault, released=released)
    return True


#: The states of a move with a source to go back to, and what its failure logs.
MOVE_FAILED_EVENTS = {
    RESIZING: "resize_failed",
    MIGRATING: "live_migration_failed",
    REBUILDING: "evacuate_failed",
}

#: The fields of a move in flight, as they are once none is.
NO_MOVE: dict[str, Any] = {
    "migration_uuid": None,
    "new_flavor": None,
    "source_host": None,
    "source_node": None,
    "source_availability_zone": None,
    "requested_destination": None,
    "block_migration": False,
    "deadline": None,
}


def move_begun(
    record: InstanceRecord, host: str | None, timeout: float, now: float
) -> dict[str, Any]:
    """The record's fields as a move of it begins (a resize, cold or live
    migration, evacuation): a new request id and the migration named after it,
    the source where the instance is now, the admin-named ``host`` if any,
    nothing tried or re-driven yet, no fault, the deadline ``timeout`` out.
    (The move's state, task state and own fields go with these.)"""
    request_id = f"req-{uuidlib.uuid4()}"
    return {
        "request_id": request_id,
        "migration_uuid": migration_uuid_for(record.uuid, request_id),
        "source_host": record.host,
        "source_node": record.node,
        "source_availability_zone": record.availability_zone,
        "requested_destination": Destination(host=host).to_primitive() if host else None,
        "attempts": 0,
        "tried_hosts": (),
        "redrives": 0,
        "fault": None,
        "fault_details": None,
        "updated_at": now,
        "deadline": now + timeout,
    }


def end_move(
    store: InstanceStore, record: InstanceRecord, state: str, clock: Clock, **changes: Any
) -> bool:
    """``state`` -> ACTIVE with no move in flight (and ``changes``): the one
    compare-and-set that ends every move, however it ends. False if the
    record was no longer in ``state`` under the move ``record`` names (its
    migration: a later move of the same state is not this one's to end;
    nothing written)."""
    done = store.update_instance(
        record.uuid,
        expected_states=[state],
        expect={"migration_uuid": record.migration_uuid},
        state=ACTIVE,
        task_state=None,
        **{**NO_MOVE, **changes},
        updated_at=clock(),
    )
    return done is not None


def fail_move(
    store: ConductorStore,
    record: InstanceRecord,
    fault: str,
    details: str,
    *,
    clock: Clock = time.time,
) -> bool:
    """A move (RESIZING, MIGRATING or REBUILDING, the ``record``'s state) ->
    ACTIVE on the source with ``fault``; hand the source's allocation back to
    the instance, dropping any destination claim. (An evacuation's source is
    down: the instance is where it was before, and can be evacuated again.)

    ``fault`` and ``details`` are written masked, as :func:`fail_build` writes them.
    False if the move was no longer under way (nothing done).
    """
    assert record.state in MOVE_FAILED_EVENTS, record.state
    fault, details = mask_secrets(fault), mask_secrets(details)
    if not end_move(store, record, record.state, clock, fault=fault, fault_details=details):
        return False
    moved = False
    if record.migration_uuid:
        moved = store.move_allocations(record.migration_uuid, record.uuid, replace=True)
    LOG.info(
        MOVE_FAILED_EVENTS[record.state], instance_uuid=record.uuid, fault=fault, restored=moved
    )
    return True


def finish_evacuate(
    store: ConductorStore,
    record: InstanceRecord,
    host: str,
    node: str | None,
    availability_zone: str | None,
    *,
    clock: Clock = time.time,
) -> bool:
    """REBUILDING -> ACTIVE on ``host``, the destination it was rebuilt on.

    The source's allocation (the migration's) is released first: a conductor
    that dies between the two steps leaves a REBUILDING record whose re-drive
    finds the destination's claim and the rebuild done, and finishes here
    again (nothing is parked twice: see :meth:`Evacuator.send`). False if the
    evacuation was no longer under way (nothing recorded).
    """
    if record.migration_uuid:
        store.release(record.migration_uuid)
    return end_move(
        store,
        record,
        REBUILDING,
        clock,
        **placed_on(host, node or host, availability_zone),
        attempts=record.attempts + 1,
        fault=None,
        fault_details=None,
    )


def finish_live_migration(
    store: ConductorStore,
    record: InstanceRecord,
    host: str,
    node: str,
    availability_zone: str | None,
    *,
    clock: Clock = time.time,
) -> bool:
    """MIGRATING -> ACTIVE on the destination (``host``), then drop the source's
    allocation (the migration's). The instance's own claim, made on the
    destination, is what it holds from then on.

    False if the live migration was no longer under way (nothing done).
    """
    if not end_move(
        store,
        record,
        MIGRATING,
        clock,
        **placed_on(host, node, availability_zone),
        attempts=record.attempts + 1,  # the destination that worked counts, as for a build
    ):
        return False
    released = store.release(record.migration_uuid) if record.migration_uuid else False
    LOG.info(
        "instance_live_migrated",
        instance_uuid=record.uuid,
        host=host,
        source=record.source_host,
        source_released=released,
    )
    return True


def finish_confirm(
    store: InstanceStore, record: InstanceRecord, *, clock: Clock = time.time
) -> bool:
    """RESIZED -> ACTIVE on the destination, with the new flavor."""
    spec = dict(record.request_spec or {})
    if record.new_flavor is not None:
        spec["flavor"] = dict(record.new_flavor)
    return end_move(store, record, RESIZED, clock, request_spec=spec or None)


def finish_revert(
    store: InstanceStore, record: InstanceRecord, *, clock: Clock = time.time
) -> bool:
    """RESIZED -> ACTIVE on the source, with the old flavor."""
    return end_move(
        store,
        record,
        RESIZED,
        clock,
        **placed_on(record.source_host, record.source_node, record.source_availability_zone),
    )


def undo_stale_migration(
    store: PlacementStore, record: InstanceRecord, migration_uuid: str
) -> None:
    """A result for a migration the record is not (or no longer) in.

    It comes from a late copy of a re-driven move that ran after the move
    had ended: that copy parked the instance's allocation on the migration
    again. Hand it back (dropping the claim the copy made), unless another
    move is under way, whose allocations must not be touched.
    """
    if record.state in (RESIZING, RESIZED, MIGRATING, REBUILDING) and record.migration_uuid:
        LOG.error(
            "stale_migration_left",
            instance_uuid=record.uuid,
            migration_uuid=migration_uuid,
            current=record.migration_uuid,
        )
        return
    restored = store.move_allocations(migration_uuid, record.uuid, replace=True)
    LOG.info(
        "stale_migration_undone",
        instance_uuid=record.uuid,
        migration_uuid=migration_uuid,
        restored=restored,
    )


def resize_spec(record: InstanceRecord) -> tuple[RequestSpec, Flavor]:
    """The request spec of a record's resize or cold migration (the new
    flavor, the hosts tried ignored), and the new flavor.

    The hosts a boot was forced to do not steer a move (as Nova resets forced
    destinations for one); the host an admin named for this move, if any, does.
    """
    assert record.request_spec is not None and record.new_flavor is not None
    flavor = Flavor.from_primitive(dict(record.new_flavor))
    spec = RequestSpec.from_primitive(dict(record.request_spec))
    ignore = tuple(dict.fromkeys((*spec.ignore_hosts, *record.tried_hosts)))
    return steered(
        unforced(spec).replace(flavor=flavor, num_instances=1, ignore_hosts=ignore), record
    ), flavor


def steered(spec: RequestSpec, record: InstanceRecord) -> RequestSpec:
    """``spec`` sent to the host an admin named for the record's move in flight,
    if any (kept on the record, never in its request spec)."""
    if not record.requested_destination:
        return spec
    return spec.replace(
        requested_destination=Destination.from_primitive(dict(record.requested_destination))
    )


def unforced(spec: RequestSpec) -> RequestSpec:
    """``spec`` without the hosts its boot was forced or steered to: what a
    move or an unshelve is scheduled with (as Nova resets forced destinations)."""
    return spec.replace(force_hosts=(), force_nodes=(), requested_destination=None)


def move_spec(record: InstanceRecord) -> RequestSpec:
    """The request spec of a record's evacuation or live migration: its own
    flavor and original spec (group, zone, traits, hints), for one instance,
    with its source and the hosts tried ignored, steered only by the host an
    admin named for this move (see :func:`unforced`)."""
    spec = steered(unforced(build_spec(record)), record)
    if record.source_host and record.source_host not in spec.ignore_hosts:
        spec = spec.replace(ignore_hosts=(*spec.ignore_hosts, record.source_host))
    return spec


def build_spec(record: InstanceRecord) -> RequestSpec:
    """The request spec to schedule one instance again (the hosts tried ignored)."""
    assert record.request_spec is not None
    spec = RequestSpec.from_primitive(dict(record.request_spec))
    ignore = tuple(dict.fromkeys((*spec.ignore_hosts, *record.tried_hosts)))
    return spec.replace(num_instances=1, ignore_hosts=ignore)


def server_group(store: InstanceStore, group_uuid: str) -> ServerGroup:
    """An existing server group, as its members' records hold it (policy and
    ``max_server_per_host``): the store keeps a group's members and hosts, and
    its definition travels in each member's request spec, as Nova's
    ``RequestSpec.instance_group`` does. Read a page of records at a time
    until the first member; a DELETED member still defines its group.

    :raises InvalidRequest: no record names the group (a new group needs its
        policy: ``boot --group-policy``).
    """
    for record in store.scan_instances():
        group = (record.request_spec or {}).get("group")
        if isinstance(group, Mapping) and group.get("uuid") == group_uuid:
            return ServerGroup.from_primitive(group)
    raise InvalidRequest(
        reason=f"no instance is in server group {group_uuid}: a new group needs "
        "--group-policy (boot), not --group"
    )
