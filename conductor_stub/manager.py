"""The conductor: owner of instance records, receiver of results, rescheduler.

:class:`ConductorEndpoint` serves topic ``conductor``: build and resize
results from compute, scheduling failures from the scheduler. State changes
go through :mod:`conductor_stub.records` (a compare-and-set on the record's
state decides every race before allocations are touched).

A failed build or resize destination is rescheduled: with alternates on,
the next alternate is claimed with nothing but what its Selection holds and
the build (or prep_resize) cast there, with no scheduler round trip; an
alternate whose resources were taken meanwhile is skipped for the next one
(Nova's bug 1837955 gave up instead). With alternates off, the scheduler is
asked again with the hosts already tried ignored, up to ``max_attempts``
hosts (with alternates, their number is the bound: the scheduler returns
``max_attempts - 1``). An alternate a strict server-group policy now forbids
is skipped too: its claim carries the group check, exactly as the
scheduler's claim does, so a reschedule cannot put two anti-affinity members
on one host. An alternate refused at its claim was never built on and is no
attempt: when none of those left can be claimed and fewer than
``max_attempts`` builds (or move destinations) failed, the scheduler is
asked again, the hosts tried ignored, as with alternates off (one rule,
:meth:`ConductorEndpoint._ask_again`, for builds and every move). So "max
retries exceeded" (ERROR, distinct from "no valid host"; a move instead
goes back ACTIVE on its source, with that fault) means that
``max_attempts`` builds failed (or that the request names its hosts and
every one of them failed), and its admin details say how many failed, on
which hosts, and which alternates were refused at their claim and why.

A live migration's destination that fails its pre-checks is retried the
same way (``live_migration_precheck_failed``: the next alternate claimed,
its pre-checks cast there; none left, the instance goes back ACTIVE on its
source with the fault); ``live_migrated`` lands it on the destination and
drops the source's allocation. The task that starts it is
:class:`conductor_stub.tasks.live_migrate.LiveMigrator`'s.

What a user reads (``fault``) is generic, decided by
:func:`scheduler.policy.user_reason`; which hosts were tried, which
alternates were refused and why go to the admin-only ``fault_details``.

Results are checked against the store before they count: a build result
from a host that does not hold the instance's claim, or a failure report
while the instance holds a claim elsewhere, comes from a stale attempt (a
duplicate of a re-driven request) and is ignored; the live attempt reports
for itself. A result for an instance already in ERROR releases whatever a
late attempt claimed for it.

:class:`Booter` is the API side of a boot: it creates instance records (each
with a deadline, see :mod:`conductor_stub.redrive`), sends the scheduling
RPCs and waits for every instance to reach a final state.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import oslo_messaging

from conductor_stub import metrics, records, steps
from conductor_stub.reconcile import LOST_FAULT
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.base import wait_for
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import cast_rebuild
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.select import select_and_build
from conductor_stub.tasks.shelve import Shelver
from scheduler import policy
from scheduler.exceptions import (
    BrokerUnreachable,
    ClaimFailed,
    ConsumerConflict,
    ConsumerDeleted,
    Forbidden,
    InstanceNotFound,
    InternalError,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    ProviderNotFound,
    SchedulerError,
    SchedulerUnavailable,
)
from scheduler.filters.validation import validate_request
from scheduler.log import bind_request, get_logger
from scheduler.objects import (
    BUILDING,
    DELETED,
    ERROR,
    FINAL_STATES,
    MAX_INSTANCES_PER_REQUEST,
    MIGRATING,
    REBUILDING,
    RESIZED,
    RESIZING,
    SPAWNING,
    Flavor,
    Image,
    InstanceRecord,
    RequestSpec,
    Selection,
    ServerGroup,
)
from scheduler.rpc import SEND_FAILURES, ComputeClient, RequestContext, SchedulerClient
from scheduler.steps import StepGuard, guarded
from scheduler.store import GroupClaim

LOG = get_logger(__name__)


def _request_id(ctxt: Any) -> str | None:
    return getattr(ctxt, "request_id", None)


#: What a move's retry on an alternate logs, by the state of the move.
MOVE_RESCHEDULED = {RESIZING: "resize_rescheduled", MIGRATING: "live_migration_rescheduled"}


def _refused(refused: list[str]) -> str:
    """The admin details' account of the alternates refused at their claim
    (none built on, so none counted as a failed attempt)."""
    return f"; alternates refused: {', '.join(refused)}" if refused else ""


def _after(record: InstanceRecord, refused: Sequence[str]) -> str:
    """The admin details' account of a move's failed destinations so far,
    after what the scheduler said when asked again."""
    return (
        f" (after {record.attempts} destination(s) failed: {', '.join(record.tried_hosts)}"
        f"{_refused(list(refused))})"
    )


def _named_hosts_tried(spec: RequestSpec) -> bool:
    """Whether ``spec`` is narrowed to hosts it names (forced hosts or nodes, a
    requested destination) that are all among its ``ignore_hosts`` (tried):
    the scheduler could only answer that no host is valid."""
    tried = {host.lower() for host in spec.ignore_hosts}
    destination = spec.requested_destination
    narrowed = (
        spec.force_hosts,
        spec.force_nodes,
        (destination.host,) if destination is not None else (),
    )
    return any(names and all(n.lower() in tried for n in names) for names in narrowed)


class ConductorEndpoint:
    """topic ``conductor``: build_succeeded, reschedule, schedule_failed,
    resize_result, resize_confirmed, resize_reverted, instance_terminated,
    instance_shelved (1.4), live_migration_precheck_failed and live_migrated
    (1.5), rebuild_result (1.6)."""

    target = oslo_messaging.Target(version="1.6")

    def __init__(
        self,
        store: ConductorStore,
        compute: ComputeClient,
        scheduler: SchedulerClient | None = None,
        settings: ConductorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.compute = compute
        self.scheduler = scheduler
        self.settings = settings or ConductorSettings()
        self._clock = clock
        self.guard = StepGuard(store)
        self.deleter = Deleter(store, compute, self.settings, clock)
        self.shelver = Shelver(store, scheduler, compute, self.settings, clock)
        self.migrator = (
            LiveMigrator(store, scheduler, compute, self.settings, clock)
            if scheduler is not None
            else None
        )

    # --- deletes --------------------------------------------------------------------

    @guarded(steps.instance_terminated)
    def instance_terminated(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """A host destroyed the VM of an instance being deleted (see
        :mod:`conductor_stub.tasks.delete`); the last one to answer finishes it."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            try:
                record = self.deleter.finish(instance_uuid, host)
            except InstanceNotFound:  # past its retention already
                LOG.info("instance_terminated_late")
                return
            if record is None:
                LOG.warning("instance_terminated_not_deleting")
            elif record.state != DELETED:
                LOG.info("delete_waiting", pending=list(record.pending_hosts))

    # --- shelves ---------------------------------------------------------------------

    @guarded(steps.instance_shelved)
    def instance_shelved(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """A host destroyed the VM of an instance being shelved (see
        :mod:`conductor_stub.tasks.shelve`): release it, and it is SHELVED_OFFLOADED."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            try:
                self.shelver.offloaded(instance_uuid, host)
            except InstanceNotFound:  # deleted and past its retention
                LOG.info("instance_shelved_late")

    # --- builds ---------------------------------------------------------------------

    @guarded(steps.build_succeeded)
    def build_succeeded(
        self,
        ctxt: Any,
        instance_uuid: str,
        host: str,
        node: str,
        availability_zone: str | None = None,
    ) -> None:
        """Built on ``host`` in ``availability_zone`` (1.2; None from an older
        compute, or from a Selection that named no zone)."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            records.record_built(
                self.store, instance_uuid, host, node, availability_zone, self._clock
            )

    @guarded(None)
    def schedule_failed(
        self, ctxt: Any, instance_uuids: list[str], reason: str, details: str
    ) -> None:
        with bind_request(request_id=_request_id(ctxt)):
            for uuid in instance_uuids:
                if self.guard.refused(steps.schedule_failed_step(uuid), _request_id(ctxt)):
                    continue
                if self.store.get_consumer(uuid) is not None:
                    # Another copy of a re-driven request placed it: that one reports.
                    LOG.info("schedule_failed_superseded", instance_uuid=uuid)
                    continue
                records.fail_build(self.store, uuid, reason, details, clock=self._clock)
            LOG.info("schedule_failed", instance_uuids=instance_uuids, reason=reason)

    @guarded(steps.reschedule)
    def reschedule(
        self,
        ctxt: Any,
        instance_uuid: str,
        request_spec: dict[str, Any],
        failed_host: str,
        reason: str,
        host_list: list[dict[str, Any]],
        migration_uuid: str | None = None,
    ) -> None:
        with bind_request(
            request_id=_request_id(ctxt), instance_uuid=instance_uuid, failed_host=failed_host
        ):
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            if migration_uuid:
                self._reschedule_resize(
                    ctxt, instance_uuid, migration_uuid, spec, failed_host, reason, alternates
                )
            else:
                self._reschedule_build(ctxt, instance_uuid, spec, failed_host, reason, alternates)

    def _reschedule_build(
        self,
        ctxt: Any,
        uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        record = self.store.get_instance(uuid)
        if record.state != BUILDING:
            LOG.info("reschedule_ignored", state=record.state)
            return
        if self.store.get_consumer(uuid) is not None:
            LOG.info("reschedule_superseded")
            return
        attempts, tried = record.attempts + 1, (*record.tried_hosts, failed_host)
        details = (
            f"max retries exceeded: {attempts} build(s) failed, hosts tried: "
            f"{', '.join(tried)}; last failure: {reason}"
        )
        if not self.settings.return_alternates and attempts >= self.settings.max_attempts:
            # (With alternates, their number is the bound: the scheduler gave
            # max_attempts - 1 of them; see _ask_again for when they are taken.)
            self._build_failed(uuid, MaxRetriesExceeded(), details, attempts, tried)
            return
        # Record the attempt first (and push the deadline), so a conductor that
        # dies below leaves a record the sweeper re-drives.
        if (
            self.store.update_instance(
                uuid,
                expected_states=[BUILDING],
                attempts=attempts,
                tried_hosts=tried,
                task_state=SPAWNING,
                **records.placed_on(),
                updated_at=self._clock(),
                deadline=self._clock() + self.settings.build_timeout,
            )
            is None
        ):
            return
        metrics.RESCHEDULES.labels("build").inc()
        if not self.settings.return_alternates:
            self._build_via_scheduler(ctxt, uuid, spec, attempts, tried)
            return

        def build(alternate: Selection, rest: list[Selection]) -> None:
            LOG.info("rescheduled", alternate=alternate.host, attempts=attempts)
            self.compute.build_and_run_instance(
                ctxt, uuid, spec.replace(num_instances=1), alternate, rest
            )

        refused = self._try_alternates(uuid, BUILDING, spec, alternates, build)
        if refused is None:
            return  # built on one, or superseded
        retry = spec.replace(ignore_hosts=(*spec.ignore_hosts, *tried))
        if self._ask_again(attempts, refused, retry):
            self._build_via_scheduler(ctxt, uuid, spec, attempts, tried, refused)
            return
        self._build_failed(
            uuid, MaxRetriesExceeded(), details + _refused(refused), attempts, tried
        )

    def _build_via_scheduler(
        self,
        ctxt: Any,
        uuid: str,
        spec: RequestSpec,
        attempts: int,
        tried: tuple[str, ...],
        refused: Sequence[str] = (),
    ) -> None:
        """Ask the scheduler again, the hosts tried ignored (alternates off, or
        none of them could be claimed: ``refused``)."""
        retry = spec.replace(
            num_instances=1, ignore_hosts=tuple(dict.fromkeys((*spec.ignore_hosts, *tried)))
        )
        try:
            selection = self._select_again(ctxt, uuid, retry)
        except (NoValidHost, InvalidRequest, Forbidden, InternalError) as exc:
            self._build_failed(
                uuid,
                exc,
                f"{policy.admin_details(exc)} (after {attempts} "
                f"build(s) failed, hosts tried: {', '.join(tried)}{_refused(list(refused))})",
                attempts,
                tried,
            )
            return
        if selection is None or not self._placed(uuid, selection, BUILDING):
            return
        LOG.info(
            "rescheduled_via_scheduler",
            host=selection.host,
            attempts=attempts,
            ignored=list(retry.ignore_hosts),
        )
        self.compute.build_and_run_instance(ctxt, uuid, retry, selection, [])

    def _build_failed(
        self, uuid: str, exc: SchedulerError, details: str, attempts: int, tried: tuple[str, ...]
    ) -> None:
        """BUILDING -> ERROR: the user reads what the policy allows of ``exc``,
        the admin ``details``."""
        self.store.update_instance(
            uuid, expected_states=[BUILDING], attempts=attempts, tried_hosts=tried
        )
        if records.fail_build(
            self.store, uuid, policy.user_reason(exc), details, clock=self._clock
        ):
            if isinstance(exc, MaxRetriesExceeded):
                metrics.RETRIES_EXHAUSTED.labels("build").inc()
            LOG.warning(
                "max_retries_exceeded"
                if isinstance(exc, MaxRetriesExceeded)
                else "reschedule_failed",
                attempts=attempts,
                tried=tried,
                error=type(exc).__name__,
            )

    # --- resizes --------------------------------------------------------------------

    @guarded(steps.resize_result)
    def resize_result(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        host: str | None,
        success: bool,
        reason: str | None = None,
        details: str | None = None,
        availability_zone: str | None = None,
    ) -> None:
        """The resize finished on ``host``, in ``availability_zone`` (the zone of
        the destination's Selection; 1.2, None from an older compute), or failed."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
        ):
            record = self.store.get_instance(instance_uuid)
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
            if not records.holds_on(self.store, instance_uuid, host):
                LOG.info("stale_resize_result_ignored")
                return
            done = self.store.update_instance(
                instance_uuid,
                expected_states=[RESIZING],
                state=RESIZED,
                task_state=None,
                **records.placed_on(host, host, availability_zone),
                attempts=record.attempts + 1,  # the destination that worked counts
                deadline=None,
                updated_at=self._clock(),
            )
            LOG.info(
                "instance_resized" if done else "resize_result_late", source=record.source_host
            )

    def _reschedule_resize(
        self,
        ctxt: Any,
        uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        retried = self._move_failed_on(
            uuid, migration_uuid, RESIZING, failed_host, reason, self.settings.resize_timeout
        )
        if retried is None:
            return
        record, details = retried
        new_flavor = spec.flavor
        if not self.settings.return_alternates:
            self._resize_via_scheduler(ctxt, record, migration_uuid, new_flavor)
            return
        self._next_alternate(
            record,
            details,
            migration_uuid,
            spec,
            alternates,
            lambda alternate, rest: self.compute.prep_resize(
                ctxt, uuid, migration_uuid, new_flavor, spec, alternate, rest
            ),
            lambda refused: self._resize_via_scheduler(
                ctxt, record, migration_uuid, new_flavor, refused
            ),
        )

    def _resize_via_scheduler(
        self,
        ctxt: Any,
        record: InstanceRecord,
        migration_uuid: str,
        new_flavor: Flavor,
        refused: Sequence[str] = (),
    ) -> None:
        """Ask the scheduler again for the resize, the hosts tried ignored
        (alternates off, or none of them could be claimed: ``refused``)."""
        uuid = record.uuid
        retry, _ = records.resize_spec(record)
        if not self.settings.allow_resize_to_same_host and record.source_host:
            retry = retry.replace(ignore_hosts=(*retry.ignore_hosts, record.source_host))
        try:
            selection = self._select_again(ctxt, uuid, retry)
        except (NoValidHost, InvalidRequest, Forbidden, InternalError) as exc:
            records.fail_move(
                self.store,
                record,
                policy.user_reason(exc),
                f"{policy.admin_details(exc)}{_after(record, refused)}",
                clock=self._clock,
            )
            return
        if selection is None or not self._placed(uuid, selection, RESIZING):
            return
        LOG.info("resize_rescheduled_via_scheduler", host=selection.host, attempts=record.attempts)
        self.compute.prep_resize(ctxt, uuid, migration_uuid, new_flavor, retry, selection, [])

    @guarded(steps.resize_confirmed)
    def resize_confirmed(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            record = self.store.get_instance(instance_uuid)
            if record.migration_uuid != migration_uuid or record.state != RESIZED:
                LOG.info("resize_confirmed_duplicate", state=record.state)
                return
            done = records.finish_confirm(self.store, record, clock=self._clock)
            LOG.info("resize_confirmed" if done else "resize_confirmed_late", host=record.host)

    @guarded(steps.resize_reverted)
    def resize_reverted(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            record = self.store.get_instance(instance_uuid)
            if record.migration_uuid != migration_uuid or record.state != RESIZED:
                LOG.info("resize_reverted_duplicate", state=record.state)
                return
            done = records.finish_revert(self.store, record, clock=self._clock)
            LOG.info(
                "resize_reverted" if done else "resize_reverted_late", host=record.source_host
            )

    # --- live migrations --------------------------------------------------------------

    @guarded(steps.live_migration_precheck_failed)
    def live_migration_precheck_failed(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        failed_host: str,
        reason: str,
        host_list: list[dict[str, Any]],
    ) -> None:
        """A pre-check failed for destination ``failed_host`` (its claim released
        there): claim the next alternate and cast its pre-checks, or, with none
        left, the instance goes back ACTIVE on its source with a fault (1.5).
        With alternates off, the live migration is sent again (the scheduler
        asked again, the hosts tried and the source ignored), up to
        ``max_attempts`` destinations."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            failed_host=failed_host,
        ):
            retried = self._move_failed_on(
                instance_uuid,
                migration_uuid,
                MIGRATING,
                failed_host,
                reason,
                self.settings.live_migration_timeout,
            )
            if retried is None:
                return
            record, details = retried
            if not self.settings.return_alternates and self.migrator is not None:
                self.migrator.send(record)  # the park a no-op, the hosts tried ignored
                return
            spec = RequestSpec.from_primitive(request_spec)
            source = record.source_host
            assert source is not None
            migrator = self.migrator
            self._next_alternate(
                record,
                details,
                migration_uuid,
                spec,
                [Selection.from_primitive(s) for s in host_list],
                lambda alternate, rest: self.compute.check_can_live_migrate_destination(
                    ctxt,
                    instance_uuid,
                    migration_uuid,
                    spec,
                    alternate,
                    rest,
                    source,
                    record.block_migration,
                ),
                # Sent again: the hosts tried ignored (its failure says so).
                None if migrator is None else lambda refused: migrator.send(record),
            )

    @guarded(steps.live_migrated)
    def live_migrated(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        host: str,
        node: str,
        availability_zone: str | None = None,
    ) -> None:
        """The instance runs on ``host`` and no longer on its source (1.5): it is
        ACTIVE there and the source's allocation is dropped."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
        ):
            record = self.store.get_instance(instance_uuid)
            if record.migration_uuid != migration_uuid or record.state != MIGRATING:
                LOG.info("live_migrated_duplicate", state=record.state)
                return
            if not records.holds_on(self.store, instance_uuid, host):
                LOG.info("stale_live_migration_result_ignored")
                return
            if not records.finish_live_migration(
                self.store, record, host, node, availability_zone, clock=self._clock
            ):
                LOG.info("live_migrated_late")

    # --- evacuations ------------------------------------------------------------------

    @guarded(steps.rebuild_result)
    def rebuild_result(
        self,
        ctxt: Any,
        instance_uuid: str,
        migration_uuid: str,
        host: str,
        success: bool,
        node: str | None = None,
        availability_zone: str | None = None,
        reason: str | None = None,
        request_spec: dict[str, Any] | None = None,
        host_list: list[dict[str, Any]] | None = None,
    ) -> None:
        """An evacuation's rebuild on ``host`` succeeded (1.6): the source's
        allocation goes and the instance is ACTIVE there. Or it failed, with
        the alternates left (``host_list``) to try for ``request_spec``, as a
        failed build is rescheduled (see :mod:`conductor_stub.tasks.evacuate`)."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
        ):
            record = self.store.get_instance(instance_uuid)
            if record.state != REBUILDING or record.migration_uuid != migration_uuid:
                LOG.info("rebuild_result_ignored", state=record.state)
                return
            if not success:
                spec = RequestSpec.from_primitive(request_spec or {})
                alternates = [Selection.from_primitive(s) for s in host_list or []]
                self._reschedule_rebuild(ctxt, record, spec, host, reason or "", alternates)
                return
            if not records.holds_on(self.store, instance_uuid, host):
                LOG.info("stale_rebuild_result_ignored")
                return
            done = records.finish_evacuate(
                self.store, record, host, node, availability_zone, clock=self._clock
            )
            LOG.info(
                "instance_evacuated" if done else "rebuild_result_late",
                source=record.source_host,
            )

    def _reschedule_rebuild(
        self,
        ctxt: Any,
        record: InstanceRecord,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        uuid = record.uuid
        if self.store.get_consumer(uuid) is not None:
            LOG.info("rebuild_reschedule_superseded")
            return
        attempts, tried = record.attempts + 1, (*record.tried_hosts, failed_host)
        details = (
            f"max retries exceeded: {attempts} destination(s) failed: "
            f"{', '.join(tried)}; last failure: {reason}"
        )

        def fail(exc: SchedulerError, admin: str) -> None:
            if records.fail_move(
                self.store, record, policy.user_reason(exc), admin, clock=self._clock
            ):
                if isinstance(exc, MaxRetriesExceeded):
                    metrics.RETRIES_EXHAUSTED.labels("rebuild").inc()
                LOG.warning("evacuate_gave_up", attempts=attempts, tried=tried)

        if not self.settings.return_alternates and attempts >= self.settings.max_attempts:
            fail(MaxRetriesExceeded(), details)
            return
        updated = self.store.update_instance(
            uuid,
            expected_states=[REBUILDING],
            attempts=attempts,
            tried_hosts=tried,
            updated_at=self._clock(),
            deadline=self._clock() + self.settings.build_timeout,
        )
        if updated is None:
            return
        record = updated
        metrics.RESCHEDULES.labels("rebuild").inc()

        def again(refused: Sequence[str] = ()) -> None:
            retry = records.move_spec(record)
            try:
                selection = self._select_again(ctxt, uuid, retry)
            except (NoValidHost, InvalidRequest, Forbidden, InternalError) as exc:
                fail(exc, f"{policy.admin_details(exc)}{_after(record, refused)}")
                return
            if selection is not None:
                cast_rebuild(self.store, self.compute, ctxt, record, retry, [selection])

        if not self.settings.return_alternates:
            again()
            return

        def rebuild(alternate: Selection, rest: list[Selection]) -> None:
            LOG.info("rebuild_rescheduled", alternate=alternate.host, attempts=attempts)
            # Ended meanwhile: deleted (the delete releases the claim) or given up
            # (the source handed back replaced it): nothing more to do either way.
            cast_rebuild(
                self.store, self.compute, ctxt, record, spec, [alternate, *rest], clock=self._clock
            )

        refused = self._try_alternates(uuid, None, spec, alternates, rebuild)
        if refused is None:
            return
        if self._ask_again(attempts, refused, records.move_spec(record)):
            again(refused)
            return
        fail(MaxRetriesExceeded(), details + _refused(refused))

    # --- shared steps ---------------------------------------------------------------

    def _move_failed_on(
        self,
        uuid: str,
        migration_uuid: str,
        state: str,
        failed_host: str,
        reason: str,
        timeout: float,
    ) -> tuple[InstanceRecord, str] | None:
        """A move's destination (a resize's or a live migration's, in ``state``)
        failed and released its claim: record the attempt and push the deadline.

        Returns the record and the admin details of the failures so far; None
        when there is nothing to retry: the result is stale (another
        migration, or the move is over), a re-driven copy has placed the
        instance already, or (alternates off) ``max_attempts`` destinations
        are used up (then the move failed back to its source here).
        """
        record = self.store.get_instance(uuid)
        if record.migration_uuid != migration_uuid:
            records.undo_stale_migration(self.store, record, migration_uuid)
            return None
        if record.state != state:
            LOG.info("move_reschedule_ignored", state=record.state, move=state)
            return None
        if self.store.get_consumer(uuid) is not None:
            LOG.info("move_reschedule_superseded", move=state)
            return None
        attempts, tried = record.attempts + 1, (*record.tried_hosts, failed_host)
        details = (
            f"max retries exceeded: {attempts} destination(s) failed: "
            f"{', '.join(tried)}; last failure: {reason}"
        )
        if not self.settings.return_alternates and attempts >= self.settings.max_attempts:
            if records.fail_move(
                self.store,
                record,
                policy.user_reason(MaxRetriesExceeded()),
                details,
                clock=self._clock,
            ):
                metrics.RETRIES_EXHAUSTED.labels(metrics.MOVE_KINDS[state]).inc()
            return None
        updated = self.store.update_instance(
            uuid,
            expected_states=[state],
            attempts=attempts,
            tried_hosts=tried,
            updated_at=self._clock(),
            deadline=self._clock() + timeout,
        )
        if updated is None:
            return None
        metrics.RESCHEDULES.labels(metrics.MOVE_KINDS[state]).inc()
        return updated, details

    def _next_alternate(
        self,
        record: InstanceRecord,
        details: str,
        migration_uuid: str,
        spec: RequestSpec,
        alternates: list[Selection],
        cast: Callable[[Selection, list[Selection]], None],
        again: Callable[[list[str]], None] | None,
    ) -> None:
        """Claim the first alternate that can still take the moved instance and
        ``cast`` its step there (with the alternates after it), unless the move
        stopped meanwhile (a re-driven copy placed it, it was given up or
        deleted). None could be claimed: the move is sent ``again`` through
        the scheduler while fewer than ``max_attempts`` destinations failed
        (:meth:`_ask_again`); else it fails back to its source, ``details``
        and the alternates refused at their claim its admin details."""
        state = record.state

        def step(alternate: Selection, rest: list[Selection]) -> None:
            LOG.info(MOVE_RESCHEDULED[state], alternate=alternate.host, left=len(rest))
            cast(alternate, rest)

        refused = self._try_alternates(record.uuid, state, spec, alternates, step, migration_uuid)
        if refused is None:
            return
        if again is not None and self._ask_again(
            record.attempts, refused, records.move_spec(record)
        ):
            again(refused)
            return
        if records.fail_move(
            self.store,
            record,
            policy.user_reason(MaxRetriesExceeded()),
            details + _refused(refused),
            clock=self._clock,
        ):
            metrics.RETRIES_EXHAUSTED.labels(metrics.MOVE_KINDS[state]).inc()

    def _try_alternates(
        self,
        uuid: str,
        state: str | None,
        spec: RequestSpec,
        alternates: list[Selection],
        cast: Callable[[Selection, list[Selection]], None],
        migration_uuid: str | None = None,
    ) -> list[str] | None:
        """Claim the first alternate that can still take the instance, note it
        placed there while the record is in ``state`` (None: the caster
        checks that itself) and ``cast`` its step there with the alternates
        after it. Returns None when done (cast, or stopped: a re-driven copy
        placed it, or it left ``state`` meanwhile); else none could be
        claimed, and the alternates refused at their claim, with why."""
        refused: list[str] = []
        for i, alternate in enumerate(alternates):
            outcome = self._claim_alternate(uuid, spec, alternate, refused, migration_uuid)
            if outcome is None:
                return None  # superseded
            if not outcome:
                continue
            if state is not None and not self._placed(uuid, alternate, state):
                return None
            cast(alternate, alternates[i + 1 :])
            return None
        return refused

    def _ask_again(self, attempts: int, refused: list[str], retry: RequestSpec) -> bool:
        """Whether to ask the scheduler again (for ``retry``, the hosts tried in
        its ``ignore_hosts``) once none of the alternates left could be claimed
        (taken meanwhile, or forbidden by the group now): while fewer than
        ``max_attempts`` builds (or move destinations) really failed. An
        alternate refused at its claim was never built on, so it is no
        attempt: MaxRetriesExceeded means ``max_attempts`` failures, unless
        the request names its hosts (forced, or an admin's destination) and
        every one of them failed: then there is nothing else to ask for."""
        if attempts >= self.settings.max_attempts or _named_hosts_tried(retry):
            return False
        LOG.info(
            "alternates_exhausted",
            attempts=attempts,
            max_attempts=self.settings.max_attempts,
            refused=len(refused),
        )
        return True

    def _claim_alternate(
        self,
        uuid: str,
        spec: RequestSpec,
        alternate: Selection,
        refused: list[str],
        migration_uuid: str | None = None,
    ) -> bool | None:
        """Claim an alternate for the instance, as a member of its group (strict
        policies checked; a resize names its ``migration_uuid``, whose
        membership on the source is the instance's own):
        True if claimed; False if its resources were taken meanwhile, the
        group policy now forbids it or it is gone (noted in ``refused``: skip
        to the next); None if the instance holds a claim already (a re-driven
        copy placed it: stop here)."""
        try:
            self.store.claim(
                uuid,
                alternate.allocation_request,
                GroupClaim.for_spec(spec, alternate.host, migration_uuid),
            )
        except ConsumerConflict:
            LOG.info("reschedule_superseded", alternate=alternate.host)
            return None
        except ConsumerDeleted:
            LOG.info("reschedule_stopped_by_delete", alternate=alternate.host)
            return None
        except (ClaimFailed, ProviderNotFound) as exc:
            LOG.info("alternate_skipped", alternate=alternate.host, reason=type(exc).__name__)
            refused.append(f"{alternate.host} ({type(exc).__name__})")
            return False
        return True

    def _placed(self, uuid: str, selection: Selection, state: str) -> bool:
        """Record where the instance is being built (or resized to); if it left
        ``state`` meanwhile (given up), drop the claim just made."""
        changes: dict[str, Any] = {"updated_at": self._clock()}
        if state == BUILDING:
            changes.update(
                records.placed_on(selection.host, selection.node, selection.availability_zone)
            )
        if self.store.update_instance(uuid, expected_states=[state], **changes) is not None:
            return True
        # Given up meanwhile. A resize given up has handed the source's
        # allocation back to the instance, dropping this claim already.
        if state == BUILDING:
            self.store.release(uuid)
        LOG.info("reschedule_given_up_meanwhile")
        return False

    def _select_again(self, ctxt: Any, uuid: str, spec: RequestSpec) -> Selection | None:
        """Ask the scheduler for one host (claimed for the instance), or None if
        it did not answer (the sweeper re-drives the request later) or the
        instance is being deleted."""
        if self.scheduler is None:
            raise NoValidHost(details="no scheduler client to ask again")
        try:
            [per_instance] = self.scheduler.select_destinations(
                ctxt, spec, [uuid], return_alternates=False
            )
        except (oslo_messaging.MessagingTimeout, SchedulerUnavailable) as exc:
            # No answer, or the scheduler cannot reach the store for now.
            LOG.warning("select_again_timed_out", error=type(exc).__name__)
            return None
        return per_instance[0] if per_instance else None  # none: deleted meanwhile


def boot_spec(
    flavor: Flavor,
    project_id: str,
    user_id: str,
    *,
    image: Image | None = None,
    group: ServerGroup | None = None,
    availability_zone: str | None = None,
    scheduler_hints: Mapping[str, Sequence[str]] | None = None,
) -> RequestSpec:
    """The request spec of a boot (one instance; :meth:`Booter.boot` sets how
    many per request), checked whole as a worker checks it: its fields
    (:meth:`RequestSpec.from_primitive`) and what the filters will read
    (:func:`~scheduler.filters.validation.validate_request`), the same code,
    so a client refuses in one line what the worker would refuse later.

    :raises InvalidRequest: naming the field, extra spec, image property or hint.
    """
    spec = RequestSpec(
        flavor=flavor,
        project_id=project_id,
        user_id=user_id,
        image=image,
        group=group,
        availability_zone=availability_zone,
        scheduler_hints={k: tuple(v) for k, v in (scheduler_hints or {}).items()},
    )
    checked = RequestSpec.from_primitive(spec.to_primitive())
    validate_request(checked)
    return checked


@dataclass
class BootReport:
    """What a boot ended with, per instance, and the totals."""

    instances: list[InstanceRecord]
    seconds: float
    requests: int
    timed_out: bool = False
    by_state: Counter[str] = field(default_factory=Counter)
    #: The server group the instances were booted into (None: no group).
    group: ServerGroup | None = None

    def __post_init__(self) -> None:
        self.by_state = Counter(r.state for r in self.instances)

    @property
    def rescheduled(self) -> int:
        return sum(1 for r in self.instances if r.attempts > 1)

    @property
    def no_valid_host(self) -> int:
        return sum(1 for r in self.instances if r.fault == NoValidHost.USER_MESSAGE)

    @property
    def lost(self) -> int:
        """Instances whose record vanished with nothing running them."""
        return sum(1 for r in self.instances if r.state == ERROR and r.fault == LOST_FAULT)

    @property
    def redriven(self) -> int:
        """Instances whose request the conductor had to send again."""
        return sum(1 for r in self.instances if r.redrives)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "summary": {
                "total": len(self.instances),
                "states": dict(self.by_state),
                "rescheduled": self.rescheduled,
                "no_valid_host": self.no_valid_host,
                "redriven": self.redriven,
                "lost": self.lost,
                "seconds": round(self.seconds, 3),
                "requests": self.requests,
                "timed_out": self.timed_out,
                "group_uuid": self.group.uuid if self.group else None,
                "group_policy": self.group.policy if self.group else None,
            },
            "instances": [
                {
                    "uuid": r.uuid,
                    "state": r.state,
                    "host": r.host,
                    "availability_zone": r.availability_zone,
                    "attempts": r.attempts,
                    "redrives": r.redrives,
                    "fault": r.fault,
                }
                for r in self.instances
            ],
        }


