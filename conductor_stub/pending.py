"""Waiting for capacity: PENDING requests, their retries and their time-out.

A boot may ask to wait rather than fail when no host fits (its record's
``max_wait``, set when it was recorded: the boot's ``--wait-for-capacity``,
or its priority class's ``wait`` flag, ``[priority] max_wait`` seconds; see
:func:`scheduler.priority.max_wait`). When the scheduler answers "no valid
host" for such an instance (``schedule_failed``, or a
``select_destinations`` that found none):

1. **It goes PENDING** (:func:`park`): a compare-and-set from BUILDING, so a
   duplicate answer of a re-driven request does nothing; whatever it held is
   released (a PENDING instance holds nothing); its deadline is when its wait
   ends (``waiting_since + max_wait``), so the conductor's sweep (the deadline
   index, :mod:`conductor_stub.redrive`) times it out even if nothing else
   runs; the last refusal's reasons stay in ``fault_details`` for the admin.
   Then it is indexed in the store's pending index by priority (higher first)
   then age (:class:`~scheduler.store.base.PendingIndex`).
2. **It is retried** (:class:`PendingRetrier`, a thread of ``conductor-stub
   serve``) when something that could make it fit happens, read from the
   store's change feed the way kube-scheduler's queueing hints requeue a pod
   (:func:`could_fit`: an allocation released or shrunk, a provider added,
   its capacity raised or its traits or aggregates changed, an aggregate
   changed, a host enabled or registered; a claim or a host disabled never
   wakes anyone), and in a slow periodic pass. A retry takes the first
   ``pending_retry_batch`` entries in order; each is a compare-and-set from
   PENDING to BUILDING (its attempts and re-drives counted afresh, its
   build deadline set), then its entry goes and ``run_instance`` is sent
   again, as the conductor's re-drive sends it: from then on it is a boot
   like any other. Found no host again, it goes back PENDING at its place
   (its age is its record's creation), with its original ``waiting_since``.
3. **It times out** (:func:`expire`): past its deadline the sweep puts it in
   ERROR with "No valid host was found." and details saying how long it
   waited and why it found no host the last time.

Measured (:mod:`conductor_stub.metrics`): how many wait after each turn of
the retrier, and each wait once it ends, placed (a request this retrier sent
seen ACTIVE) or timed out.

A PENDING instance is listed and shown as any other, explained from its
record (``scheduler-admin explain --from-instance``) and deleted through the
ordinary delete (it has no host to wait on: it is DELETED at once).

Crash safety: every step is a compare-and-set on the record's state, and
the index is written after the record, so a conductor killed at any point
leaves either a PENDING record not yet indexed (its deadline still times it
out; the reconciler indexes it, :func:`audit_index`), or an index entry whose
record has moved on (a BUILDING one is re-driven by the sweep as any boot;
the retrier and the reconciler drop the entry once the record is neither
PENDING nor BUILDING), never two retries of one request: only one
compare-and-set from PENDING wins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from conductor_stub import metrics, records
from conductor_stub.findings import (
    PENDING_UNINDEXED,
    SKIPPED,
    STALE_PENDING,
    Finding,
    stale_entry,
)
from conductor_stub.records import ConductorStore
from conductor_stub.tasks.base import request_context
from scheduler.build_results import placed_on
from scheduler.exceptions import NoValidHost, StreamTruncated
from scheduler.log import RepeatLimiter, get_logger, mask_secrets
from scheduler.objects import ACTIVE, BUILDING, PENDING, SCHEDULING, InstanceRecord
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.rpc import SchedulerClient
from scheduler.store import Change, ChangeFeed, Provider, Service

LOG = get_logger(__name__)
REPEATS = RepeatLimiter()

#: Seconds between two reads of the change feed.
FEED_POLL = 1.0
#: Changes read per page of the feed.
FEED_PAGE = 1000


def no_valid_host(reason: str) -> bool:
    """Whether a ``schedule_failed`` reason says the request found no host.

    The message carries the user's reason, which :func:`scheduler.policy.user_reason`
    sets from the failure's type: for NoValidHost it is always the class's
    constant, so this compares a code, not a text someone wrote."""
    return reason == NoValidHost.USER_MESSAGE


def waits(record: InstanceRecord) -> bool:
    """Whether the instance waits for capacity when it finds no host."""
    return record.max_wait is not None


def waited(record: InstanceRecord, since: float, now: float, details: str | None) -> str:
    """The admin details of a request that waited its whole ``max_wait``."""
    last = f"; the last try found: {details}" if details else ""
    return (
        f"waited {now - since:.0f} s for capacity (max_wait {record.max_wait or 0:g} s) "
        f"and no host fit{last}"
    )


def park(
    store: ConductorStore,
    record: InstanceRecord,
    details: str,
    clock: Callable[[], float] = time.time,
) -> bool:
    """BUILDING -> PENDING, or -> ERROR if its wait is already over; then
    indexed (see the module's docstring). False if it was no longer
    BUILDING (nothing done)."""
    now = clock()
    since = record.waiting_since if record.waiting_since is not None else now
    deadline = since + (record.max_wait or 0.0)
    if deadline <= now:
        return records.fail_build(
            store,
            record.uuid,
            NoValidHost.USER_MESSAGE,
            waited(record, since, now, details),
            clock=clock,
        )
    done = store.update_instance(
        record.uuid,
        expected_states=[BUILDING],
        state=PENDING,
        task_state=None,
        **placed_on(),
        fault=None,
        fault_details=mask_secrets(details),
        updated_at=now,
        deadline=deadline,
        waiting_since=since,
    )
    if done is None:
        return False
    released = store.release(record.uuid)
    store.add_pending(done.uuid, done.priority, done.created_at)
    LOG.info(
        "instance_pending",
        instance_uuid=record.uuid,
        priority=done.priority,
        waits_until=deadline,
        released=released,
    )
    return True


def expire(store: ConductorStore, record: InstanceRecord, clock: Callable[[], float]) -> bool:
    """A PENDING instance past its deadline: ERROR, "No valid host was found.",
    the details saying it waited; its index entry dropped. False if it was no
    longer PENDING."""
    now = clock()
    since = record.waiting_since if record.waiting_since is not None else record.created_at
    done = records.fail_build(
        store,
        record.uuid,
        NoValidHost.USER_MESSAGE,
        waited(record, since, now, record.fault_details),
        clock=clock,
        state=PENDING,
    )
    store.remove_pending(record.uuid)
    if done:
        LOG.warning("pending_timed_out", instance_uuid=record.uuid, waited=now - since)
        metrics.PENDING_WAIT_SECONDS.labels("timed_out").observe(max(now - since, 0.0))
    return done


def retry(
    store: ConductorStore,
    scheduler: SchedulerClient,
    record: InstanceRecord,
    build_timeout: float,
    clock: Callable[[], float] = time.time,
) -> bool:
    """PENDING -> BUILDING and ``run_instance`` sent again; False (nothing
    sent) if the record was no longer PENDING."""
    now = clock()
    updated = store.update_instance(
        record.uuid,
        expected_states=[PENDING],
        state=BUILDING,
        task_state=SCHEDULING,
        attempts=0,
        tried_hosts=(),
        redrives=0,
        updated_at=now,
        deadline=now + build_timeout,
    )
    if updated is None:
        return False
    store.remove_pending(record.uuid)
    # Sent once the record says BUILDING: a conductor killed before the send
    # leaves a boot whose deadline the sweep re-drives.
    scheduler.run_instance(request_context(updated), records.build_spec(updated), [updated.uuid])
    LOG.info("pending_retried", instance_uuid=record.uuid, priority=record.priority)
    return True


# --- what could make a request fit (the queueing hints) ---------------------------


class FeedState:
    """What the hints compare a change with, as the feed last said it: each
    provider (its capacities, traits and aggregates) and usages, each host's
    disabled state."""

    def __init__(self) -> None:
        self.providers: dict[str, Provider] = {}
        self.usages: dict[str, Mapping[str, int]] = {}
        self.disabled: dict[str, bool] = {}


def _capacities(provider: Provider) -> dict[str, int]:
    return {rc: inv.capacity for rc, inv in provider.inventories.items()}


def _provider_could_fit(provider: Provider, before: Provider | None) -> bool:
    """A provider added, a capacity raised, its aggregates changed, or its
    traits changed other than by being disabled (the disabled trait set)."""
    if before is None:
        return True
    old, new = _capacities(before), _capacities(provider)
    if any(cap > old.get(rc, 0) for rc, cap in new.items()):
        return True
    gained = provider.traits - before.traits - {COMPUTE_STATUS_DISABLED}
    lost = before.traits - provider.traits
    return bool(gained or lost) or provider.aggregates != before.aggregates


def could_fit(change: Change, seen: FeedState) -> bool:
    """Whether ``change`` could make a waiting request fit somewhere.

    A usage that shrank (a delete, a move off a host, a failed build's
    release) could; one that only grew (a claim) could not. A provider
    added, or one whose capacity was raised, whose aggregates changed, or
    whose traits changed (but for being disabled) could, and so could an
    aggregate's metadata. A host enabled, or registered, could; its other
    service changes (disabled, stats, failed builds) could not. What is
    first seen since start could (nothing to compare it with: better one
    retry too many than a request left waiting)."""
    if change.kind == "usage":
        data = change.data
        usages = dict(data.get("usages") or {})
        before = seen.usages.get(data["uuid"])
        seen.usages[data["uuid"]] = usages
        return before is None or any(usages.get(rc, 0) < used for rc, used in before.items())
    if change.kind == "provider" and isinstance(change.data, Provider):
        provider = change.data
        before_provider = seen.providers.get(provider.uuid)
        seen.providers[provider.uuid] = provider
        seen.usages[provider.uuid] = dict(provider.usages)
        return _provider_could_fit(provider, before_provider)
    if change.kind == "aggregate":
        return True
    if change.kind == "service" and isinstance(change.data, Service):
        service = change.data
        was = seen.disabled.get(service.host)
        seen.disabled[service.host] = service.disabled
        return not service.disabled and (was is None or was)
    return False


@dataclass(frozen=True)
class PendingSettings:
    """``[priority]``'s options for the retries, read once and passed in."""

    retry_interval: float = 60.0
    retry_batch: int = 20
    build_timeout: float = 120.0


class PendingStore(ConductorStore, ChangeFeed, Protocol):
    """What the retrier reads: the records, the pending index and the feed."""


class PendingRetrier:
    """Retries the PENDING requests in order when the feed says capacity may
    have come back, and every ``retry_interval`` seconds whatever it said.

    A request is retried on an event only if it has not been sent since the
    event (:attr:`last_event`); one that was being scheduled when the event
    came may not have seen it, so until it has settled the retrier keeps
    looking every tick, and retries it once it is back PENDING (no wake-up
    lost while a retry is in flight). ``counts`` totals
    ``retried``, ``events``, ``passes`` and ``stale`` (index entries dropped).
    """

    def __init__(
        self,
        store: PendingStore,
        scheduler: SchedulerClient,
        settings: PendingSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.settings = settings or PendingSettings()
        self._clock = clock
        self.seen = FeedState()
        self.cursor: str | None = None
        #: When the feed last showed a change that could make a request fit.
        self.last_event = float("-inf")
        self._sent: dict[str, float] = {}
        self._next_pass = clock()
        #: A request sent before the last event is still in flight: retry
        #: on every tick until it is settled (see :meth:`_in_flight_at_event`).
        self.owed = False
        self.counts: dict[str, int] = {"retried": 0, "events": 0, "passes": 0, "stale": 0}

    def run(self, stop: threading.Event) -> None:
        """A :meth:`tick` every :data:`FEED_POLL` seconds until ``stop``."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the store or broker is down: next time
                REPEATS.log(LOG, "warning", "pending_retry_failed", error=repr(exc))
            stop.wait(FEED_POLL)

    def tick(self) -> int:
        """One turn: read the feed and retry on an event, or while a retry in
        flight at an event is owed one (:attr:`owed`); and the slow pass over
        every request when it is due (the first at once: what a previous
        conductor left PENDING is picked up); otherwise a look at the requests
        it sent (:meth:`_in_flight_at_event`); then the count of those left
        waiting (``conductor_pending_requests``). How many were sent."""
        sent = 0
        passed = False
        if self.watch() or self.owed:
            sent += self.retry_pending()
            passed = True
        if self._clock() >= self._next_pass:
            self._next_pass = self._clock() + self.settings.retry_interval
            sent += self.retry_pending(periodic=True)
            passed = True
        if not passed and self._sent:
            self.owed = self._in_flight_at_event()  # and each one placed is measured
        metrics.PENDING_REQUESTS.set(self.store.count_pending())
        return sent

    def watch(self) -> bool:
        """Read the feed since the last read; True if a change could make a
        request fit (:func:`could_fit`). The first read starts at the feed's
        end; a cursor the feed no longer holds starts there again, and counts
        as an event (what was missed is not known)."""
        if self.cursor is None:
            self.cursor = self.store.compact_snapshot().cursor
            return False
        woke = False
        try:
            while True:
                page = self.store.changes(self.cursor, FEED_PAGE)
                if not page:
                    break
                self.cursor = page[-1].cursor
                woke = any([could_fit(c, self.seen) for c in page]) or woke
                if len(page) < FEED_PAGE:
                    break
        except StreamTruncated:
            self.cursor = self.store.compact_snapshot().cursor
            woke = True
        if woke:
            self.last_event = self._clock()
            self.counts["events"] += 1
        return woke

    def retry_pending(self, periodic: bool = False) -> int:
        """Retry the first ``retry_batch`` PENDING requests in order (on an
        event, those not sent since it); drop the entries that are stale.
        Return how many were retried."""
        if periodic:
            self.counts["passes"] += 1
        batch = self.settings.retry_batch
        sent = 0
        entries = self.store.list_pending(max(4 * batch, 100))
        found = {r.uuid: r for r in self.store.list_instances(entries)}
        for uuid in entries:
            record = found.get(uuid)
            if stale_entry(record):
                if self.store.remove_pending(uuid):
                    self.counts["stale"] += 1
                continue
            assert record is not None
            if record.state != PENDING:
                continue
            if not periodic and self._sent.get(uuid, float("-inf")) >= self.last_event:
                continue
            if sent >= batch:
                break
            self._sent[uuid] = self._clock()
            if retry(self.store, self.scheduler, record, self.settings.build_timeout, self._clock):
                sent += 1
        self.counts["retried"] += sent
        self.owed = self._in_flight_at_event()
        return sent

    def _in_flight_at_event(self) -> bool:
        """Whether a request sent before the last event is still being
        scheduled (BUILDING): should it come back PENDING, it is owed a retry
        for that event, which it may not have seen. What this retrier sent and
        has since ended (placed, failed, deleted) is forgotten; one placed
        (ACTIVE) has its wait measured, from when it first found no host to
        when it went ACTIVE (``conductor_pending_wait_seconds{outcome="placed"}``)."""
        if not self._sent:
            return False
        found = {r.uuid: r for r in self.store.list_instances(list(self._sent))}
        owed = False
        for uuid, at in list(self._sent.items()):
            record = found.get(uuid)
            if record is None or record.state not in (PENDING, BUILDING):
                del self._sent[uuid]
                if record is not None and record.state == ACTIVE:
                    since = record.waiting_since
                    waited = 0.0 if since is None else max(record.updated_at - since, 0.0)
                    metrics.PENDING_WAIT_SECONDS.labels("placed").observe(waited)
            elif record.state == BUILDING and at < self.last_event:
                owed = True
        return owed


# --- what the reconciler checks ---------------------------------------------------

#: The pending index's entries one pass compares at most (the first, in order).
AUDITED = 100_000


def audit(
    store: ConductorStore,
    records_seen: Mapping[str, InstanceRecord],
    found: Callable[[str, str, str | None, str, float], Finding],
    now: float,
) -> list[Finding]:
    """The findings (made by ``found``, the reconciler's) of :func:`audit_index`
    for the records a reconciler pass read, by uuid."""
    indexed = store.list_pending(AUDITED)
    return [
        found(k, u, None, why, now) for k, u, why in audit_index(records_seen.values(), indexed)
    ]


def audit_index(
    records_seen: Iterable[InstanceRecord], indexed: Iterable[str]
) -> list[tuple[str, str, str]]:
    """The index against the records, as (kind, uuid, reason): a PENDING
    record with no entry, an entry with nothing left to index
    (:func:`~conductor_stub.findings.stale_entry`; one whose record was not
    among ``records_seen``, such as one created since, is judged again on
    the record before it is repaired)."""
    by_uuid = {r.uuid: r for r in records_seen}
    entries = set(indexed)
    unindexed = sorted(u for u, r in by_uuid.items() if r.state == PENDING and u not in entries)
    leftover = sorted(u for u in entries if stale_entry(by_uuid.get(u)))
    return [
        *((PENDING_UNINDEXED, u, "PENDING, not in the pending index") for u in unindexed),
        *((STALE_PENDING, u, "in the pending index, no longer PENDING") for u in leftover),
    ]


def repair_index(store: ConductorStore, finding: Finding) -> Finding:
    """Index a PENDING record, or drop a stale entry; the finding with what
    was done (``skipped``: nothing was left to do)."""
    if finding.kind == PENDING_UNINDEXED:
        record = store.get_instance(finding.uuid)
        store.add_pending(record.uuid, record.priority, record.created_at)
        return replace(finding, outcome="indexed")
    dropped = store.remove_pending(finding.uuid)
    return replace(finding, outcome="unindexed" if dropped else SKIPPED)
