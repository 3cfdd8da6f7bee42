"""What each of the conductor's RPC methods expects of the instance's record.

One function per step, from the method's arguments by name
(:func:`scheduler.steps.guarded`); the guard checks it in the store before
the method runs, and the method's own write is a compare-and-set on the
state it expects.

===============================  =============================================
step                             due when the record says
===============================  =============================================
build_succeeded                  BUILDING with its claim on that host (or
                                 ERROR: a late attempt's claim is released)
schedule_failed                  BUILDING (each instance named; checked by
                                 the method, one instance at a time)
reschedule                       BUILDING; with a migration, a move under
                                 that migration, or a migration of this very
                                 instance (a late copy of a re-driven move)
resize_result                    as reschedule's move
live_migration_precheck_failed   as reschedule's move
live_migrated                    MIGRATING under that migration, its claim
                                 on the destination
rebuild_result                   REBUILDING under that migration (its claim
                                 on the destination when it succeeded)
resize_confirmed                 RESIZED, confirming, under that migration,
                                 which holds nothing any more
resize_reverted                  RESIZED, reverting, under that migration,
                                 which holds nothing any more, the claim
                                 back on the source
instance_terminated              DELETING, waiting on that host
instance_shelved                 SHELVING on that host
===============================  =============================================

A message naming a migration that is not the record's current one is a
late copy of a re-driven move only if the migration is this instance's
own (:func:`scheduler.steps.owns_migration`: derived from the instance and
the move's request id, which the copy carries); one naming another consumer
(another instance, another instance's migration) is refused, so no step
moves an allocation that is not the instance's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.objects import (
    BUILDING,
    DELETING,
    ERROR,
    MIGRATING,
    REBUILDING,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    SHELVING,
    InstanceRecord,
)
from scheduler.steps import Step, holds_on, owns_migration

Args = Mapping[str, Any]


def _request_id(a: Args) -> str | None:
    return getattr(a.get("ctxt"), "request_id", None)


def build_succeeded(_: Any, a: Args) -> Step:
    return Step(
        "build_succeeded",
        a["instance_uuid"],
        (BUILDING, ERROR),
        claim_on=a["host"],
    )


def schedule_failed_step(instance_uuid: str) -> Step:
    return Step("schedule_failed", instance_uuid, (BUILDING,))


def _own_migration(
    instance_uuid: str, migration_uuid: str | None, request_id: str | None
) -> Callable[[InstanceRecord], str | None]:
    """The rule for a result naming ``migration_uuid``: the record's current
    migration, or one of this instance's own (a late copy's)."""

    def check(record: InstanceRecord) -> str | None:
        if not migration_uuid or record.migration_uuid == migration_uuid:
            return None
        if owns_migration(instance_uuid, migration_uuid, request_id):
            return None
        return (
            f"migration {migration_uuid} is not this instance's (its is {record.migration_uuid})"
        )

    return check


def _move_result(name: str, a: Args) -> Step:
    uuid = a["instance_uuid"]
    return Step(name, uuid, None, check=_own_migration(uuid, a["migration_uuid"], _request_id(a)))


def reschedule(_: Any, a: Args) -> Step:
    if a.get("migration_uuid"):
        return _move_result("reschedule", a)
    return Step("reschedule", a["instance_uuid"], (BUILDING,))


def resize_result(_: Any, a: Args) -> Step:
    return _move_result("resize_result", a)


def live_migration_precheck_failed(_: Any, a: Args) -> Step:
    return _move_result("live_migration_precheck_failed", a)


def live_migrated(_: Any, a: Args) -> Step:
    return Step(
        "live_migrated",
        a["instance_uuid"],
        (MIGRATING,),
        migration_uuid=a["migration_uuid"],
        claim_on=a["host"],
    )


def rebuild_result(_: Any, a: Args) -> Step:
    return Step(
        "rebuild_result",
        a["instance_uuid"],
        (REBUILDING,),
        migration_uuid=a["migration_uuid"],
        claim_on=a["host"] if a["success"] else None,
    )


def resize_confirmed(endpoint: Any, a: Args) -> Step:
    migration = a["migration_uuid"]

    def released(_: InstanceRecord) -> str | None:
        if endpoint.store.get_consumer(migration) is not None:
            return "the source's allocation is not released"
        return None

    return Step(
        "resize_confirmed",
        a["instance_uuid"],
        (RESIZED,),
        (RESIZE_CONFIRMING,),
        migration_uuid=migration,
        check=released,
    )


def resize_reverted(endpoint: Any, a: Args) -> Step:
    uuid, migration = a["instance_uuid"], a["migration_uuid"]

    def handed_back(record: InstanceRecord) -> str | None:
        if endpoint.store.get_consumer(migration) is not None:
            return "the source's allocation is not handed back"
        if not record.source_host or not holds_on(endpoint.store, uuid, record.source_host):
            return f"no claim on the source {record.source_host}"
        return None

    return Step(
        "resize_reverted",
        uuid,
        (RESIZED,),
        (RESIZE_REVERTING,),
        migration_uuid=migration,
        check=handed_back,
    )


def instance_terminated(_: Any, a: Args) -> Step:
    return Step(
        "instance_terminated", a["instance_uuid"], (DELETING,), host=a["host"], pending=True
    )


def instance_shelved(_: Any, a: Args) -> Step:
    return Step(
        "instance_shelved", a["instance_uuid"], (SHELVING,), on_host="host", host=a["host"]
    )
