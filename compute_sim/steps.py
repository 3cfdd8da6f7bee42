"""What each of the compute's RPC methods expects of the instance's record.

One function per step, from the method's arguments by name
(:func:`scheduler.steps.guarded`); the guard checks it in the store before
the method runs, and the method checks it again where time has passed
(a build's end). Hosts are the ones this process serves (the guard's).

==================================  ==========================================
step                                due when the record says
==================================  ==========================================
build_and_run_instance              BUILDING, its claim on this host, not
                                    waiting on the instances it preempts
rebuild_instance                    REBUILDING under that migration, its claim
                                    on this host (the destination)
prep_resize                         RESIZING under that migration, its claim
                                    on this host (the destination)
resize_instance                     RESIZING under that migration, its source
                                    here, its claim on the destination named
finish_resize                       RESIZING under that migration, its claim
                                    on this host (the destination)
confirm_resize                      RESIZED, confirming, under that migration,
                                    its source here
revert_resize                       RESIZED, reverting, under that migration,
                                    its host (the destination) here
finish_revert_resize                RESIZED, reverting, under that migration,
                                    its source this host, its claim back there
check_can_live_migrate_destination  MIGRATING under that migration, its claim
                                    on this host (the destination)
check_can_live_migrate_source       MIGRATING under that migration, its source
                                    this host, its claim on the destination
post_live_migration_at_destination  MIGRATING under that migration, its claim
                                    on this host (the destination)
terminate_instance                  DELETING, waiting on this host
shelve_offload_instance             SHELVING on this host
reap_instance                       settled (or gone), and keeps no VM on this
                                    host (the reconciler's own rule, read again)
==================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETING,
    FINAL_STATES,
    MIGRATING,
    PREEMPTING,
    REBUILDING,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    SHELVING,
    InstanceRecord,
    evacuated_from,
)
from scheduler.steps import Step

Args = Mapping[str, Any]


def selected_host(selection: Any) -> str | None:
    """The host a Selection's primitive names (None: it names none)."""
    host = selection.get("host") if isinstance(selection, Mapping) else None
    return host if isinstance(host, str) else None


def _not_preempting(record: InstanceRecord) -> str | None:
    """A boot whose claim evicted others is built only once their VMs are gone
    (the conductor moves it on from ``preempting`` then): the host never runs
    a victim and its preemptor over capacity."""
    if record.task_state == PREEMPTING:
        return f"it waits on the instances it preempts: {', '.join(record.victims)}"
    return None


def build_step(instance_uuid: str, host: str | None) -> Step:
    return Step(
        "build_and_run_instance",
        instance_uuid,
        (BUILDING,),
        host=host,
        claim_on=host,
        check=_not_preempting,
    )


def build(_: Any, a: Args) -> Step:
    return build_step(a["instance_uuid"], selected_host(a["selection"]))


def rebuild_step(instance_uuid: str, migration_uuid: str, host: str | None) -> Step:
    return Step(
        "rebuild_instance",
        instance_uuid,
        (REBUILDING,),
        migration_uuid=migration_uuid,
        host=host,
        claim_on=host,
    )


def rebuild(_: Any, a: Args) -> Step:
    return rebuild_step(a["instance_uuid"], a["migration_uuid"], selected_host(a["selection"]))


def prep_resize_step(instance_uuid: str, migration_uuid: str, host: str | None) -> Step:
    return _on_destination("prep_resize", RESIZING, instance_uuid, migration_uuid, host)


def prep_resize(_: Any, a: Args) -> Step:
    return prep_resize_step(a["instance_uuid"], a["migration_uuid"], selected_host(a["selection"]))


def finish_resize(_: Any, a: Args) -> Step:
    return _on_destination(
        "finish_resize", RESIZING, a["instance_uuid"], a["migration_uuid"], a["dest_host"]
    )


def check_destination_step(instance_uuid: str, migration_uuid: str, host: str | None) -> Step:
    return _on_destination(
        "check_can_live_migrate_destination", MIGRATING, instance_uuid, migration_uuid, host
    )


def check_destination(_: Any, a: Args) -> Step:
    return check_destination_step(
        a["instance_uuid"], a["migration_uuid"], selected_host(a["selection"])
    )


def post_live_migration(_: Any, a: Args) -> Step:
    return _on_destination(
        "post_live_migration_at_destination",
        MIGRATING,
        a["instance_uuid"],
        a["migration_uuid"],
        selected_host(a["selection"]),
    )


def _on_destination(
    name: str, state: str, instance_uuid: str, migration_uuid: str, host: str | None
) -> Step:
    """A move's step on its destination: the instance's claim is there."""
    return Step(
        name,
        instance_uuid,
        (state,),
        migration_uuid=migration_uuid,
        host=host,
        claim_on=host,
    )


def resize_instance(_: Any, a: Args) -> Step:
    return Step(
        "resize_instance",
        a["instance_uuid"],
        (RESIZING,),
        migration_uuid=a["migration_uuid"],
        on_host="source_host",
        claim_on=a["dest_host"],
    )


def check_source(_: Any, a: Args) -> Step:
    return Step(
        "check_can_live_migrate_source",
        a["instance_uuid"],
        (MIGRATING,),
        migration_uuid=a["migration_uuid"],
        on_host="source_host",
        host=a["source_host"],
        claim_on=selected_host(a["selection"]),
    )


def confirm_resize_step(instance_uuid: str, migration_uuid: str) -> Step:
    return Step(
        "confirm_resize",
        instance_uuid,
        (RESIZED,),
        (RESIZE_CONFIRMING,),
        migration_uuid=migration_uuid,
        on_host="source_host",
    )


def confirm_resize(_: Any, a: Args) -> Step:
    return confirm_resize_step(a["instance_uuid"], a["migration_uuid"])


def revert_resize_step(instance_uuid: str, migration_uuid: str) -> Step:
    return Step(
        "revert_resize",
        instance_uuid,
        (RESIZED,),
        (RESIZE_REVERTING,),
        migration_uuid=migration_uuid,
        on_host="host",
    )


def revert_resize(_: Any, a: Args) -> Step:
    return revert_resize_step(a["instance_uuid"], a["migration_uuid"])


def finish_revert_resize(_: Any, a: Args) -> Step:
    return Step(
        "finish_revert_resize",
        a["instance_uuid"],
        (RESIZED,),
        (RESIZE_REVERTING,),
        migration_uuid=a["migration_uuid"],
        on_host="source_host",
        host=a["source_host"],
        claim_on=a["source_host"],
    )


def terminate(_: Any, a: Args) -> Step:
    return Step(
        "terminate_instance", a["instance_uuid"], (DELETING,), host=a["host"], pending=True
    )


def shelve_offload(_: Any, a: Args) -> Step:
    return Step(
        "shelve_offload_instance", a["instance_uuid"], (SHELVING,), on_host="host", host=a["host"]
    )


def reap(_: Any, a: Args) -> Step:
    host = a["host"]

    def stray(record: InstanceRecord) -> str | None:
        if record.state == ACTIVE and not evacuated_from(record, host):
            return f"its record places it on {record.host}"
        return None

    return Step(
        "reap_instance", a["instance_uuid"], FINAL_STATES, host=host, check=stray, absent_ok=True
    )
