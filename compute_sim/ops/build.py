"""A build on its host: ``build_and_run_instance``, or many of one request
in one ``build_and_run_instances`` cast (:meth:`Build.start_many`: each
guarded and built exactly as a single build is; their guards read in one
store round trip).

The driver prepares the VM (:meth:`~compute_sim.driver.ComputeDriver.prepare_spawn`:
with the simulator, ``build_time`` seconds, failing on ``fail_hosts`` or at
``fail_rate``) and then starts it. A failed build releases its claim and
hands the instance back to the conductor with the remaining alternates; a
success is reported (:meth:`Build.report_built`).

Builds are idempotent per instance uuid, host and request id (a re-driven
or rescheduled build keeps its request's id; an unshelve is a new request):
a repeated cast for a build still under way is ignored, one for a build
that succeeded reports the success again (the first report may have been
lost), and one after a failure is a new attempt. A failed build releases
the instance's claim only if that claim is on this host: a stale attempt
never drops the live one's.

A host builds only while the store holds the instance's claim on that very
host and the instance's record is BUILDING (:func:`compute_sim.steps.build`),
checked when the build starts (the step guard) and again before its VM
starts (or its failure is handed back): a duplicated cast after the attempt
failed and went elsewhere, a build the conductor gave up (ERROR after its
timeout, claim released) while the host was frozen, a build of an instance
being deleted or with no record is dropped (``step_refused``, with the step
and why): no VM, nothing reported, nothing released. A build a delete
reached here is cancelled (``build_cancelled_by_delete``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compute_sim import steps
from compute_sim.driver import VirtError
from compute_sim.ledger import BUILD, DELETED, DONE, FAILED, UNDER_WAY, Key
from compute_sim.ops.base import Attempt, Operation
from scheduler.build_results import record_built
from scheduler.exceptions import StoreError
from scheduler.log import get_logger
from scheduler.objects import Selection

if TYPE_CHECKING:
    from compute_sim.manager import ComputeManager

LOG = get_logger(__name__)

# How a build's success reaches the conductor (``compute-sim --build-results``):
# written to the store by this process, by the conductor's rule, or cast.
RESULTS_IN_STORE = "store"
RESULTS_BY_CAST = "cast"
BUILD_RESULTS = (RESULTS_IN_STORE, RESULTS_BY_CAST)


class Build(Operation):
    """The builds of one compute, and how many succeeded and failed."""

    def __init__(self, manager: ComputeManager) -> None:
        super().__init__(manager)
        self.ok = 0
        self.failed = 0
        self._failing: set[str] = set()  # hosts whose last build failed

    @staticmethod
    def key(ctxt: Any, host: str) -> Key:
        return (BUILD, host, getattr(ctxt, "request_id", None))

    def start_many(self, ctxt: Any, attempts: Sequence[Attempt]) -> None:
        """The builds of one batched cast: each guarded as a single build is
        (:func:`compute_sim.steps.build`; all read in one store round trip),
        then each one that passes started (:meth:`start`)."""
        request_id = getattr(ctxt, "request_id", None)
        guarded = [steps.build_step(a.instance_uuid, a.host) for a in attempts]
        for attempt, refused in zip(
            attempts, self.guard.refused_each(guarded, request_id), strict=True
        ):
            if not refused:
                self.start(ctxt, attempt)

    def start(self, ctxt: Any, attempt: Attempt) -> None:
        with self.bound_to(ctxt, attempt):
            reached = self.ledger.check_in(attempt.instance_uuid, self.key(ctxt, attempt.host))
            if reached == DELETED:
                LOG.info("build_of_deleted_instance_ignored")
                return
            if reached == UNDER_WAY:
                LOG.info("build_duplicate_ignored")
                return
            if reached == DONE:
                # Built already: the first report may have been lost, say it again.
                LOG.info("build_duplicate_reported")
                self.report_built(ctxt, attempt.instance_uuid, attempt.chosen)
                return
            self.stats.count(attempt.host, +1)
            self.driver.prepare_spawn(
                attempt.host,
                attempt.instance_uuid,
                lambda error: self._prepared(ctxt, attempt, error),
            )

    def _prepared(self, ctxt: Any, attempt: Attempt, error: VirtError | None) -> None:
        uuid, host = attempt.instance_uuid, attempt.host
        with self.bound_to(ctxt, attempt):
            key = self.key(ctxt, host)
            if self.ledger.deleted(uuid):  # deleted while building: no VM, no report
                self.ledger.record(uuid, key, FAILED)
                self.stats.count(host, -1)
                LOG.info("build_cancelled_by_delete")
                return
            if self.guard.refused(steps.build_step(uuid, host)):
                # Its claim went meanwhile (the conductor gave the build up, or
                # another attempt holds it elsewhere): no VM, nothing reported.
                self.ledger.record(uuid, key, FAILED)
                self.stats.count(host, -1)
                return
            started = False
            if error is None:
                try:
                    started = self._run(ctxt, attempt, key)
                except VirtError as exc:
                    error = exc
            image = dict(attempt.spec.image.properties) if attempt.spec.image is not None else {}
            self.stats.count(host, -1, image if started else None)
            if error is not None:
                self._failed(ctxt, attempt, key, error)
                return
            if not started:
                return
            LOG.info("build_succeeded")
            self.report_built(ctxt, uuid, attempt.chosen)

    def _run(self, ctxt: Any, attempt: Attempt, key: Key) -> bool:
        """Start the VM unless a delete came meanwhile (False then).

        :raises VirtError: the driver could not start it.
        """
        with self.ledger.lock:
            if self.ledger.deleted(attempt.instance_uuid):
                self.ledger.record(attempt.instance_uuid, key, FAILED)
                LOG.info("build_cancelled_by_delete")
                return False
            self.vms.start(self.vm(ctxt, attempt.instance_uuid, attempt.chosen), attempt.host)
            self.ledger.record(attempt.instance_uuid, key, DONE)
            self.ok += 1
            was_failing = attempt.host in self._failing
            self._failing.discard(attempt.host)
        if was_failing:
            self.store.record_build_result(attempt.host, success=True)
        return True

    def _failed(self, ctxt: Any, attempt: Attempt, key: Key, error: VirtError) -> None:
        # Release before handing back, so the retry can never be refused for
        # resources its own failed attempt still holds; and while this build
        # still counts as under way, so a duplicate cast arriving meanwhile
        # is not taken for a new attempt.
        step = steps.build_step(attempt.instance_uuid, attempt.host)
        if self.release_if_here(attempt.instance_uuid, attempt.chosen, step) is None:
            self.ledger.record(attempt.instance_uuid, key, FAILED)
            return
        with self.ledger.lock:
            self.ledger.record(attempt.instance_uuid, key, FAILED)
            self.failed += 1
            first_failure = attempt.host not in self._failing
            self._failing.add(attempt.host)
        self.store.record_build_result(attempt.host, success=False)
        LOG.info("build_failed", first_failure=first_failure, alternates=len(attempt.alternates))
        self.conductor.reschedule(
            ctxt,
            attempt.instance_uuid,
            attempt.spec,
            attempt.host,
            error.message,
            attempt.alternates,
        )

    def report_built(self, ctxt: Any, instance_uuid: str, chosen: Selection) -> None:
        """Say where the instance runs (the host, node and zone of the Selection
        it was built from): in the store itself, by the conductor's rule
        (:func:`scheduler.build_results.record_built`), or in a cast to the
        conductor (``build_results``). A store that cannot be written loses
        nothing: the record stays BUILDING, the conductor re-drives the request
        once its deadline passes, and the repeated build reports again."""
        if self.manager.build_results == RESULTS_BY_CAST:
            self.conductor.build_succeeded(
                ctxt, instance_uuid, chosen.host, chosen.node, chosen.availability_zone
            )
            return
        try:
            record_built(
                self.store, instance_uuid, chosen.host, chosen.node, chosen.availability_zone
            )
        except StoreError as exc:
            LOG.warning("build_result_not_recorded", error=exc.message)
