"""A live migration on the computes' side.

It walks pre-checks -> migration -> post as in Nova:
``check_can_live_migrate_destination`` on the destination (claimed for the
instance by then), which has the source checked too
(``check_can_live_migrate_source``); the driver checks either side
(:meth:`~compute_sim.driver.ComputeDriver.check_can_live_migrate_destination`,
:meth:`~compute_sim.driver.ComputeDriver.check_can_live_migrate_source`; with
the simulator they fail at ``live_migration_fail_rate`` or always on the
``live_migration_fail_hosts``), and a failure releases the destination's
claim *before* handing the migration back to the conductor for the next
alternate (``live_migration_precheck_failed``). Past both checks the source
migrates the instance (its VM stops there,
:meth:`~compute_sim.driver.ComputeDriver.live_migration`) and
``post_live_migration_at_destination`` starts it on the destination, which
tells the conductor (``live_migrated``); a source whose migration holds
nothing by then (the conductor gave the migration up and handed the
allocation back) stays put. Every step is idempotent per migration and
destination: a repeat of one under way is ignored, of one done walks on (or
reports) again. The pre-checks start only for a MIGRATING instance under
that migration (:mod:`compute_sim.steps`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from compute_sim import steps
from compute_sim.driver import VirtError
from compute_sim.ledger import DELETED, DONE, FAILED, HANDED_ON, LIVE, UNDER_WAY, Key
from compute_sim.ops.base import Operation
from compute_sim.vms import Via
from scheduler.log import get_logger
from scheduler.objects import RequestSpec, Selection

LOG = get_logger(__name__)


@dataclass(frozen=True)
class LiveMove:
    """One live migration's step as a host was cast it: the instance, its
    migration, the destination's Selection (``chosen``) and what the
    pre-checks carry on with (the request, the alternates after it, the
    source; the post on the destination carries none of them)."""

    instance_uuid: str
    migration_uuid: str
    chosen: Selection
    spec: RequestSpec | None = None
    alternates: list[Selection] = field(default_factory=list)
    source_host: str = ""
    block_migration: bool = False

    @classmethod
    def read(
        cls,
        instance_uuid: str,
        migration_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
        source_host: str,
        block_migration: bool,
    ) -> LiveMove:
        return cls(
            instance_uuid,
            migration_uuid,
            Selection.from_primitive(selection),
            RequestSpec.from_primitive(request_spec),
            [Selection.from_primitive(s) for s in host_list],
            source_host,
            block_migration,
        )

    @property
    def dest(self) -> str:
        return self.chosen.host

    def key(self, side: str) -> Key:
        """What a host knows of this migration is kept under, per ``side``."""
        return (LIVE, self.migration_uuid, self.dest, side)

    def host(self, side: str) -> str:
        return self.dest if side == "dest" else self.source_host


class LiveMigration(Operation):
    """The live migrations this compute is the source or the destination of."""

    def check_destination(self, ctxt: Any, move: LiveMove) -> None:
        """On the destination: check it can take the instance, then have the
        source checked (or hand the migration back)."""
        step = self._check_in(ctxt, move, "dest")
        with self._bound(ctxt, move, move.dest):
            if step is None:
                return
            if step == HANDED_ON:  # a re-drive: a later step may have been lost
                LOG.info("live_migration_check_walks_again")
                self._check_source(ctxt, move)
                return
            if step == DONE:
                LOG.info("live_migration_reported_again")
                self._report_live_migrated(ctxt, move)
                return
            LOG.info("check_can_live_migrate_destination", block_migration=move.block_migration)
        self.stats.count(move.dest, +1)
        self.driver.check_can_live_migrate_destination(
            move.dest, move.instance_uuid, lambda error: self._dest_checked(ctxt, move, error)
        )

    def _dest_checked(self, ctxt: Any, move: LiveMove, error: VirtError | None) -> None:
        self.stats.count(move.dest, -1)
        with self._bound(ctxt, move, move.dest):
            if not self._passed(ctxt, move, "dest", error):
                return
            self.ledger.record(move.instance_uuid, move.key("dest"), HANDED_ON)
            self._check_source(ctxt, move)

    def _check_source(self, ctxt: Any, move: LiveMove) -> None:
        assert move.spec is not None, "a pre-check carries its request"
        self.casts.check_can_live_migrate_source(
            ctxt,
            move.source_host,
            move.instance_uuid,
            move.migration_uuid,
            move.spec,
            move.chosen,
            move.alternates,
            move.block_migration,
        )

    def check_source(self, ctxt: Any, move: LiveMove) -> None:
        """On the source: check it can let the instance go, then migrate it to
        the destination (or hand the migration back)."""
        step = self._check_in(ctxt, move, "source")
        with self._bound(ctxt, move, move.source_host):
            if step is None:
                return
            if step in (HANDED_ON, DONE):  # migrated: the post may be lost
                LOG.info("live_migration_source_walks_again")
                self._post(ctxt, move)
                return
            LOG.info("check_can_live_migrate_source", dest=move.dest)
            self.vms.moving(move.instance_uuid, move.source_host, move.migration_uuid)
        self.driver.check_can_live_migrate_source(
            move.source_host, move.instance_uuid, lambda error: self._migrate(ctxt, move, error)
        )

    def _migrate(self, ctxt: Any, move: LiveMove, error: VirtError | None) -> None:
        """The source's check, then the migration itself: off the source."""
        with self._bound(ctxt, move, move.source_host):
            if not self._passed(ctxt, move, "source", error):
                return
            key = move.key("source")
            if self.store.get_consumer(move.migration_uuid) is None:
                # The migration holds nothing: the conductor gave the live
                # migration up (the source's allocation handed back). Stay.
                self.ledger.record(move.instance_uuid, key, FAILED)
                LOG.warning("live_migration_abandoned")
                return
            with self.ledger.lock:
                if self.ledger.deleted(move.instance_uuid):
                    self.ledger.record(move.instance_uuid, key, FAILED)
                    LOG.info("live_migration_cancelled_by_delete")
                    return
                self.ledger.record(move.instance_uuid, key, HANDED_ON)
                self.vms.stop(move.instance_uuid, move.source_host, self._leave(move.dest))
            LOG.info("live_migration", dest=move.dest)
            self._post(ctxt, move)

    def _leave(self, dest: str) -> Via:
        """The driver's departure of a VM from its source for ``dest``."""
        return lambda host, uuid: self.driver.live_migration(host, uuid, dest)

    def _post(self, ctxt: Any, move: LiveMove) -> None:
        self.casts.post_live_migration_at_destination(
            ctxt, move.chosen, move.instance_uuid, move.migration_uuid
        )

    def post(self, ctxt: Any, move: LiveMove) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        with self._bound(ctxt, move, move.dest):
            with self.ledger.lock:
                if self.ledger.deleted(move.instance_uuid):
                    self.ledger.record(move.instance_uuid, move.key("dest"), FAILED)
                    LOG.info("live_migration_cancelled_by_delete")
                    return
                again = self.ledger.get(move.instance_uuid, move.key("dest")) == DONE
                vm = self.vm(ctxt, move.instance_uuid, move.chosen, move.migration_uuid)
                self.vms.start(vm, move.dest, self.driver.post_live_migration_at_destination)
                self.ledger.record(move.instance_uuid, move.key("dest"), DONE)
            LOG.info("live_migration_reported_again" if again else "post_live_migration")
            self._report_live_migrated(ctxt, move)

    def _report_live_migrated(self, ctxt: Any, move: LiveMove) -> None:
        self.conductor.live_migrated(
            ctxt,
            move.instance_uuid,
            move.migration_uuid,
            move.dest,
            move.chosen.node,
            move.chosen.availability_zone,
        )

    def _check_in(self, ctxt: Any, move: LiveMove, side: str) -> str | None:
        """Check in a live migration's pre-check on its ``side`` ("dest" or
        "source"; the guard has found the step due): the step it had reached
        there, :data:`~compute_sim.ledger.UNDER_WAY` when a new check starts;
        None, logged, when the cast is to be ignored (a deleted instance, a
        check under way)."""
        with self._bound(ctxt, move, move.host(side)):
            reached = self.ledger.check_in(move.instance_uuid, move.key(side))
            if reached is None:
                return UNDER_WAY
            if reached == DELETED:
                LOG.info("live_migration_of_deleted_instance_ignored")
                return None
            if reached == UNDER_WAY:
                LOG.info("live_migration_check_duplicate_ignored", side=side)
                return None
            return reached

    def _passed(self, ctxt: Any, move: LiveMove, side: str, error: VirtError | None) -> bool:
        """Whether ``side``'s pre-check passed; if not (it failed, or the
        instance was deleted meanwhile) this step is over, and a failure is
        handed back."""
        if error is None and not self.ledger.deleted(move.instance_uuid):
            return True
        self.ledger.record(move.instance_uuid, move.key(side), FAILED)
        if self.ledger.deleted(move.instance_uuid):
            LOG.info("live_migration_cancelled_by_delete")
        elif error is not None:
            self._precheck_failed(ctxt, move, side, error)
        return False

    def _precheck_failed(self, ctxt: Any, move: LiveMove, side: str, error: VirtError) -> None:
        """Release the destination's claim, then hand the migration back to the
        conductor for the next alternate."""
        assert move.spec is not None, "a pre-check carries its request"
        step = steps.check_destination_step(move.instance_uuid, move.migration_uuid, move.dest)
        released = self.release_if_here(move.instance_uuid, move.chosen, step)
        if released is None:
            return
        LOG.info(
            "live_migration_precheck_failed",
            side="destination" if side == "dest" else "source",
            dest=move.dest,
            released=released,
            alternates=len(move.alternates),
        )
        self.conductor.live_migration_precheck_failed(
            ctxt,
            move.instance_uuid,
            move.migration_uuid,
            move.spec,
            move.dest,
            error.message,
            move.alternates,
        )

    def _bound(self, ctxt: Any, move: LiveMove, host: str) -> AbstractContextManager[None]:
        return self.bound(
            ctxt, instance_uuid=move.instance_uuid, migration_uuid=move.migration_uuid, host=host
        )
