"""Draining a host: take it out of scheduling, then move every instance off it.

:meth:`Drainer.drain` first disables the host exactly as ``scheduler-admin
host disable HOST --reason draining`` does (the service flag and the
``COMPUTE_STATUS_DISABLED`` trait in one atomic store write,
:func:`scheduler.store.services.set_host_disabled`), so no new boot or move lands
there. Then it moves each instance ACTIVE on the host through the
conductor's move API: a cold migration (:meth:`Resizer.migrate`), confirmed
once RESIZED since the operator wants the host empty, or with ``live`` a
live migration (:meth:`LiveMigrator.start`). The scheduler picks each
destination with the instance's own request spec, as for any move.

At most ``parallel`` moves are in flight at once; one ends *moved* (ACTIVE on
another host), *failed* (back ACTIVE on the host, with the record's fault:
e.g. no valid host) or *timed out*. Instances in other states (BUILDING,
RESIZING, MIGRATING, ...) are *skipped* with their state; with ``wait`` the
drain waits for those still under way to settle and moves the ones that end
ACTIVE on the host. The drain always follows the moves it started to their
end (it confirms them), within ``timeout`` seconds for the whole drain.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conductor_stub.records import ConductorStore
from conductor_stub.tasks.base import wait_for
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import SchedulerError
from scheduler.log import get_logger
from scheduler.objects import (
    ACTIVE,
    DELETED,
    FINAL_STATES,
    MIGRATING,
    RESIZED,
    RESIZING,
    InstanceRecord,
)
from scheduler.store.services import set_host_disabled

LOG = get_logger(__name__)

#: The disabled reason a drain leaves on its host.
DRAIN_REASON = "draining"

MOVED = "moved"
FAILED = "failed"
SKIPPED = "skipped"
TIMED_OUT = "timed out"

#: States an instance does not leave by itself: a drain waits for no other.
SETTLED_STATES = FINAL_STATES | {RESIZED}

# Phases of a move in flight.
_MOVING = "moving"
_CONFIRMING = "confirming"


@dataclass(frozen=True)
class DrainOutcome:
    """What became of one instance of the host: ``outcome`` is one of
    :data:`MOVED`, :data:`FAILED`, :data:`SKIPPED`, :data:`TIMED_OUT`;
    ``host`` is where it is now, ``reason`` why it did not move."""

    uuid: str
    outcome: str
    state: str
    host: str | None
    reason: str | None = None

    def to_primitive(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "outcome": self.outcome,
            "state": self.state,
            "host": self.host,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DrainReport:
    """A drain's instances in the order they finished, and what is left on
    the host at the end (live records whose host it is, in any state)."""

    host: str
    live: bool
    instances: tuple[DrainOutcome, ...]
    still_on_host: int
    active_left: int
    timed_out: bool

    def count(self, outcome: str) -> int:
        return sum(o.outcome == outcome for o in self.instances)

    @property
    def drained(self) -> bool:
        """The host ended empty of ACTIVE instances, every move done in time."""
        return self.active_left == 0 and not self.timed_out and not self.count(FAILED)

    @property
    def exit_code(self) -> int:
        """0 drained; 1 some instance could not move, or the drain timed out."""
        return 0 if self.drained else 1

    def summary(self) -> dict[str, int]:
        return {
            "moved": self.count(MOVED),
            "failed": self.count(FAILED),
            "skipped": self.count(SKIPPED),
            "timed_out": self.count(TIMED_OUT),
            "still_on_host": self.still_on_host,
            "active_left": self.active_left,
        }

    def to_primitive(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "live": self.live,
            "drained": self.drained,
            "timed_out": self.timed_out,
            "summary": self.summary(),
            "instances": [o.to_primitive() for o in self.instances],
        }


def format_outcome(outcome: DrainOutcome) -> str:
    """One progress line: moved to which host, or why not."""
    if outcome.outcome == MOVED:
        return f"{outcome.uuid} moved to {outcome.host}"
    if outcome.outcome == FAILED:
        return f"{outcome.uuid} could not move: {outcome.reason}"
    return f"{outcome.uuid} {outcome.outcome}: {outcome.reason or outcome.state}"


def format_summary(report: DrainReport) -> str:
    counts = report.summary()
    verdict = "drained" if report.drained else "not drained"
    return (
        f"host {report.host} {verdict}: moved {counts['moved']}, failed {counts['failed']}, "
        f"skipped {counts['skipped']}, timed out {counts['timed_out']}; still on the host "
        f"{counts['still_on_host']} ({counts['active_left']} ACTIVE)"
    )


class Drainer:
    """Disables a host and moves its instances off, ``parallel`` at a time."""

    def __init__(
        self,
        store: ConductorStore,
        resizer: Resizer,
        migrator: LiveMigrator,
        *,
        parallel: int = 4,
        poll: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {parallel}")
        self.store = store
        self.resizer = resizer
        self.migrator = migrator
        self.parallel = parallel
        self.poll = poll
        self._sleep = sleep
        self._monotonic = monotonic

    def on_host(self, host: str) -> list[InstanceRecord]:
        """The live records whose host is ``host``, in any state, by uuid."""
        return sorted(
            (r for r in self.store.scan_instances() if r.host == host), key=lambda r: r.uuid
        )

    def drain(
        self,
        host: str,
        *,
        live: bool = False,
        wait: bool = False,
        timeout: float = 300.0,
        progress: Callable[[DrainOutcome], None] | None = None,
    ) -> DrainReport:
        """Disable ``host``, then move its ACTIVE instances off it.

        :raises NotFound: no such host (nothing changed).
        """
        set_host_disabled(self.store, host, True, DRAIN_REASON)
        LOG.info("drain_started", host=host, live=live, parallel=self.parallel)
        outcomes: list[DrainOutcome] = []

        def finish(outcome: DrainOutcome) -> None:
            outcomes.append(outcome)
            LOG.info(
                "drain_instance_done",
                drained_host=host,
                instance_uuid=outcome.uuid,
                outcome=outcome.outcome,
                state=outcome.state,
                now_on=outcome.host,
                reason=outcome.reason,
            )
            if progress is not None:
                progress(outcome)

        pending: deque[str] = deque()
        waiting: set[str] = set()  # under way on the host, awaited (``wait``)
        flight: dict[str, str] = {}  # uuid -> phase
        for record in self.on_host(host):
            if record.state == ACTIVE:
                pending.append(record.uuid)
            elif wait and record.state not in SETTLED_STATES:
                waiting.add(record.uuid)
            else:
                finish(_outcome(record, SKIPPED, record.state))

        def round_() -> bool:
            """Start moves up to ``parallel``, follow those under way; True
            once none is left to start, follow or wait for."""
            while pending and len(flight) < self.parallel:
                uuid = pending.popleft()
                try:
                    if live:
                        self.migrator.start(uuid)
                    else:
                        self.resizer.migrate(uuid)
                except SchedulerError as exc:  # e.g. it changed state meanwhile
                    finish(_outcome(self._record(uuid), FAILED, _reason(exc)))
                else:
                    flight[uuid] = _MOVING
            for uuid, phase in list(flight.items()):
                done = self._step(self._record(uuid), phase, host, live, flight)
                if done is not None:
                    del flight[uuid]
                    finish(done)
            for uuid in sorted(waiting):
                record = self._record(uuid)
                if record.host == host and record.state == ACTIVE:
                    waiting.discard(uuid)
                    pending.append(uuid)
                elif record.host != host or record.state in SETTLED_STATES:
                    waiting.discard(uuid)
                    finish(_outcome(record, SKIPPED, record.state))
            return not (pending or flight or waiting)

        _, timed_out = wait_for(
            round_,
            lambda finished: finished,
            timeout,
            self.poll,
            sleep=self._sleep,
            monotonic=self._monotonic,
        )
        if timed_out:
            for uuid in [*flight, *sorted(waiting), *pending]:
                record = self._record(uuid)
                finish(_outcome(record, TIMED_OUT, f"{record.state} after {timeout:g} s"))
        left = self.on_host(host)
        report = DrainReport(
            host=host,
            live=live,
            instances=tuple(outcomes),
            still_on_host=len(left),
            active_left=sum(r.state == ACTIVE for r in left),
            timed_out=timed_out,
        )
        LOG.info("drain_finished", host=host, drain_timed_out=timed_out, **report.summary())
        return report

    def _record(self, uuid: str) -> InstanceRecord:
        found = self.store.list_instances([uuid])
        if found:
            return found[0]
        return InstanceRecord(uuid=uuid, state=DELETED)  # gone past its retention

    def _step(
        self, record: InstanceRecord, phase: str, host: str, live: bool, flight: dict[str, str]
    ) -> DrainOutcome | None:
        """Follow one move; its outcome once it has ended (None: still under way)."""
        if record.state == (MIGRATING if live else RESIZING):
            return None
        if not live and record.state == RESIZED:
            if phase == _MOVING and record.task_state is None:
                try:
                    self.resizer.confirm(record.uuid)
                except SchedulerError as exc:
                    return _outcome(record, FAILED, _reason(exc))
                flight[record.uuid] = _CONFIRMING
            return None
        if record.state == ACTIVE and record.host != host:
            return _outcome(record, MOVED)
        if record.state == ACTIVE:  # the move failed back to the host
            return _outcome(record, FAILED, record.fault or f"still on {host}")
        fault = f": {record.fault}" if record.fault else ""
        return _outcome(record, FAILED, f"{record.state}{fault}")  # e.g. deleted meanwhile


def _outcome(record: InstanceRecord, outcome: str, reason: str | None = None) -> DrainOutcome:
    return DrainOutcome(record.uuid, outcome, record.state, record.host, reason)


def _reason(exc: SchedulerError) -> str:
    return str(exc.kwargs.get("reason") or exc.message)
