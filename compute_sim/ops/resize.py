"""A resize (or cold migration) on the computes' side.

It walks prep -> resize -> finish as in Nova: ``prep_resize`` on the
destination (the driver makes room, :meth:`~compute_sim.driver.ComputeDriver.prepare_resize`;
with the simulator it fails on the hosts named in ``fail_resize_hosts``),
``resize_instance`` on the source (the VM off there and its disk to the
destination, :meth:`~compute_sim.driver.ComputeDriver.migrate_disk_and_power_off`),
``finish_resize`` on the destination (the VM runs there), then
``resize_result`` to the conductor. The source is the host of the migration
consumer's allocation. A failed prep releases the destination's claim
*before* handing the resize back for a retry on the alternates.
``confirm_resize`` (on the source) drops the migration's allocation;
``revert_resize`` (on the destination) drops the instance's and hands the
migration's back to it, in one atomic step, stops the VM there and asks the
source (``finish_revert_resize``, in whichever process serves it) to run it
again, with the amounts it had there, and tell the conductor. Every step is
idempotent per migration, so the conductor may re-drive any of them; each
is acted on only when the instance's record says it is due here
(:mod:`compute_sim.steps`), else refused (``step_refused``) and nothing
changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from compute_sim import steps
from compute_sim.driver import VirtError
from compute_sim.ledger import DELETED, DONE, FAILED, HANDED_ON, RESIZE, UNDER_WAY
from compute_sim.ops.base import Attempt, Operation
from scheduler.exceptions import RecordChanged
from scheduler.log import get_logger
from scheduler.objects import ACTIVE, Selection
from scheduler.store import RunningInstance

if TYPE_CHECKING:
    from compute_sim.manager import ComputeManager

LOG = get_logger(__name__)


class Resize(Operation):
    """The resizes this compute is the source or the destination of."""

    def __init__(self, manager: ComputeManager) -> None:
        super().__init__(manager)
        # (migration, dest) -> the zone its Selection named, reported when it finishes
        self._zones: dict[tuple[str, str], str | None] = {}
        # (migration, dest) -> the VM a prep will run there once finished (its
        # Selection's amounts); taken when it finishes
        self._landing: dict[tuple[str, str], RunningInstance] = {}
        #: migration -> the source (a host of this process) and the VM the
        #: resize took off it, run there again by a revert with the amounts it
        #: had; forgotten when the resize is confirmed or reverted.
        self.resized_away: dict[str, tuple[str, RunningInstance]] = {}

    def prep(self, ctxt: Any, attempt: Attempt, new_flavor: dict[str, Any]) -> None:
        """On the destination: check in, then hand over to the source (or fail)."""
        uuid, migration_uuid, chosen = (
            attempt.instance_uuid,
            attempt.migration_uuid,
            attempt.chosen,
        )
        assert migration_uuid is not None, "a resize names its migration"
        with self.bound_to(ctxt, attempt):
            here = (migration_uuid, chosen.host)
            with self.ledger.lock:
                self._zones[here] = chosen.availability_zone
                self._landing[here] = self.vm(ctxt, uuid, chosen, migration_uuid)
                reached = self.ledger.check_in(uuid, (RESIZE, *here))
            if reached == DELETED:
                LOG.info("resize_cancelled_by_delete")
                return
            if reached == UNDER_WAY:
                LOG.info("prep_resize_duplicate_ignored")
                return
            if reached == HANDED_ON:
                # A re-drive: a later step may have been lost, so walk it again
                # (every step is idempotent).
                LOG.info("prep_resize_duplicate_walks_again")
                self._hand_over(ctxt, uuid, migration_uuid, chosen)
                return
            if reached == DONE:
                LOG.info("prep_resize_duplicate_reported")
                self.conductor.resize_result(
                    ctxt,
                    uuid,
                    migration_uuid,
                    chosen.host,
                    True,
                    availability_zone=chosen.availability_zone,
                )
                return
            LOG.info("prep_resize", new_flavor=new_flavor.get("name"))
            self.stats.count(chosen.host, +1)
            self.driver.prepare_resize(
                chosen.host,
                uuid,
                lambda error: self._prepped(ctxt, attempt, migration_uuid, error),
            )

    def _prepped(
        self, ctxt: Any, attempt: Attempt, migration_uuid: str, error: VirtError | None
    ) -> None:
        uuid, chosen = attempt.instance_uuid, attempt.chosen
        with self.bound_to(ctxt, attempt):
            key = (RESIZE, migration_uuid, chosen.host)
            self.stats.count(chosen.host, -1)
            if self.ledger.deleted(uuid):
                self.ledger.record(uuid, key, FAILED)
                LOG.info("resize_cancelled_by_delete")
                return
            if error is not None:
                # Nova's bug 1741125 was a retry refused for the resources its
                # own failed attempt still held: release first, then hand back.
                step = steps.prep_resize_step(uuid, migration_uuid, chosen.host)
                released = self.release_if_here(uuid, chosen, step)
                self.ledger.record(uuid, key, FAILED)
                if released is None:
                    return
                LOG.info(
                    "prep_resize_failed", released=released, alternates=len(attempt.alternates)
                )
                self.conductor.reschedule(
                    ctxt,
                    uuid,
                    attempt.spec,
                    chosen.host,
                    error.message,
                    attempt.alternates,
                    migration_uuid=migration_uuid,
                )
                return
            self.ledger.record(uuid, key, HANDED_ON)
            self._hand_over(ctxt, uuid, migration_uuid, chosen)

    def _hand_over(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, chosen: Selection
    ) -> None:
        source = self.source_host(migration_uuid)
        if source is None:
            # The migration holds nothing: the conductor gave the resize up
            # (and handed the allocation back). Nothing to walk.
            self.ledger.record(instance_uuid, (RESIZE, migration_uuid, chosen.host), FAILED)
            LOG.warning("resize_abandoned")
            return
        self.casts.resize_instance(
            ctxt, source, instance_uuid, migration_uuid, chosen.host, chosen.node
        )

    def migrate(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, dest_host: str, dest_node: str
    ) -> None:
        """On the source: the VM off here and its disk to the destination, then
        let the destination finish."""
        with self.bound(
            ctxt, instance_uuid=instance_uuid, migration_uuid=migration_uuid, dest_host=dest_host
        ):
            LOG.info("resize_instance")
            casts = self.casts

            def copied(error: VirtError | None) -> None:
                casts.finish_resize(ctxt, dest_host, dest_node, instance_uuid, migration_uuid)

            source = self.source_host(migration_uuid)
            if source is None:  # the migration holds nothing: no disk to move
                copied(None)
                return

            def migrate(host: str, uuid: str) -> None:
                self.driver.migrate_disk_and_power_off(host, uuid, dest_host, copied)

            with self.ledger.lock:
                gone = self.vms.stop(instance_uuid, source, migrate)
                if gone is not None:  # a revert runs it there again
                    self.resized_away[migration_uuid] = (source, gone)

    def finish(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, dest_host: str, dest_node: str
    ) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        with self.bound(
            ctxt, instance_uuid=instance_uuid, host=dest_host, migration_uuid=migration_uuid
        ):
            here = (migration_uuid, dest_host)
            with self.ledger.lock:
                vm = self._landing.pop(here, None)
            if vm is None:  # finished already, or prepped before this process started
                vm = self.vm_held(ctxt, instance_uuid, dest_host, migration_uuid)
            with self.ledger.lock:
                if self.ledger.deleted(instance_uuid):
                    self.ledger.record(instance_uuid, (RESIZE, *here), FAILED)
                    LOG.info("resize_cancelled_by_delete")
                    return
                again = self.ledger.get(instance_uuid, (RESIZE, *here)) == DONE
                self.vms.start(vm, dest_host, self.driver.finish_migration)
                self.ledger.record(instance_uuid, (RESIZE, *here), DONE)
                zone = self._zones.get(here)
            LOG.info("finish_resize_reported_again" if again else "finish_resize")
            self.conductor.resize_result(
                ctxt, instance_uuid, migration_uuid, dest_host, True, availability_zone=zone
            )

    def confirm(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        """On the source: drop the source's allocation (the migration's)."""
        with self.bound(ctxt, instance_uuid=instance_uuid, migration_uuid=migration_uuid):
            step = steps.confirm_resize_step(instance_uuid, migration_uuid)
            try:
                released = self.store.release(migration_uuid, check=step.record_check())
            except RecordChanged as exc:
                self.guard.refused_at_write(step, exc)
                return
            with self.ledger.lock:
                away = self.resized_away.pop(migration_uuid, None)
            if away is not None:
                self.driver.confirm_migration(away[0], instance_uuid)
            LOG.info("resize_confirmed", released=released)
            self.conductor.resize_confirmed(ctxt, instance_uuid, migration_uuid)

    def revert(self, ctxt: Any, instance_uuid: str, migration_uuid: str) -> None:
        """On the destination: drop the instance's allocation here and hand the
        source's back to it, in one step; stop the VM here; then the source
        finishes (``finish_revert_resize``), in whichever process serves it.

        A repeat (a re-driven revert) finds the allocation moved already and
        asks the source again: the source is then where the instance's own
        allocation is.
        """
        with self.bound(ctxt, instance_uuid=instance_uuid, migration_uuid=migration_uuid):
            source = self.source_host(migration_uuid)
            step = steps.revert_resize_step(instance_uuid, migration_uuid)
            try:
                moved = self.store.move_allocations(
                    migration_uuid, instance_uuid, replace=True, check=step.record_check()
                )
            except RecordChanged as exc:
                self.guard.refused_at_write(step, exc)
                return
            if source is None:
                source = self.source_host(instance_uuid)
            with self.ledger.lock:
                for host in self.vms.hosts_of(instance_uuid):
                    if host != source:
                        self.vms.stop(instance_uuid, host)
                # A re-drive of this resize starts it again, never reports it done.
                self.ledger.undo(instance_uuid, RESIZE, migration_uuid)
            LOG.info("resize_reverted_here", moved=moved, source=source)
            if source is None:  # nothing held any more: deleted meanwhile
                self.conductor.resize_reverted(ctxt, instance_uuid, migration_uuid)
                return
            self.casts.finish_revert_resize(ctxt, source, instance_uuid, migration_uuid)

    def restore_abandoned(self) -> list[tuple[str, str]]:
        """Run again, on its source, each VM a resize took off a host of this
        process whose instance's record is ACTIVE there with that move gone
        (a resize given up after its source stopped the VM, or one a store
        gone back in time forgot): the VM is still on its source, as its disk
        is until a confirm. Called before each report; the (instance, host)
        pairs run again."""
        with self.ledger.lock:
            away = dict(self.resized_away)
        if not away:
            return []
        uuids = sorted({vm.uuid for _, vm in away.values()})
        found = {r.uuid: r for r in self.store.list_instances(uuids)}
        restored = []
        for migration_uuid, (source, vm) in away.items():
            record = found.get(vm.uuid)
            if (
                record is None
                or record.state != ACTIVE
                or record.task_state is not None
                or record.host != source
                or record.migration_uuid == migration_uuid
            ):
                continue
            with self.ledger.lock:
                if self.resized_away.pop(migration_uuid, None) is None:
                    continue  # confirmed or reverted meanwhile
                if self.ledger.deleted(vm.uuid) or self.vms.hosts_of(vm.uuid):
                    continue
                self.vms.start(
                    replace(vm, migration_uuid=None), source, self.driver.finish_revert_migration
                )
            LOG.warning(
                "resize_abandoned_vm_restarted",
                instance_uuid=vm.uuid,
                host=source,
                migration_uuid=migration_uuid,
            )
            restored.append((vm.uuid, source))
        return restored

    def finish_revert(
        self, ctxt: Any, instance_uuid: str, migration_uuid: str, source_host: str
    ) -> None:
        """On the source: run the instance here again (unless a delete reached
        it), then tell the conductor the revert is done. Idempotent."""
        with self.bound(
            ctxt, instance_uuid=instance_uuid, migration_uuid=migration_uuid, host=source_host
        ):
            with self.ledger.lock:
                away = self.resized_away.pop(migration_uuid, None)
            vm = (
                replace(away[1], migration_uuid=None, request_id=getattr(ctxt, "request_id", None))
                if away is not None
                else self.vm_held(ctxt, instance_uuid, source_host)
            )
            with self.ledger.lock:
                if not self.ledger.deleted(instance_uuid):
                    self.vms.start(vm, source_host, self.driver.finish_revert_migration)
            LOG.info("resize_reverted")
            self.conductor.resize_reverted(ctxt, instance_uuid, migration_uuid)
