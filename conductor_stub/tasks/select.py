"""Nova's modern flow for placing new instances: ask the scheduler for
destinations (a call: ``scheduler.select_destinations.start`` / ``.end`` are
published for it), then cast each build to its primary with its alternates.

Used by ``conductor-stub boot --mode select_destinations`` and by every
unshelve (a move that asks the scheduler, as in Nova); :func:`select_for_move`
is the same question for a live migration or an evacuation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import oslo_messaging

from conductor_stub import records
from conductor_stub.records import ConductorStore
from scheduler import policy
from scheduler.exceptions import (
    Forbidden,
    InternalError,
    InvalidRequest,
    NoValidHost,
    SchedulerUnavailable,
)
from scheduler.log import get_logger
from scheduler.objects import InstanceRecord, RequestSpec, Selection
from scheduler.rpc import ComputeClient, RequestContext, SchedulerClient

LOG = get_logger(__name__)


def select_and_build(
    store: ConductorStore,
    scheduler: SchedulerClient,
    compute: ComputeClient,
    ctxt: RequestContext,
    spec: RequestSpec,
    uuids: Sequence[str],
    return_alternates: bool = True,
) -> None:
    """Select, then cast the builds. A refusal or no valid host puts the
    instances in ERROR (the user reads what the policy allows, the admin
    details say why); no answer leaves their records' deadlines to re-drive
    them; an instance deleted meanwhile gets no host and no build."""
    try:
        selections = scheduler.select_destinations(
            ctxt, spec, uuids, return_alternates=return_alternates
        )
    except (NoValidHost, InvalidRequest, Forbidden, InternalError) as exc:
        for uuid in uuids:
            records.fail_build(store, uuid, policy.user_reason(exc), policy.admin_details(exc))
        return
    except (oslo_messaging.MessagingTimeout, SchedulerUnavailable) as exc:
        LOG.warning(
            "select_destinations_timed_out", instance_uuids=list(uuids), error=type(exc).__name__
        )
        return
    single = spec.replace(num_instances=1)
    for uuid, per_instance in zip(uuids, selections, strict=True):
        if not per_instance:  # deleted meanwhile: nothing was claimed for it
            continue
        compute.build_and_run_instance(ctxt, uuid, single, per_instance[0], per_instance[1:])


def select_for_move(
    store: ConductorStore,
    scheduler: SchedulerClient,
    ctxt: RequestContext,
    record: InstanceRecord,
    spec: RequestSpec,
    kind: str,
    *,
    return_alternates: bool = True,
    clock: Callable[[], float] = time.time,
) -> list[Selection] | None:
    """A move's destination (claimed for the instance) and its alternates, for
    the ``kind`` of move (``live_migration``, ``evacuate``: what the log lines
    say). None when there is nothing to cast to: refused or no valid host (the
    move failed back to its source, :func:`records.fail_move`), no answer (the
    record's deadline re-drives it), or the instance deleted meanwhile."""
    try:
        [selections] = scheduler.select_destinations(
            ctxt, spec, [record.uuid], return_alternates=return_alternates
        )
    except (NoValidHost, InvalidRequest, Forbidden, InternalError) as exc:
        records.fail_move(
            store, record, policy.user_reason(exc), policy.admin_details(exc), clock=clock
        )
        return None
    except (oslo_messaging.MessagingTimeout, SchedulerUnavailable) as exc:
        # No answer, or not for now: the deadline stands, the sweeper re-drives.
        LOG.warning("move_select_timed_out", move=kind, error=type(exc).__name__)
        return None
    if not selections:  # deleted meanwhile: the delete releases it all
        LOG.info("move_stopped_by_delete", move=kind)
        return None
    return list(selections)
