"""No request lost: the conductor's deadlines and re-drives.

oslo.messaging delivers casts at most once (it acknowledges before the
endpoint runs), so a worker killed with a backlog, or a broker that drops a
message, loses requests and nobody is told. So every request the conductor
sends is recorded with a deadline in the instance record, in the store, and
:class:`Sweeper` (run by ``conductor-stub serve``) re-drives the ones it has
not heard back on:

* BUILDING, waiting on the instances it preempts (task ``preempting``): built
  if they are gone, else it waits one more ``delete_timeout``, up to
  ``max_redrives`` times, then ERROR (see :mod:`conductor_stub.tasks.preempt`).
* BUILDING: ``run_instance`` is sent again for the one instance, with the
  same request id and the hosts already tried ignored. Scheduling is
  idempotent per instance uuid (a claim the instance holds is reused, never
  doubled) and a compute node ignores a build it already has (or reports
  again one it finished).
* RESIZING: ``resize`` is sent again with the same request id, so the same
  migration: its move is a no-op and the destination's claim is reused.
* RESIZED, confirming or reverting: the confirm or revert is cast again.
* REBUILDING: the evacuation is sent again with the same request id, so the
  same migration (see :mod:`conductor_stub.tasks.evacuate`): the source is parked
  once, the destination's claim is reused, the rebuild cast again.
* MIGRATING: the live migration is sent again with the same request id, so
  the same migration: its park is a no-op and the destination the instance
  holds is reused by the scheduler (never claimed twice), and its pre-checks
  cast again (each step is idempotent per migration on the computes).
* DELETING: the terminate is cast again to the hosts that have not answered
  (see :mod:`conductor_stub.tasks.delete`).
* SHELVING: the offload is cast again to the instance's host (see
  :mod:`conductor_stub.tasks.shelve`).
* PENDING (waiting for capacity): its deadline is the end of its wait; past
  it, the instance goes to ERROR, "No valid host was found." (see
  :mod:`conductor_stub.pending`).

After ``max_redrives`` re-drives the request has timed out: a boot ends in
ERROR (claim released; the record keeps a clean-up deadline, when whatever
a late copy claimed meanwhile is released too), a resize or a live migration ends ACTIVE
on its source with a fault, so does an evacuation (on its down source), a confirm
or revert is done here, in the store, and a delete or shelve finishes
without the hosts that never answered (its claims released; a VM left there
is the reconciler's).
So no instance stays in a transitional state past
``(max_redrives + 1) * timeout`` plus one sweep.

The pending set is read from the store on every sweep, never kept in
memory, so a restarted conductor carries on where the last one stopped. It
is read through the store's index of records by deadline
(:meth:`Store.list_instances_due`), so a sweep costs what is due, however
many finished records the store keeps.

Races, and why they are safe: a re-driven request whose first copy arrives
late finds the instance's claim and reuses it (or, if the instance has
finished meanwhile, its result is ignored); a result arriving after a
re-drive wins or loses the compare-and-set on the record's state and the
re-drive's own result is then ignored; a result for an instance already
given up releases what it holds (see :mod:`conductor_stub.records`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from conductor_stub import metrics, pending, records
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.base import request_context
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import Evacuator
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from conductor_stub.tasks.shelve import Shelver
from scheduler import policy
from scheduler.exceptions import RequestTimedOut
from scheduler.log import RepeatLimiter, bind_request, get_logger
from scheduler.objects import (
    BUILDING,
    DELETING,
    ERROR,
    MIGRATING,
    PENDING,
    PREEMPTING,
    REBUILDING,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    SHELVING,
    InstanceRecord,
)
from scheduler.rpc import SchedulerClient

LOG = get_logger(__name__)
#: A failure every sweep repeats (the store or broker down, the same broken
#: record re-driven): identical warnings a few times a minute at most.
REPEATS = RepeatLimiter()

#: What the user reads when the conductor gave up (as the policy says).
TIMED_OUT = policy.user_reason(RequestTimedOut())

#: Records handled per sweep at most (the rest wait for the next one).
SWEEP_BATCH = 1000


class Sweeper:
    """Re-drives the requests past their deadline; gives up after ``max_redrives``.

    ``counts`` totals what every sweep did, by kind (``run_instance``,
    ``resize``, ``confirm``, ``revert``, ``terminate``, ``timed_out``,
    ``cleaned_up``, ``delete_done_here``, ``shelve``, ``shelve_done_here``,
    ``evacuate``, ``live_migrate``, ``pending_timed_out``). ``deleter`` re-sends terminates,
    ``shelver`` offloads, ``evacuator`` evacuations and ``migrator`` live
    migrations (by default on the resizer's clients).
    """

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient,
        resizer: Resizer,
        settings: ConductorSettings,
        clock: Callable[[], float] = time.time,
        deleter: Deleter | None = None,
        shelver: Shelver | None = None,
        evacuator: Evacuator | None = None,
        migrator: LiveMigrator | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.resizer = resizer
        self.settings = settings
        self._clock = clock
        self.deleter = deleter or Deleter(store, resizer.compute, settings, clock)
        self.shelver = shelver or Shelver(store, scheduler, resizer.compute, settings, clock)
        self.evacuator = evacuator or Evacuator(
            store, scheduler, resizer.compute, settings, clock=clock
        )
        self.migrator = migrator or LiveMigrator(
            store, scheduler, resizer.compute, settings, clock
        )
        self.counts: Counter[str] = Counter()

    def run(self, stop: threading.Event) -> None:
        """Sweep every ``sweep_interval`` seconds until ``stop`` is set."""
        while not stop.wait(self.settings.sweep_interval):
            try:
                self.sweep()
            except Exception as exc:  # noqa: BLE001 - the store or broker is down: next sweep
                REPEATS.log(LOG, "warning", "sweep_failed", error=repr(exc))

    def sweep(self) -> int:
        """Handle the records past their deadline (at most :data:`SWEEP_BATCH`,
        earliest first); return how many there were."""
        due = self.store.list_instances_due(self._clock(), SWEEP_BATCH)
        for record in due:
            with bind_request(instance_uuid=record.uuid, request_id=record.request_id):
                try:
                    self._handle(record)
                except Exception as exc:  # noqa: BLE001 - one record must not stop the rest
                    REPEATS.log(LOG, "warning", "redrive_failed", error=repr(exc))
        return len(due)

    def _handle(self, record: InstanceRecord) -> None:
        if record.state == BUILDING and record.task_state == PREEMPTING:
            self._preempt(record)
        elif record.state == BUILDING:
            self._boot(record)
        elif record.state == RESIZING:
            self._resize(record)
        elif record.state == RESIZED and record.task_state in (
            RESIZE_CONFIRMING,
            RESIZE_REVERTING,
        ):
            self._finish_resize(record)
        elif record.state == ERROR:
            self._clean_up(record)
        elif record.state == DELETING:
            self._delete(record)
        elif record.state == SHELVING:
            self._shelve(record)
        elif record.state == REBUILDING:
            self._evacuate(record)
        elif record.state == MIGRATING:
            self._live_migrate(record)
        elif record.state == PENDING:  # waited for capacity as long as it may
            if pending.expire(self.store, record, self._clock):
                self.counts["pending_timed_out"] += 1
                metrics.TIMED_OUT.labels("pending").inc()
        else:  # nothing outstanding: a deadline left behind
            self.store.update_instance(record.uuid, expected_states=[record.state], deadline=None)

    # --- one kind of request each ---------------------------------------------------

    def _boot(self, record: InstanceRecord) -> None:
        timeout = self.settings.build_timeout
        if record.redrives >= self.settings.max_redrives:
            if records.fail_build(
                self.store,
                record.uuid,
                TIMED_OUT,
                self._timed_out(record, "boot", timeout),
                cleanup_after=timeout,
                clock=self._clock,
            ):
                self.counts["timed_out"] += 1
                metrics.TIMED_OUT.labels("run_instance").inc()
                LOG.warning("request_timed_out", kind="run_instance", redrives=record.redrives)
            return
        if self._push(record, BUILDING, timeout) is None:
            return
        self.scheduler.run_instance(
            request_context(record), records.build_spec(record), [record.uuid]
        )
        self._redriven("run_instance", record)

    def _preempt(self, record: InstanceRecord) -> None:
        """A boot waiting on the instances it preempts (never sent again: its
        claim is held; see :mod:`conductor_stub.tasks.preempt`)."""
        done = self.deleter.preempter.redrive(record)
        if done == "preempt_wait":
            self._redriven(done, record)
            return
        self.counts[done] += 1
        if done == "timed_out":
            metrics.TIMED_OUT.labels("run_instance").inc()
            LOG.warning("request_timed_out", kind="preempt", redrives=record.redrives)

    def _resize(self, record: InstanceRecord) -> None:
        if record.redrives >= self.settings.max_redrives:
            if records.fail_move(
                self.store,
                record,
                TIMED_OUT,
                self._timed_out(record, "resize", self.settings.resize_timeout),
                clock=self._clock,
            ):
                self.counts["timed_out"] += 1
                metrics.TIMED_OUT.labels("resize").inc()
                LOG.warning("request_timed_out", kind="resize", redrives=record.redrives)
            return
        updated = self._push(record, RESIZING, self.settings.resize_timeout)
        if updated is not None:
            self.resizer.send_resize(updated)
            self._redriven("resize", record)

    def _finish_resize(self, record: InstanceRecord) -> None:
        confirming = record.task_state == RESIZE_CONFIRMING
        kind = "confirm" if confirming else "revert"
        if record.redrives >= self.settings.max_redrives:
            # Compute never answered: do in the store what it would have done.
            assert record.migration_uuid is not None
            if confirming:
                self.store.release(record.migration_uuid)
                done = records.finish_confirm(self.store, record, clock=self._clock)
            else:
                self.store.move_allocations(record.migration_uuid, record.uuid, replace=True)
                done = records.finish_revert(self.store, record, clock=self._clock)
            if done:
                self.counts[f"{kind}_done_here"] += 1
                LOG.warning("resize_finished_by_conductor", kind=kind, redrives=record.redrives)
            return
        updated = self._push(record, RESIZED, self.settings.resize_timeout)
        if updated is not None:
            (self.resizer.send_confirm if confirming else self.resizer.send_revert)(updated)
            self._redriven(kind, record)

    def _delete(self, record: InstanceRecord) -> None:
        if record.redrives >= self.settings.max_redrives:
            done = self.deleter.finish(record.uuid, None, force=True)
            if done is not None:
                self.counts["delete_done_here"] += 1
                LOG.warning(
                    "delete_finished_by_conductor",
                    redrives=record.redrives,
                    unanswered=list(record.pending_hosts),
                )
            return
        updated = self._push(record, DELETING, self.settings.delete_timeout)
        if updated is not None:
            self.deleter.terminate(updated)
            self._redriven("terminate", record)

    def _shelve(self, record: InstanceRecord) -> None:
        if record.redrives >= self.settings.max_redrives:
            if self.shelver.offloaded(record.uuid, None) is not None:
                self.counts["shelve_done_here"] += 1
                LOG.warning(
                    "shelve_finished_by_conductor", redrives=record.redrives, host=record.host
                )
            return
        updated = self._push(record, SHELVING, self.settings.delete_timeout)
        if updated is not None:
            self.shelver.send_shelve(updated)
            self._redriven("shelve", record)

    def _evacuate(self, record: InstanceRecord) -> None:
        if record.redrives >= self.settings.max_redrives:
            if records.fail_move(
                self.store,
                record,
                TIMED_OUT,
                self._timed_out(record, "evacuate", self.settings.build_timeout),
                clock=self._clock,
            ):
                self.counts["timed_out"] += 1
                metrics.TIMED_OUT.labels("evacuate").inc()
                LOG.warning("request_timed_out", kind="evacuate", redrives=record.redrives)
            return
        updated = self._push(record, REBUILDING, self.settings.build_timeout)
        if updated is not None:
            self.evacuator.send(updated)
            self._redriven("evacuate", record)

    def _live_migrate(self, record: InstanceRecord) -> None:
        timeout = self.settings.live_migration_timeout
        if record.redrives >= self.settings.max_redrives:
            if records.fail_move(
                self.store,
                record,
                TIMED_OUT,
                self._timed_out(record, "live migration", timeout),
                clock=self._clock,
            ):
                self.counts["timed_out"] += 1
                metrics.TIMED_OUT.labels("live_migrate").inc()
                LOG.warning("request_timed_out", kind="live_migrate", redrives=record.redrives)
            return
        updated = self._push(record, MIGRATING, timeout)
        if updated is not None:
            self.migrator.send(updated)
            self._redriven("live_migrate", record)

    def _clean_up(self, record: InstanceRecord) -> None:
        """An instance given up: release what a late attempt may have claimed."""
        released = self.store.release(record.uuid)
        self.store.update_instance(record.uuid, expected_states=[ERROR], deadline=None)
        if released:
            self.counts["cleaned_up"] += 1
        LOG.info("given_up_instance_cleaned", released=released)

    # --- helpers --------------------------------------------------------------------

    def _push(self, record: InstanceRecord, state: str, timeout: float) -> InstanceRecord | None:
        """Count one more re-drive and set the next deadline, if still in ``state``."""
        now = self._clock()
        return self.store.update_instance(
            record.uuid,
            expected_states=[state],
            redrives=record.redrives + 1,
            updated_at=now,
            deadline=now + timeout,
        )

    def _redriven(self, kind: str, record: InstanceRecord) -> None:
        self.counts[kind] += 1
        metrics.REDRIVES.labels(kind).inc()
        LOG.info(
            "request_redriven",
            kind=kind,
            redrive=record.redrives + 1,
            task_state=record.task_state,
            host=record.host,
        )

    @staticmethod
    def _timed_out(record: InstanceRecord, what: str, timeout: float) -> str:
        return (
            f"no answer to the {what} request after {record.redrives} re-drive(s), "
            f"{timeout:g} s each (task {record.task_state}, host {record.host or 'none'}, "
            f"hosts tried: {', '.join(record.tried_hosts) or 'none'})"
        )
