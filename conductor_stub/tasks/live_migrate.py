"""The conductor side of a live migration: start it, send it, wait for it.

``start`` turns an ACTIVE instance MIGRATING (a compare-and-set: two moves
of one instance cannot both start) and names the migration after the
request id; ``send`` is the task itself (Nova's LiveMigrationTask):

1. **Park the source.** The instance's allocation moves to the migration
   consumer (once: a repeat finds it moved), so the instance holds nothing
   and the destination can be claimed for it.
2. **Select a destination** with ``select_destinations`` (which publishes
   ``scheduler.select_destinations.start`` / ``.end``): the instance's own
   flavor and original request spec (group, zone, traits, hints), never the
   source, with alternates; a host an admin named is the spec's
   ``requested_destination``, so it still passes capacity, the filters and
   the atomic claim. The destination is claimed for the instance.
3. **Cast the pre-checks** to the destination
   (``check_can_live_migrate_destination``), which has the source checked
   too and then migrates. A failed pre-check releases that destination's
   claim and comes back to :class:`~conductor_stub.manager.ConductorEndpoint`
   (``live_migration_precheck_failed``), which claims the next alternate;
   ``live_migrated`` lands the instance (the source's allocation dropped).

Nothing placed (no valid host, a refusal): the instance goes back ACTIVE
on its source with the source's allocation handed back and a fault
(:func:`conductor_stub.records.fail_move`). The request is sent with a
deadline; ``send`` is also what the sweeper (:mod:`conductor_stub.redrive`)
calls to re-drive it: the same request id, so the same migration (its park
a no-op), and the destination the instance holds reused by the scheduler,
never claimed twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from conductor_stub import records
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.base import request_context, wait_for_record
from conductor_stub.tasks.select import select_for_move
from scheduler import policy
from scheduler.exceptions import (
    InvalidRequest,
)
from scheduler.log import bind_request, get_logger
from scheduler.manager import park
from scheduler.objects import (
    ACTIVE,
    LIVE_MIGRATING,
    MIGRATING,
    Destination,
    InstanceRecord,
)
from scheduler.rpc import ComputeClient, RequestContext, SchedulerClient

LOG = get_logger(__name__)


def live_context(record: InstanceRecord) -> RequestContext:
    """The context a live migration is (re-)sent with: the record's own, and an
    admin's when an admin named the host (checked when it started)."""
    ctxt = request_context(record)
    if record.requested_destination:
        ctxt.is_admin = True
        ctxt.roles = list(dict.fromkeys([*ctxt.roles, "admin"]))
    return ctxt


class LiveMigrator:
    """Starts live migrations and (re-)sends them."""

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient,
        compute: ComputeClient,
        settings: ConductorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.compute = compute
        self.settings = settings or ConductorSettings()
        self._clock = clock

    def start(
        self,
        uuid: str,
        *,
        host: str | None = None,
        admin: bool = False,
        block_migration: bool = False,
    ) -> InstanceRecord:
        """ACTIVE -> MIGRATING, then send the live migration.

        :raises InstanceNotFound: no such instance.
        :raises InvalidRequest: not ACTIVE on a host, or ``host`` is its own.
        :raises Forbidden: ``host`` named without ``admin`` (the policy's rule).
        Nothing is changed when any is raised.
        """
        record = self.store.get_instance(uuid)
        if record.state != ACTIVE or not record.host or record.request_spec is None:
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}, not ACTIVE on a "
                "host: it cannot be live-migrated now"
            )
        ctxt = RequestContext.admin() if admin else RequestContext()
        named = Destination(host).to_primitive() if host else None
        asked = replace(record, source_host=record.host, requested_destination=named)
        policy.check_request(ctxt, records.move_spec(asked))
        if host == record.host:
            raise InvalidRequest(
                reason=f"instance {uuid} runs on {host} already: a live migration "
                "needs another host"
            )
        started = self.store.update_instance(
            uuid,
            expected_states=[ACTIVE],
            state=MIGRATING,
            task_state=LIVE_MIGRATING,
            block_migration=block_migration,
            **records.move_begun(
                record, host, self.settings.live_migration_timeout, self._clock()
            ),
        )
        if started is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        LOG.info(
            "live_migration_started",
            instance_uuid=uuid,
            source=record.host,
            requested_host=host,
            block_migration=block_migration,
            migration_uuid=started.migration_uuid,
        )
        self.send(started)
        return self.store.get_instance(uuid)

    def send(self, record: InstanceRecord) -> None:
        """Park the source, select (and claim) a destination, cast its
        pre-checks; or fail the migration back to the source."""
        assert record.migration_uuid is not None and record.source_host is not None
        ctxt = live_context(record)
        with bind_request(
            request_id=ctxt.request_id,
            instance_uuid=record.uuid,
            migration_uuid=record.migration_uuid,
        ):
            spec = records.move_spec(record)
            try:
                park(self.store, record.uuid, record.migration_uuid, "live-migrate")
            except InvalidRequest as exc:
                records.fail_move(
                    self.store,
                    record,
                    policy.user_reason(exc),
                    policy.admin_details(exc),
                    clock=self._clock,
                )
                return
            selections = select_for_move(
                self.store, self.scheduler, ctxt, record, spec, "live_migration", clock=self._clock
            )
            if selections is None:
                return
            primary, alternates = selections[0], selections[1:]
            LOG.info(
                "live_migration_scheduled",
                host=primary.host,
                alternates=[a.host for a in alternates],
            )
            self.compute.check_can_live_migrate_destination(
                ctxt,
                record.uuid,
                record.migration_uuid,
                spec,
                primary,
                alternates,
                record.source_host,
                record.block_migration,
            )

    def wait(self, uuid: str, timeout: float, poll: float = 0.1) -> tuple[InstanceRecord, bool]:
        """Poll until the instance is no longer MIGRATING; (record, timed out?)."""
        return wait_for_record(self.store, uuid, lambda r: r.state != MIGRATING, timeout, poll)


def summary(record: InstanceRecord) -> dict[str, object]:
    """What ``conductor-stub live-migrate`` prints of an instance."""
    return {
        "uuid": record.uuid,
        "state": record.state,
        "task_state": record.task_state,
        "host": record.host,
        "availability_zone": record.availability_zone,
        "migration_uuid": record.migration_uuid,
        "source_host": record.source_host,
        "requested_host": (record.requested_destination or {}).get("host"),
        "attempts": record.attempts,
        "tried_hosts": list(record.tried_hosts),
        "fault": record.fault,
        "fault_details": record.fault_details,
    }