#: The fault of an instance whose boot request never left (the broker went away).
UNSENT_FAULT = "The request could not be sent."


class Booter:
    """Boots instances the way an API + conductor would, and waits for them.

    Each record is created with the request's id and a deadline
    ``build_timeout`` seconds out, by which the conductor expects to have
    heard back; past it, ``conductor-stub serve`` re-drives the request.
    """

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient,
        compute: ComputeClient,
        build_timeout: float = 120.0,
        return_alternates: bool = True,
        lost_after: float = 300.0,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.compute = compute
        self.build_timeout = build_timeout
        self.return_alternates = return_alternates
        self.lost_after = lost_after
        self.requests = 0
        #: The server group of the last :meth:`boot` (None: none).
        self.group: ServerGroup | None = None
        #: Where instance uuids and request ids come from (a seeded source
        #: makes a demo run repeat itself: the scheduler draws its ties from them).
        self.new_id = new_id or (lambda: str(uuidlib.uuid4()))

    def boot(
        self,
        ctxt: RequestContext,
        flavor: Flavor,
        count: int,
        *,
        per_request: int = 1,
        mode: str = "run_instance",
        group_policy: str | None = None,
        availability_zone: str | None = None,
        project_id: str = "demo",
        user_id: str = "demo",
        image: Image | None = None,
        scheduler_hints: Mapping[str, Sequence[str]] | None = None,
        group: ServerGroup | None = None,
    ) -> list[str]:
        """Create the records and send the requests; return the instance uuids.

        The instances go into ``group`` (an existing server group), or a new
        group with ``group_policy``, or none; :attr:`group` names it after.
        The request spec is validated whole as a worker would (the same
        checks: fields, extra specs, image properties, hints) before anything
        is recorded.

        :raises InvalidRequest: ``per_request`` over the scheduler's limit
            (MAX_INSTANCES_PER_REQUEST), both ``group`` and ``group_policy``,
            or a request spec a worker would refuse; nothing is recorded.
        """
        if not 1 <= per_request <= MAX_INSTANCES_PER_REQUEST:
            raise InvalidRequest(
                reason=f"per_request must be between 1 and {MAX_INSTANCES_PER_REQUEST}"
            )
        if group is not None and group_policy:
            raise InvalidRequest(reason="give an existing group or a new group's policy, not both")
        if group_policy:
            group = ServerGroup(uuid=str(uuidlib.uuid4()), policy=group_policy)
        template = boot_spec(
            flavor,
            project_id,
            user_id,
            image=image,
            group=group,
            availability_zone=availability_zone,
            scheduler_hints=scheduler_hints,
        )
        self.group = group
        uuids: list[str] = []
        for start in range(0, count, per_request):
            n = min(per_request, count - start)
            batch = [self.new_id() for _ in range(n)]
            spec = template.replace(num_instances=n)
            req_ctxt = RequestContext(
                user_id=user_id,
                project_id=project_id,
                roles=list(ctxt.roles),
                is_admin=ctxt.is_admin,
                request_id=f"req-{self.new_id()}",
            )
            now = time.time()
            self.store.create_instances(
                InstanceRecord(
                    uuid=u,
                    request_spec=spec.to_primitive(),
                    created_at=now,
                    updated_at=now,
                    request_id=req_ctxt.request_id,
                    deadline=now + self.build_timeout,
                    roles=tuple(req_ctxt.roles),
                    is_admin=req_ctxt.is_admin is True,
                )
                for u in batch
            )
            try:
                if mode == "run_instance":
                    self.scheduler.run_instance(req_ctxt, spec, batch)
                else:
                    select_and_build(
                        self.store,
                        self.scheduler,
                        self.compute,
                        req_ctxt,
                        spec,
                        batch,
                        return_alternates=self.return_alternates,
                    )
            except SEND_FAILURES as exc:
                self._unsent(batch, exc)
            uuids.extend(batch)
            self.requests += 1
        return uuids

    def _unsent(self, batch: Sequence[str], exc: Exception) -> None:
        """The broker went away before a request could be sent: its records go
        to ERROR now (none is left for the conductor to send later, when whoever
        asked has given up), and the boot stops.

        :raises BrokerUnreachable: always.
        """
        reason = " ".join(str(exc).split()) or type(exc).__name__
        for uuid in batch:
            records.fail_build(
                self.store,
                uuid,
                UNSENT_FAULT,
                f"the message broker could not be reached: {reason}",
            )
        raise BrokerUnreachable(
            f"the message broker stopped answering ({reason}); "
            f"{len(batch)} instance(s) not sent, set to ERROR"
        ) from exc

    def wait(
        self, uuids: Sequence[str], timeout: float, started: float, poll: float = 0.1
    ) -> BootReport:
        """Wait until every instance is in a final state, or ``timeout``.

        A record that vanished from the store (a store that went back in
        time) is given ``lost_after`` seconds to come back (the reconciler
        re-creates the record of a VM a compute runs); past that, nothing runs
        it: it is written back in ERROR with :data:`~conductor_stub.reconcile.LOST_FAULT`,
        reported lost, and counted by ``scheduler-admin audit`` (the store is
        where both the boot client and the audit find it, with no new kind of
        key: the record is the instance's as any other). A store that does not
        answer is asked again until the timeout."""
        missing_since: dict[str, float] = {}

        def read() -> list[InstanceRecord]:
            """The records found; those missing for ``lost_after`` written back lost."""
            while True:
                found = self.store.list_instances(uuids)
                now = time.monotonic()
                have = {r.uuid for r in found}
                for uuid in uuids:
                    if uuid in have:
                        missing_since.pop(uuid, None)
                    else:
                        missing_since.setdefault(uuid, now)
                vanished = [u for u, t in missing_since.items() if now - t >= self.lost_after]
                if not vanished:
                    return found
                self._record_lost(vanished)
                for uuid in vanished:
                    del missing_since[uuid]

        found, timed_out = wait_for(
            read,
            lambda found: len(found) == len(uuids) and all(r.state in FINAL_STATES for r in found),
            timeout,
            poll,
            store_down=lambda exc: LOG.warning("boot_wait_store_unavailable", error=exc.message),
        )
        return BootReport(
            instances=found,
            seconds=time.monotonic() - started,
            requests=self.requests,
            timed_out=timed_out,
            group=self.group,
        )

    def _record_lost(self, uuids: Sequence[str]) -> None:
        """Write back in ERROR the records that vanished (one re-created meanwhile
        is kept as it is: the write is set-if-absent)."""
        now = time.time()
        self.store.create_instances(
            InstanceRecord(
                uuid=u,
                state=ERROR,
                task_state=None,
                fault=LOST_FAULT,
                fault_details=(
                    f"the record vanished from the store and was not re-created within "
                    f"{self.lost_after:g} s (no compute reported running it)"
                ),
                created_at=now,
                updated_at=now,
            )
            for u in uuids
        )
        for u in uuids:
            LOG.warning("instance_lost", instance_uuid=u)
