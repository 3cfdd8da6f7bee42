"""The conductor's RPC endpoint: the owner of instance records takes the
results the computes and the scheduler send back.

:class:`ConductorEndpoint` serves topic ``conductor``. Each method is a step
of an operation: its expectation of the instance's record is declared with
it (:func:`scheduler.steps.guarded`, the rules in
:mod:`conductor_stub.steps`), so a repeated, late, replayed or forged
message is refused before it runs, as is one whose arguments are not of the
kinds its signature declares (:mod:`scheduler.arguments`). A step that passes binds the request's
logging context and hands its work to the operation's task, which holds the
operation whole (:mod:`conductor_stub.tasks`): builds
(:class:`~conductor_stub.tasks.build.Builder`), resizes and cold migrations
(:class:`~conductor_stub.tasks.resize.Resizer`), live migrations
(:class:`~conductor_stub.tasks.live_migrate.LiveMigrator`), evacuations
(:class:`~conductor_stub.tasks.evacuate.Evacuator`), shelves
(:class:`~conductor_stub.tasks.shelve.Shelver`) and deletes
(:class:`~conductor_stub.tasks.delete.Deleter`). State changes go through
:mod:`conductor_stub.records` (a compare-and-set on the record's state
decides every race before allocations are touched).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import oslo_messaging

from conductor_stub import steps
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.build import Builder
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import Evacuator
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from conductor_stub.tasks.shelve import Shelver
from scheduler.arguments import (
    Flag,
    Host,
    MigrationUuid,
    Name,
    Selections,
    SpecPrimitive,
    Text,
    Uuid,
    Uuids,
)
from scheduler.log import bind_request, get_logger
from scheduler.objects import RequestSpec, Selection
from scheduler.rpc import ComputeClient, SchedulerClient
from scheduler.steps import StepGuard, guarded

LOG = get_logger(__name__)


def _request_id(ctxt: Any) -> str | None:
    return getattr(ctxt, "request_id", None)


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
        self.guard = StepGuard(store)
        # The operations' tasks, which the steps hand their work to.
        self.builder = Builder(store, scheduler, compute, self.settings, clock)
        self.resizer = Resizer(store, scheduler, compute, self.settings, clock)
        self.migrator = LiveMigrator(store, scheduler, compute, self.settings, clock)
        self.evacuator = Evacuator(store, scheduler, compute, self.settings, clock=clock)
        self.shelver = Shelver(store, scheduler, compute, self.settings, clock)
        self.deleter = Deleter(store, compute, self.settings, clock)

    # --- builds ---------------------------------------------------------------------

    @guarded(steps.build_succeeded)
    def build_succeeded(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        host: Host,
        node: Name,
        availability_zone: Name | None = None,
    ) -> None:
        """Built on ``host`` in ``availability_zone`` (1.2; None from an older
        compute, or from a Selection that named no zone)."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            self.builder.build_succeeded(instance_uuid, host, node, availability_zone)

    @guarded(None)
    def schedule_failed(
        self, ctxt: Any, instance_uuids: Uuids, reason: Text, details: Text
    ) -> None:
        """The scheduler could not place the instances (each one's step checked
        here: one message names them all)."""
        with bind_request(request_id=_request_id(ctxt)):
            for uuid in instance_uuids:
                if not self.guard.refused(steps.schedule_failed_step(uuid), _request_id(ctxt)):
                    self.builder.schedule_failed(uuid, reason, details)
            LOG.info("schedule_failed", instance_uuids=instance_uuids, reason=reason)

    @guarded(steps.reschedule)
    def reschedule(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        request_spec: SpecPrimitive,
        failed_host: Host,
        reason: Text,
        host_list: Selections,
        migration_uuid: MigrationUuid | None = None,
    ) -> None:
        """A build failed on ``failed_host`` (or, naming its migration, a
        resize's prep there): reschedule it onto the alternates in ``host_list``."""
        with bind_request(
            request_id=_request_id(ctxt), instance_uuid=instance_uuid, failed_host=failed_host
        ):
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            if migration_uuid:
                self.resizer.destination_failed(
                    ctxt, instance_uuid, migration_uuid, spec, failed_host, reason, alternates
                )
            else:
                self.builder.build_failed(
                    ctxt, instance_uuid, spec, failed_host, reason, alternates
                )

    # --- resizes --------------------------------------------------------------------

    @guarded(steps.resize_result)
    def resize_result(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: MigrationUuid,
        host: Host | None,
        success: Flag,
        reason: Text | None = None,
        details: Text | None = None,
        availability_zone: Name | None = None,
    ) -> None:
        """The resize finished on ``host``, in ``availability_zone`` (the zone of
        the destination's Selection; 1.2, None from an older compute), or failed."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
        ):
            self.resizer.resize_result(
                instance_uuid, migration_uuid, host, success, reason, details, availability_zone
            )

    @guarded(steps.resize_confirmed)
    def resize_confirmed(self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid) -> None:
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            self.resizer.resize_confirmed(instance_uuid, migration_uuid)

    @guarded(steps.resize_reverted)
    def resize_reverted(self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid) -> None:
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
        ):
            self.resizer.resize_reverted(instance_uuid, migration_uuid)

    # --- live migrations --------------------------------------------------------------

    @guarded(steps.live_migration_precheck_failed)
    def live_migration_precheck_failed(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        request_spec: SpecPrimitive,
        failed_host: Host,
        reason: Text,
        host_list: Selections,
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
            self.migrator.destination_failed(
                ctxt,
                instance_uuid,
                migration_uuid,
                RequestSpec.from_primitive(request_spec),
                failed_host,
                reason,
                [Selection.from_primitive(s) for s in host_list],
            )

    @guarded(steps.live_migrated)
    def live_migrated(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        host: Host,
        node: Name,
        availability_zone: Name | None = None,
    ) -> None:
        """The instance runs on ``host`` and no longer on its source (1.5): it is
        ACTIVE there and the source's allocation is dropped."""
        with bind_request(
            request_id=_request_id(ctxt),
            instance_uuid=instance_uuid,
            migration_uuid=migration_uuid,
            host=host,
        ):
            self.migrator.live_migrated(
                instance_uuid, migration_uuid, host, node, availability_zone
            )

    # --- evacuations ------------------------------------------------------------------

    @guarded(steps.rebuild_result)
    def rebuild_result(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        host: Host,
        success: Flag,
        node: Name | None = None,
        availability_zone: Name | None = None,
        reason: Text | None = None,
        request_spec: SpecPrimitive | None = None,
        host_list: Selections | None = None,
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
            self.evacuator.rebuild_result(
                ctxt,
                instance_uuid,
                migration_uuid,
                host,
                success,
                node,
                availability_zone,
                reason,
                request_spec,
                host_list,
            )

    # --- shelves and deletes ----------------------------------------------------------

    @guarded(steps.instance_shelved)
    def instance_shelved(self, ctxt: Any, instance_uuid: Uuid, host: Host) -> None:
        """A host destroyed the VM of an instance being shelved (see
        :mod:`conductor_stub.tasks.shelve`): release it, and it is SHELVED_OFFLOADED."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            self.shelver.instance_shelved(instance_uuid, host)

    @guarded(steps.instance_terminated)
    def instance_terminated(self, ctxt: Any, instance_uuid: Uuid, host: Host) -> None:
        """A host destroyed the VM of an instance being deleted (see
        :mod:`conductor_stub.tasks.delete`); the last one to answer finishes it."""
        with bind_request(request_id=_request_id(ctxt), instance_uuid=instance_uuid, host=host):
            self.deleter.instance_terminated(instance_uuid, host)
