"""An evacuation: rebuild an instance of a down host elsewhere.

Nova's evacuate is the model: an operator whose compute host has died asks
for its instances to be rebuilt on other hosts. Only instances of a host
whose compute is *down* may be evacuated (judged as the scheduler judges it:
:func:`scheduler.rules.is_up` with ``[scheduler] service_down_time`` against
the service's last heartbeat); running an instance twice is worse than not
running it. An ACTIVE instance only: in Nova STOPPED and ERROR instances may
be evacuated too, but here nothing is STOPPED and an instance in ERROR holds
no allocation and has no host to leave.

``start`` checks all of that (nothing is changed if it refuses), then turns
the instance REBUILDING by a compare-and-set, names the migration after the
request id (:func:`~scheduler.objects.migration_uuid_for`) and calls
:meth:`send`:

1. **Park** the instance's allocation on the down source on the migration
   consumer (its group membership there with it). The instance then holds
   nothing, so the scheduler places it afresh: without the park, its claim
   on the down host would be dropped by the scheduler's own rule for a
   build whose host died (``Engine._release_from_down_host``), source
   allocation and group membership gone before the rebuild has succeeded.
2. **Select** a destination with the instance's own request spec (group,
   zone, traits, hints), the source ignored, alternates returned:
   ``select_destinations``, which publishes its ``.start`` / ``.end`` (and
   an ERROR on failure) like every move's. Strict anti-affinity holds
   against the live members (the claim checks the group); the migration's
   membership on the dead host blocks nothing, since that host is never
   chosen. An admin may name the host (``requested_destination``: it still
   passes every filter and the atomic claim); a non-admin may not
   (:func:`scheduler.policy.check_request`).
3. **Rebuild** on the destination (compute ``rebuild_instance``, RPC 1.6),
   which answers ``rebuild_result`` (conductor RPC 1.6): on success the
   conductor releases the migration (the source's allocation) and records
   the instance ACTIVE on the destination; on failure the rebuild is
   rescheduled as a failed build is (:mod:`conductor_stub.tasks.base`): the
   next alternate claimed and the rebuild cast there, or the scheduler asked
   again, up to ``max_attempts`` destinations.

If no host can take it, the instance is left where it was: ACTIVE on the
down source with the fault (generic; the admin details say why) and the
source's allocation handed back, so it can be evacuated again. Nova puts it
in ERROR; here an instance in ERROR holds nothing, so that would drop the
allocation of an instance that still exists on a host that may come back.

A re-drive (:mod:`conductor_stub.redrive`, on ``[conductor] build_timeout``:
the wait is a rebuild's, which is a build) sends :meth:`send` again with the
same request id, so the same migration: the park is done only while the
instance's allocation is still on the source, and the scheduler reuses the
destination claim the instance holds, so nothing is claimed twice.

When the dead host comes back, its compute destroys the VMs evacuated from
it before it heartbeats again (see :mod:`compute_sim.manager`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from conductor_stub import records
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks import base
from conductor_stub.tasks.base import ReschedulingTask, Retry, request_context, wait_until
from scheduler import policy, rules
from scheduler.exceptions import ConsumerConflict, InvalidRequest, SchedulerError
from scheduler.log import bind_request, get_logger
from scheduler.objects import (
    ACTIVE,
    REBUILD_SCHEDULING,
    REBUILD_SPAWNING,
    REBUILDING,
    Destination,
    InstanceRecord,
    RequestSpec,
    Selection,
)
from scheduler.rpc import ComputeClient, RequestContext, SchedulerClient
from scheduler.steps import holds_on
from scheduler.store import ServiceStore

LOG = get_logger(__name__)


def compute_is_up(store: ServiceStore, host: str, service_down_time: float, now: float) -> bool:
    """Whether ``host``'s compute service is up, as the scheduler judges it (a
    host with no service record is down)."""
    service = store.get_service(host)
    return service is not None and rules.is_up(now, service.last_seen, service_down_time)


class Evacuator(ReschedulingTask):
    """Starts evacuations, (re-)sends their scheduling and rebuild, and takes
    their results."""

    state = REBUILDING
    kind = "rebuild"

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient | None,
        compute: ComputeClient,
        settings: ConductorSettings | None = None,
        service_down_time: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store, scheduler, compute, settings, clock)
        self.service_down_time = service_down_time

    def check(self, uuid: str, host: str | None = None, admin: bool = False) -> InstanceRecord:
        """The record, if it may be evacuated (to ``host``, when named):
        :class:`InstanceNotFound`, :class:`InvalidRequest` or :class:`Forbidden`
        otherwise, and nothing is changed."""
        record = self.store.get_instance(uuid)
        if record.state != ACTIVE or not record.host or record.request_spec is None:
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}, not ACTIVE on a host: "
                "it cannot be evacuated now"
            )
        if compute_is_up(self.store, record.host, self.service_down_time, self._clock()):
            raise InvalidRequest(
                reason=f"compute {record.host} is up: evacuate only instances of a down host"
            )
        if host is not None:
            policy.check_request(
                RequestContext(is_admin=admin),
                RequestSpec.from_primitive(dict(record.request_spec)).replace(
                    requested_destination=Destination(host)
                ),
            )
            if host == record.host:
                raise InvalidRequest(
                    reason=f"host {host} is the instance's own (down) host: name another"
                )
        return record

    def on_host(self, host: str) -> list[InstanceRecord]:
        """The instances ACTIVE on ``host`` (what ``evacuate --from-host`` moves)."""
        return [r for r in self.store.scan_instances() if r.host == host and r.state == ACTIVE]

    def start(self, uuid: str, host: str | None = None, admin: bool = False) -> InstanceRecord:
        """ACTIVE on a down host -> REBUILDING, then :meth:`send`."""
        record = self.check(uuid, host, admin)
        started = self.store.update_instance(
            uuid,
            expected_states=[ACTIVE],
            state=REBUILDING,
            task_state=REBUILD_SCHEDULING,
            is_admin=admin or record.is_admin,
            **records.move_begun(record, host, self.settings.build_timeout, self._clock()),
        )
        if started is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        LOG.info(
            "evacuate_started",
            instance_uuid=uuid,
            source=record.host,
            host=host,
            migration_uuid=started.migration_uuid,
        )
        self.send(started)
        return self.store.get_instance(uuid)

    def send(self, record: InstanceRecord) -> None:
        """Park the source's allocation (once), select a destination, cast the
        rebuild there. No answer from the scheduler leaves the record's
        deadline to re-drive it; no host leaves the instance on its source
        with the fault."""
        assert record.migration_uuid is not None and record.source_host is not None
        ctxt = request_context(record)
        with bind_request(
            request_id=ctxt.request_id,
            instance_uuid=record.uuid,
            migration_uuid=record.migration_uuid,
        ):
            self._park(record)
            spec = records.move_spec(record)
            per_instance = self.select_move(
                ctxt, record, spec, "evacuate", return_alternates=self.settings.return_alternates
            )
            if per_instance is not None:
                self.cast_rebuild(ctxt, record, spec, per_instance)

    def cast_rebuild(
        self,
        ctxt: Any,
        record: InstanceRecord,
        spec: RequestSpec,
        selections: Sequence[Selection],
    ) -> bool:
        """Note the rebuild as cast (if still REBUILDING) and cast it to the first
        of ``selections``, the rest its alternates; False (nothing cast) if the
        evacuation ended meanwhile (a destination just claimed is then the
        delete's, or was dropped when the evacuation was given up)."""
        assert record.migration_uuid is not None
        primary, alternates = selections[0], selections[1:]
        if (
            self.store.update_instance(
                record.uuid,
                expected_states=[REBUILDING],
                task_state=REBUILD_SPAWNING,
                updated_at=self._clock(),
            )
            is None
        ):
            LOG.info("evacuate_ended_meanwhile", host=primary.host)
            return False
        LOG.info("rebuild_cast", host=primary.host, alternates=[a.host for a in alternates])
        self.compute.rebuild_instance(
            ctxt, record.uuid, record.migration_uuid, spec, primary, list(alternates)
        )
        return True

    # --- results --------------------------------------------------------------------

    def rebuild_result(
        self,
        ctxt: Any,
        uuid: str,
        migration_uuid: str,
        host: str,
        success: bool,
        node: str | None,
        availability_zone: str | None,
        reason: str | None,
        request_spec: dict[str, Any] | None,
        host_list: list[dict[str, Any]] | None,
    ) -> None:
        """The rebuild on ``host`` succeeded: the source's allocation goes and the
        instance is ACTIVE there. Or it failed, with the alternates left
        (``host_list``) to try for ``request_spec``: rescheduled."""
        record = self.store.get_instance(uuid)
        if record.state != REBUILDING or record.migration_uuid != migration_uuid:
            LOG.info("rebuild_result_ignored", state=record.state)
            return
        if not success:
            spec = RequestSpec.from_primitive(request_spec or {})
            alternates = [Selection.from_primitive(s) for s in host_list or []]
            self._rebuild_failed(ctxt, record, spec, host, reason or "", alternates)
            return
        if not holds_on(self.store, uuid, host):
            LOG.info("stale_rebuild_result_ignored")
            return
        done = records.finish_evacuate(
            self.store, record, host, node, availability_zone, clock=self._clock
        )
        LOG.info(
            "instance_evacuated" if done else "rebuild_result_late", source=record.source_host
        )

    def _rebuild_failed(
        self,
        ctxt: Any,
        record: InstanceRecord,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        """The rebuild on ``failed_host`` failed: count it, then rebuild on the
        next alternate that can be claimed, or where the scheduler asked
        again places it, or leave the instance on its source with the fault
        (:meth:`reschedule`)."""
        if self.store.get_consumer(record.uuid) is not None:
            LOG.info("rebuild_reschedule_superseded")
            return
        retry = self.count_failure(record, failed_host, reason)
        if retry is not None:
            # The alternates are claimed as the build's were: no migration named.
            self.reschedule(ctxt, retry, spec, alternates)

    def timeout(self) -> float:
        return self.settings.build_timeout  # a rebuild is a build

    def cast_to(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        LOG.info("rebuild_rescheduled", alternate=hosts[0].host, attempts=retry.attempts)
        # Ended meanwhile: deleted (the delete releases the claim) or given up
        # (the source handed back replaced it): nothing more to do either way.
        self.cast_rebuild(ctxt, retry.record, spec, hosts)

    def cast_again(self, ctxt: Any, retry: Retry, spec: RequestSpec, host: Selection) -> None:
        self.cast_rebuild(ctxt, retry.record, spec, [host])

    def placed(self, uuid: str, selection: Selection, **where: Any) -> bool:
        """Nothing to note before the cast: :meth:`cast_rebuild` notes it cast,
        if the evacuation is still under way."""
        return True

    def give_up(self, retry: Retry, exc: SchedulerError, details: str) -> bool:
        if not super().give_up(retry, exc, details):
            return False
        LOG.warning("evacuate_gave_up", attempts=retry.attempts, tried=retry.tried)
        return True

    def _park(self, record: InstanceRecord) -> None:
        """Move the instance's allocation on the source to the migration, if it
        is still there (a re-drive finds it moved, or a destination claimed)."""
        assert record.migration_uuid is not None and record.source_host is not None
        if not holds_on(self.store, record.uuid, record.source_host):
            return
        try:
            self.store.move_allocations(record.uuid, record.migration_uuid)
        except ConsumerConflict:  # the migration holds the source already
            LOG.info("evacuate_already_parked")

    def wait(
        self, uuids: Sequence[str], timeout: float, poll: float = 0.1
    ) -> tuple[list[InstanceRecord], bool]:
        """Poll until no instance is REBUILDING; (the records, timed out?)."""
        return wait_until(self.store, uuids, lambda r: r.state != REBUILDING, timeout, poll)


def summary(record: InstanceRecord) -> dict[str, object]:
    """What ``conductor-stub evacuate`` prints of an instance."""
    return base.summary(
        record, source_host=record.source_host, attempts=record.attempts, fault=record.fault
    )
