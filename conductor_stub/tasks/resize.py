"""A resize or cold migration: start it, follow its steps, confirm or
revert it, wait for it.

A cold migration is a resize to the instance's own flavor, as in Nova: same
request spec (group, zone, traits, hints), never the source unless
``allow_resize_to_same_host``, with alternates, RESIZED until confirmed or
reverted. An admin may name the destination host (``requested_destination``,
kept on the record for the re-drives, so it still passes the filters and the
atomic claim).

``start`` turns an ACTIVE instance RESIZING (a compare-and-set: two resizes
of one instance cannot both start), names the migration after the request
id and casts ``resize`` to the scheduler, which parks the instance's
allocation on the migration consumer, claims the new flavor on a
destination and casts ``prep_resize`` there. The compute nodes walk prep ->
resize -> finish, and ``resize_result`` records the instance RESIZED on the
destination (or, failed, back ACTIVE on its source with the fault). A
destination that fails its prep releases its claim there and is
rescheduled (``reschedule`` naming the migration): the next alternate
claimed and ``prep_resize`` cast there, or the scheduler asked again, as
every rescheduling operation does (:mod:`conductor_stub.tasks.base`); none
left, the instance goes back ACTIVE on its source with "max retries
exceeded". ``confirm`` then drops the source's allocation (cast to the
source), ``revert`` drops the destination's and hands the source's back
(cast to the destination); the compute answers ``resize_confirmed`` or
``resize_reverted`` and the record is ACTIVE with nothing pending.

Each request is sent with a deadline; the ``send_*`` methods are also what
the sweeper (:mod:`conductor_stub.redrive`) calls to re-drive one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conductor_stub import records
from conductor_stub.records import resize_spec
from conductor_stub.tasks import base
from conductor_stub.tasks.base import ReschedulingTask, Retry, request_context, wait_for_record
from scheduler import policy
from scheduler.exceptions import CannotResizeToSameFlavor, InvalidRequest
from scheduler.log import get_logger
from scheduler.objects import (
    ACTIVE,
    RESIZE_CONFIRMING,
    RESIZE_PREP,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    Destination,
    Flavor,
    InstanceRecord,
    RequestSpec,
    Selection,
)
from scheduler.rpc import RequestContext
from scheduler.steps import holds_on

LOG = get_logger(__name__)


class Resizer(ReschedulingTask):
    """Starts, confirms and reverts resizes, re-sends their requests, and
    takes their results."""

    state = RESIZING
    kind = "resize"

    def resize(self, uuid: str, flavor: Flavor) -> InstanceRecord:
        """A resize asked for by a user: to another flavor than the one the
        instance has, as Nova's compute API demands (a move to its own flavor
        is a cold migration, :meth:`migrate`); then :meth:`start`.

        :raises CannotResizeToSameFlavor: ``flavor`` is the instance's own
            (by name, as Nova compares flavor ids); nothing is changed.
        :raises InvalidRequest: see :meth:`begin`.
        """
        record = self.store.get_instance(uuid)
        if record.request_spec is not None and own_flavor(record).name == flavor.name:
            raise CannotResizeToSameFlavor(uuid=uuid, flavor=flavor.name)
        return self.start(uuid, flavor)

    def start(
        self, uuid: str, flavor: Flavor, *, host: str | None = None, admin: bool = False
    ) -> InstanceRecord:
        """ACTIVE -> RESIZING, then cast the resize (to ``host`` if an admin
        names one; it still passes the filters and the atomic claim): see
        :meth:`begin`."""
        started = self.begin(uuid, flavor, host=host, admin=admin)
        self.send_resize(started)
        return started

    def begin(
        self, uuid: str, flavor: Flavor, *, host: str | None = None, admin: bool = False
    ) -> InstanceRecord:
        """ACTIVE -> RESIZING, the request recorded with its deadline and not yet
        sent (:meth:`send_resize` sends it; so does the sweeper, past the
        deadline).

        :raises InvalidRequest: the instance is not ACTIVE on a host, or
            ``host`` is the one it runs on.
        :raises Forbidden: ``host`` named without an admin context.
        """
        record = self.store.get_instance(uuid)
        if record.state != ACTIVE or not record.host or record.request_spec is None:
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}, not ACTIVE on a "
                "host: it cannot be moved now"
            )
        if host is not None:
            if host == record.host:
                raise InvalidRequest(
                    reason=f"instance {uuid} already runs on {host}: name another host"
                )
            policy.check_request(
                RequestContext(is_admin=admin),
                RequestSpec.from_primitive(dict(record.request_spec)).replace(
                    requested_destination=Destination(host=host)
                ),
            )
        started = self.store.update_instance(
            uuid,
            expected_states=[ACTIVE],
            state=RESIZING,
            task_state=RESIZE_PREP,
            new_flavor=flavor.to_primitive(),
            is_admin=admin,  # this move's rights, for its re-drives
            **records.move_begun(record, host, self.settings.resize_timeout, self._clock()),
        )
        if started is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        LOG.info(
            "resize_started",
            instance_uuid=uuid,
            flavor=flavor.name,
            source=record.host,
            destination=host,
            migration_uuid=started.migration_uuid,
        )
        return started

    def migrate(
        self, uuid: str, *, host: str | None = None, admin: bool = False
    ) -> InstanceRecord:
        """A cold migration: a resize to the instance's own flavor (as in Nova),
        confirmed or reverted the same way."""
        record = self.store.get_instance(uuid)
        return self.start(uuid, own_flavor(record), host=host, admin=admin)

    def send_resize(self, record: InstanceRecord) -> None:
        spec, flavor = resize_spec(record)
        assert record.source_host is not None
        assert self.scheduler is not None, "a resize is sent with a scheduler client"
        self.scheduler.resize(
            request_context(record), record.uuid, record.source_host, flavor, spec
        )

    def confirm(self, uuid: str) -> InstanceRecord:
        return self._finish(uuid, RESIZE_CONFIRMING, self.send_confirm)

    def revert(self, uuid: str) -> InstanceRecord:
        return self._finish(uuid, RESIZE_REVERTING, self.send_revert)

    def _finish(
        self, uuid: str, task_state: str, send: Callable[[InstanceRecord], None]
    ) -> InstanceRecord:
        record = self.store.get_instance(uuid)
        if record.state != RESIZED or record.task_state is not None:
            doing = f" ({record.task_state})" if record.task_state else ""
            action = "confirm" if task_state == RESIZE_CONFIRMING else "revert"
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}{doing}, not RESIZED: "
                f"nothing to {action}"
            )
        now = self._clock()
        updated = self.store.update_instance(
            uuid,
            expected_states=[RESIZED],
            task_state=task_state,
            redrives=0,
            updated_at=now,
            deadline=now + self.settings.resize_timeout,
        )
        if updated is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        send(updated)
        return updated

    def send_confirm(self, record: InstanceRecord) -> None:
        assert record.source_host is not None and record.migration_uuid is not None
        self.compute.confirm_resize(
            request_context(record), record.source_host, record.uuid, record.migration_uuid
        )

    def send_revert(self, record: InstanceRecord) -> None:
        assert record.host is not None and record.migration_uuid is not None
        self.compute.revert_resize(
            request_context(record), record.host, record.uuid, record.migration_uuid
        )

    # --- results --------------------------------------------------------------------

    def resize_result(
        self,
        uuid: str,
        migration_uuid: str,
        host: str | None,
        success: bool,
        reason: str | None,
        details: str | None,
        availability_zone: str | None,
    ) -> None:
        """The resize finished on ``host``, in ``availability_zone``: RESIZED
        there, the destination that worked counted; or it failed: back ACTIVE
        on the source with the fault."""
        record = self.store.get_instance(uuid)
        if not migration_uuid:  # refused before any migration was named
            migration_uuid = record.migration_uuid or ""
        if record.migration_uuid != migration_uuid:
            if migration_uuid:
                records.undo_stale_migration(self.store, record, migration_uuid)
            return
        if record.state != RESIZING:
            LOG.info("resize_result_duplicate", state=record.state)
            return
        if not success:
            records.fail_move(
                self.store,
                record,
                reason or "resize failed",
                details or reason or "",
                clock=self._clock,
            )
            return
        assert host is not None
        if not holds_on(self.store, uuid, host):
            LOG.info("stale_resize_result_ignored")
            return
        done = self.store.update_instance(
            uuid,
            expected_states=[RESIZING],
            state=RESIZED,
            task_state=None,
            **records.placed_on(host, host, availability_zone),
            attempts=record.attempts + 1,  # the destination that worked counts
            deadline=None,
            updated_at=self._clock(),
        )
        LOG.info("instance_resized" if done else "resize_result_late", source=record.source_host)

    def timeout(self) -> float:
        return self.settings.resize_timeout

    def cast_to(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        """Prep the resize, to the flavor of ``spec``, on the first of ``hosts``."""
        LOG.info("resize_rescheduled", alternate=hosts[0].host, left=len(hosts) - 1)
        self._prep(ctxt, retry, spec, hosts)

    def cast_again(self, ctxt: Any, retry: Retry, spec: RequestSpec, host: Selection) -> None:
        LOG.info("resize_rescheduled_via_scheduler", host=host.host, attempts=retry.attempts)
        self._prep(ctxt, retry, spec, [host])

    def _prep(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        uuid, migration_uuid = retry.record.uuid, retry.record.migration_uuid
        assert migration_uuid is not None
        self.compute.prep_resize(
            ctxt, uuid, migration_uuid, spec.flavor, spec, hosts[0], hosts[1:]
        )

    def retry_spec(self, retry: Retry, spec: RequestSpec) -> RequestSpec:
        """The resize's own request spec (:func:`~conductor_stub.records.resize_spec`:
        the new flavor, the hosts tried ignored), the source ignored too unless
        ``allow_resize_to_same_host``."""
        asked, _ = resize_spec(retry.record)
        source = retry.record.source_host
        if not self.settings.allow_resize_to_same_host and source:
            asked = asked.replace(ignore_hosts=(*asked.ignore_hosts, source))
        return asked

    def resize_confirmed(self, uuid: str, migration_uuid: str) -> None:
        """The source dropped the instance: ACTIVE on the destination, with the
        new flavor."""
        record = self.store.get_instance(uuid)
        if record.migration_uuid != migration_uuid or record.state != RESIZED:
            LOG.info("resize_confirmed_duplicate", state=record.state)
            return
        done = records.finish_confirm(self.store, record, clock=self._clock)
        LOG.info("resize_confirmed" if done else "resize_confirmed_late", host=record.host)

    def resize_reverted(self, uuid: str, migration_uuid: str) -> None:
        """The destination dropped the instance and handed the source's
        allocation back: ACTIVE on the source, with the old flavor."""
        record = self.store.get_instance(uuid)
        if record.migration_uuid != migration_uuid or record.state != RESIZED:
            LOG.info("resize_reverted_duplicate", state=record.state)
            return
        done = records.finish_revert(self.store, record, clock=self._clock)
        LOG.info("resize_reverted" if done else "resize_reverted_late", host=record.source_host)

    def wait(
        self, uuid: str, until: Callable[[InstanceRecord], bool], timeout: float, poll: float = 0.1
    ) -> tuple[InstanceRecord, bool]:
        """Poll the record until ``until`` holds; (record, timed out?)."""
        return wait_for_record(self.store, uuid, until, timeout, poll)


def settled(record: InstanceRecord) -> bool:
    """The resize is no longer under way: RESIZED, or back to ACTIVE (failed)."""
    return record.state != RESIZING


def finished(record: InstanceRecord) -> bool:
    """Confirmed or reverted (or never resized): ACTIVE with nothing pending."""
    return record.state == ACTIVE and record.task_state is None


def own_flavor(record: InstanceRecord) -> Flavor:
    """The flavor the instance runs with (:class:`InvalidRequest` for a record
    that has no request spec)."""
    if record.request_spec is None:
        raise InvalidRequest(reason=f"instance {record.uuid} has no request spec to move it with")
    return RequestSpec.from_primitive(dict(record.request_spec)).flavor


def flavor_of(record: InstanceRecord) -> str | None:
    return (
        RequestSpec.from_primitive(dict(record.request_spec)).flavor.name
        if record.request_spec
        else None
    )


def summary(record: InstanceRecord) -> dict[str, object]:
    """What ``conductor-stub resize`` prints of an instance."""
    return base.summary(
        record,
        flavor=flavor_of(record),
        new_flavor=(record.new_flavor or {}).get("name"),
        source_host=record.source_host,
        attempts=record.attempts,
        tried_hosts=list(record.tried_hosts),
        fault=record.fault,
        fault_details=record.fault_details,
    )
