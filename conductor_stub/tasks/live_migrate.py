"""A live migration: start it, send it, take its results, wait for it.

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
   claim and comes back (``live_migration_precheck_failed``): it is
   rescheduled as every rescheduling operation is
   (:mod:`conductor_stub.tasks.base`), the next alternate claimed and its
   pre-checks cast there; with alternates off, or none of them left to
   claim, the live migration is sent again (the hosts tried ignored), up to
   ``max_attempts`` destinations. ``live_migrated`` lands the instance:
   ACTIVE on the destination, the source's allocation dropped.

Nothing placed (no valid host, a refusal): the instance goes back ACTIVE
on its source with the source's allocation handed back and a fault
(:func:`conductor_stub.records.fail_move`). The request is sent with a
deadline; ``send`` is also what the sweeper (:mod:`conductor_stub.redrive`)
calls to re-drive it: the same request id, so the same migration (its park
a no-op), and the destination the instance holds reused by the scheduler,
never claimed twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conductor_stub import records
from conductor_stub.tasks import base
from conductor_stub.tasks.base import ReschedulingTask, Retry, request_context, wait_for_record
from scheduler import policy
from scheduler.exceptions import InvalidRequest
from scheduler.log import bind_request, get_logger
from scheduler.manager import park
from scheduler.objects import (
    ACTIVE,
    LIVE_MIGRATING,
    MIGRATING,
    Destination,
    InstanceRecord,
    RequestSpec,
    Selection,
)
from scheduler.rpc import RequestContext
from scheduler.steps import holds_on

LOG = get_logger(__name__)


def live_context(record: InstanceRecord) -> RequestContext:
    """The context a live migration is (re-)sent with: the record's own, and an
    admin's when an admin named the host (checked when it started)."""
    ctxt = request_context(record)
    if record.requested_destination:
        ctxt.is_admin = True
        ctxt.roles = list(dict.fromkeys([*ctxt.roles, "admin"]))
    return ctxt


class LiveMigrator(ReschedulingTask):
    """Starts live migrations, (re-)sends them and takes their results."""

    state = MIGRATING
    kind = "live_migration"

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
                self.refuse_move(record, exc)
                return
            selections = self.select_move(ctxt, record, spec, "live_migration")
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

    # --- results --------------------------------------------------------------------

    def timeout(self) -> float:
        return self.settings.live_migration_timeout

    def cast_to(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        """Cast the pre-checks to the first of ``hosts``."""
        record = retry.record
        assert record.migration_uuid is not None and record.source_host is not None
        LOG.info("live_migration_rescheduled", alternate=hosts[0].host, left=len(hosts) - 1)
        self.compute.check_can_live_migrate_destination(
            ctxt,
            record.uuid,
            record.migration_uuid,
            spec,
            hosts[0],
            hosts[1:],
            record.source_host,
            record.block_migration,
        )

    def ask_again(
        self, ctxt: Any, retry: Retry, spec: RequestSpec, refused: Sequence[str]
    ) -> None:
        """Send the live migration again: the park a no-op, the hosts tried
        ignored (its failure says so)."""
        self.send(retry.record)

    def can_ask_again(self) -> bool:
        return self.scheduler is not None

    def live_migrated(
        self, uuid: str, migration_uuid: str, host: str, node: str, availability_zone: str | None
    ) -> None:
        """The instance runs on ``host`` and no longer on its source: ACTIVE
        there, the source's allocation dropped."""
        record = self.store.get_instance(uuid)
        if record.migration_uuid != migration_uuid or record.state != MIGRATING:
            LOG.info("live_migrated_duplicate", state=record.state)
            return
        if not holds_on(self.store, uuid, host):
            LOG.info("stale_live_migration_result_ignored")
            return
        if not records.finish_live_migration(
            self.store, record, host, node, availability_zone, clock=self._clock
        ):
            LOG.info("live_migrated_late")

    def wait(self, uuid: str, timeout: float, poll: float = 0.1) -> tuple[InstanceRecord, bool]:
        """Poll until the instance is no longer MIGRATING; (record, timed out?)."""
        return wait_for_record(self.store, uuid, lambda r: r.state != MIGRATING, timeout, poll)


def summary(record: InstanceRecord) -> dict[str, object]:
    """What ``conductor-stub live-migrate`` prints of an instance."""
    return base.summary(
        record,
        availability_zone=record.availability_zone,
        migration_uuid=record.migration_uuid,
        source_host=record.source_host,
        requested_host=(record.requested_destination or {}).get("host"),
        attempts=record.attempts,
        tried_hosts=list(record.tried_hosts),
        fault=record.fault,
        fault_details=record.fault_details,
    )
