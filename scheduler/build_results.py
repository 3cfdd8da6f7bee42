"""A build's result, recorded by one rule whoever reports it.

A build ends on a host; the instance's record says so by
:func:`record_built`, whether the result reaches the conductor as a cast
(:meth:`conductor_stub.manager.ConductorEndpoint.build_succeeded`) or the
compute writes it to the store itself (``compute-sim --build-results
store``). Both use this module, so neither imports the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from scheduler.log import get_logger
from scheduler.objects import ACTIVE, ERROR
from scheduler.store import InstanceStore, PlacementStore
from scheduler.store.base import BUILT, STALE

LOG = get_logger(__name__)


class BuildResultStore(PlacementStore, InstanceStore, Protocol):
    """What recording a build's result uses: the instance's record, and its claim."""


def placed_on(
    host: str | None = None, node: str | None = None, availability_zone: str | None = None
) -> dict[str, Any]:
    """The record's fields of where a build is: host, node and zone, always
    written together, so that no zone outlives the host it was the zone of
    (nothing given: nowhere)."""
    return {"host": host, "node": node, "availability_zone": availability_zone}


def record_built(
    store: BuildResultStore,
    instance_uuid: str,
    host: str,
    node: str,
    availability_zone: str | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Built on ``host`` (``node``, ``availability_zone``): the instance's record
    goes ACTIVE there, if it is BUILDING and its claim is on that very host (a
    result from a stale attempt is ignored; the live one reports for itself);
    an instance already in ERROR (given up, built by a late attempt) has what
    it holds released. The one rule for a build's result, whether it reaches
    the conductor as a cast
    (:meth:`conductor_stub.manager.ConductorEndpoint.build_succeeded`) or the
    compute writes it to the store itself (``compute-sim --build-results
    store``); the caller binds the request's logging context. The first part
    (BUILDING, the claim on that host, ACTIVE) is checked and written by the
    store in one round trip (:meth:`~scheduler.store.InstanceStore.mark_built`)."""
    # Checked (BUILDING, the claim on ``host``) and written in one round trip.
    outcome, record = store.mark_built(
        instance_uuid,
        host,
        state=ACTIVE,
        task_state=None,
        **placed_on(host, node, availability_zone),
        deadline=None,
        updated_at=clock(),
    )
    if outcome == BUILT:
        assert record is not None
        LOG.info("instance_active", attempts=record.attempts)
        return
    if record is None:
        # Never recorded, or lost by the store: the reconciler decides
        # from the host's report (re-creates the record or reaps the VM).
        LOG.warning("build_result_for_unknown_instance")
        return
    if outcome == STALE:
        LOG.info("stale_build_result_ignored")
        return
    if record.state == ERROR:
        # Given up, then built by a late attempt: what it holds is no one's.
        released = store.release(instance_uuid)
        LOG.info("late_build_result_released", released=released)
        return
    LOG.info("late_build_result_ignored", state=record.state)
