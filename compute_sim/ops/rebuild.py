"""An evacuation's destination: ``rebuild_instance`` (RPC 1.6).

The destination rebuilds the instance (the driver prepares it,
:meth:`~compute_sim.driver.ComputeDriver.prepare_rebuild`, then starts it) and
reports ``rebuild_result``; it fails as a build does (with the simulator, on
``fail_hosts`` or at ``fail_rate``): the claim here is released first, then
the alternates are handed back. Idempotent per migration and host, as a
resize's steps are: a repeat of one under way is ignored, of one done is
reported again. It is guarded as a build is: the record REBUILDING under
that migration and its claim on this host, when the rebuild starts and again
before its VM starts.
"""

from __future__ import annotations

from typing import Any

from compute_sim import steps
from compute_sim.driver import VirtError
from compute_sim.ledger import DELETED, DONE, FAILED, REBUILD, UNDER_WAY, Key
from compute_sim.ops.base import Attempt, Operation
from scheduler.log import get_logger

LOG = get_logger(__name__)


class Rebuild(Operation):
    """The evacuations this compute is the destination of."""

    @staticmethod
    def key(attempt: Attempt) -> Key:
        return (REBUILD, attempt.migration_uuid, attempt.host)

    def start(self, ctxt: Any, attempt: Attempt) -> None:
        with self.bound_to(ctxt, attempt):
            reached = self.ledger.check_in(attempt.instance_uuid, self.key(attempt))
            if reached == DELETED:
                LOG.info("rebuild_of_deleted_instance_ignored")
                return
            if reached == UNDER_WAY:
                LOG.info("rebuild_duplicate_ignored")
                return
            if reached == DONE:
                LOG.info("rebuild_duplicate_reported")
                self._report_rebuilt(ctxt, attempt)
                return
            LOG.info("rebuild_instance")
            self.stats.count(attempt.host, +1)
            self.driver.prepare_rebuild(
                attempt.host,
                attempt.instance_uuid,
                lambda error: self._prepared(ctxt, attempt, error),
            )

    def _prepared(self, ctxt: Any, attempt: Attempt, error: VirtError | None) -> None:
        uuid, migration_uuid = attempt.instance_uuid, attempt.migration_uuid
        assert migration_uuid is not None, "an evacuation's rebuild names its migration"
        with self.bound_to(ctxt, attempt):
            key = self.key(attempt)
            self.stats.count(attempt.host, -1)
            if self.guard.refused(steps.rebuild_step(uuid, migration_uuid, attempt.host)):
                self.ledger.record(uuid, key, FAILED)
                return
            with self.ledger.lock:
                if self.ledger.deleted(uuid):
                    self.ledger.record(uuid, key, FAILED)
                    LOG.info("rebuild_cancelled_by_delete")
                    return
                if error is None:
                    try:
                        vm = self.vm(ctxt, uuid, attempt.chosen, migration_uuid)
                        self.vms.start(vm, attempt.host)
                        self.ledger.record(uuid, key, DONE)
                    except VirtError as exc:
                        error = exc
            if error is None:
                LOG.info("rebuild_succeeded")
                self._report_rebuilt(ctxt, attempt)
                return
            step = steps.rebuild_step(uuid, migration_uuid, attempt.host)
            released = self.release_if_here(uuid, attempt.chosen, step)
            self.ledger.record(uuid, key, FAILED)
            if released is None:
                return
            LOG.info("rebuild_failed", released=released, alternates=len(attempt.alternates))
            self.conductor.rebuild_result(
                ctxt,
                uuid,
                migration_uuid,
                attempt.host,
                False,
                reason=error.message,
                spec=attempt.spec,
                alternates=attempt.alternates,
            )

    def _report_rebuilt(self, ctxt: Any, attempt: Attempt) -> None:
        assert attempt.migration_uuid is not None, "an evacuation's rebuild names its migration"
        self.conductor.rebuild_result(
            ctxt,
            attempt.instance_uuid,
            attempt.migration_uuid,
            attempt.host,
            True,
            node=attempt.chosen.node,
            availability_zone=attempt.chosen.availability_zone,
        )
