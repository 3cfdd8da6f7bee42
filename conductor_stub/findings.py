"""What the reconciler finds: the kinds of disagreement between the hosts and the store.

Each kind, what it is and what is done about it (:mod:`conductor_stub.reconcile`
finds and repairs them, :mod:`conductor_stub.repairs` writes the record side):

========================  ==========================================  ==============
kind                      what was found                              action
========================  ==========================================  ==============
``stray_vm``              a VM a host runs that no live record keeps  ``reap``: cast
                          there (DELETED, ERROR, SHELVED_OFFLOADED,   ``reap_instance``
                          or placed elsewhere, where it runs:         to the host
                          :func:`scheduler.objects.evacuated_from`)   (Nova's
                                                                      ``running_deleted_
                                                                      instance_action``)
``lost_record``           a VM a host runs whose record the store     ``recreate``: the
                          lost (no record, no delete fence)           record, ACTIVE
                                                                      there, and its
                                                                      allocation healed
``missing_allocation``    a VM with a live record on that host but    ``heal``
                          no allocation there                         (``heal_allocations``)
``orphan_allocation``     an allocation with no record, or whose      ``release``
                          record is elsewhere or final and holds      (``placement audit
                          nothing, and no move involves it            --delete``)
``lost_boot``             a record the boot client saw vanish with    ``none``: counted
                          nothing running it (``conductor-stub boot   (the record is
                          --wait`` wrote it back in ERROR)            ERROR, with a fault)
``lost_vm``               an ACTIVE record whose host's fresh report  ``error``: the
                          does not show its VM, nor any other host's, record ERROR with
                          and no tombstone there explains it          a fault, its claim
                                                                      released
                                                                      (``[conductor]
                                                                      lost_vm_action``;
                                                                      ``log``: none)
``misplaced_vm``          an ACTIVE record whose host's fresh report  ``adopt``: the
                          does not show its VM while one other host   record moved to
                          runs it (a move the store forgot: a revert  where it runs,
                          or a migration gone back in time); or a     ACTIVE there,
                          SHELVED_OFFLOADED one a host runs, since    its claim with it
                          the record last changed (an unshelve the
                          store forgot)
``lost_delete``           a record not DELETED whose instance a host  ``delete``: the
                          destroyed for a delete since the record     delete finished
                          last changed (its tombstone): a delete the  (DELETED, claims
                          store forgot                                released)
``lost_shelve``           an ACTIVE record whose host destroyed its   ``offload``:
                          VM for a shelve since the record last       SHELVED_OFFLOADED,
                          changed, and no host runs it: a shelve the  its claim
                          store forgot                                released
``lost_resize``           a RESIZED record (nothing in flight) whose  ``revert``: the
                          destination's fresh report does not show    conductor's revert
                          its VM (a revert the store forgot, or one   (the source keeps
                          cut short)                                  the VM until a
                                                                      confirm)
``overcommit``            a VM whose allocation (a heal, a re-created ``none``: kept
                          record's, an adoption's) would take its     in view until an
                          host past its capacity                      operator or a
                                                                      move resolves it
``pending_unindexed``     a PENDING record (waiting for capacity)     ``index``: its
                          with no entry in the store's pending index  entry written
                          (a conductor killed between the two         (:mod:`conductor_
                          writes): no event would retry it            stub.pending`)
``stale_pending``         an entry of the pending index whose record  ``unindex``: the
                          is gone or neither PENDING nor BUILDING     entry dropped
``stale_report``          a host that heartbeats but whose last       ``none``: kept
                          report of what it runs is older than        in view (its
                          ``report_max_age``: its compute cannot      compute's
                          report, so the reconciler cannot judge it   /healthz and
                          (a host that stopped heartbeating is down:  logs say why)
                          evacuation's business, not a finding)
========================  ==========================================  ==============

A heal is written only where it fits: a VM that runs where its allocation
would overcommit the host is an ``overcommit`` finding on every pass, counted
and shown, never a silent overcommit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    FINAL_STATES,
    MIGRATING,
    PENDING,
    REBUILDING,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    InstanceRecord,
)
from scheduler.store import Consumer, EndedInstance, InstanceReport, RunningInstance
from scheduler.store.records import ENDED_DELETE, ENDED_OFFLOAD

STRAY_VM = "stray_vm"
LOST_RECORD = "lost_record"
MISSING_ALLOCATION = "missing_allocation"
ORPHAN_ALLOCATION = "orphan_allocation"
LOST_BOOT = "lost_boot"
LOST_VM = "lost_vm"
MISPLACED_VM = "misplaced_vm"
LOST_DELETE = "lost_delete"
LOST_SHELVE = "lost_shelve"
LOST_RESIZE = "lost_resize"
OVERCOMMIT = "overcommit"
STALE_REPORT = "stale_report"
PENDING_UNINDEXED = "pending_unindexed"
STALE_PENDING = "stale_pending"
#: Every kind, in the order the audit prints them.
KINDS = (
    STRAY_VM,
    LOST_RECORD,
    MISSING_ALLOCATION,
    ORPHAN_ALLOCATION,
    LOST_BOOT,
    LOST_VM,
    MISPLACED_VM,
    LOST_DELETE,
    LOST_SHELVE,
    LOST_RESIZE,
    OVERCOMMIT,
    STALE_REPORT,
    PENDING_UNINDEXED,
    STALE_PENDING,
)
#: What is done about each kind.
ACTIONS = {
    STRAY_VM: "reap",
    LOST_RECORD: "recreate",
    MISSING_ALLOCATION: "heal",
    ORPHAN_ALLOCATION: "release",
    LOST_BOOT: "none",
    LOST_VM: "error",  # [conductor] lost_vm_action = log: "none"
    MISPLACED_VM: "adopt",
    LOST_DELETE: "delete",
    LOST_SHELVE: "offload",
    LOST_RESIZE: "revert",
    OVERCOMMIT: "none",
    STALE_REPORT: "none",
    PENDING_UNINDEXED: "index",
    STALE_PENDING: "unindex",
}
#: The kinds that are never acted on: counted and shown while they last.
KEPT_IN_VIEW = frozenset({LOST_BOOT, OVERCOMMIT, STALE_REPORT})

#: ``[conductor] lost_vm_action``'s choices.
LOST_VM_ERROR = "error"
LOST_VM_LOG = "log"
#: The user-facing fault of an instance whose VM was lost (``lost_vm``).
LOST_VM_FAULT = "The instance's VM was lost."
#: The user-facing fault of a record the boot client saw vanish (``lost_boot``).
LOST_FAULT = "The instance was lost."
#: The user-facing fault of a record re-created from a compute's report.
RECOVERED_FAULT = "The instance's record was recovered from its host."
#: The outcome of a finding that no longer held when it was to be acted on.
SKIPPED = "skipped"
#: How the outcome of an action that raised begins.
FAILED = "failed"

#: The states in which an instance's migration may hold an allocation (the
#: source's, parked while the instance moves).
MOVE_STATES = frozenset({RESIZING, RESIZED, REBUILDING, MIGRATING})


@dataclass(frozen=True)
class Finding:
    """One disagreement between the hosts and the store.

    ``uuid`` is the instance's (or, for an allocation, the consumer's);
    ``host`` where it was found (for ``misplaced_vm``, where the VM runs;
    ``placed`` is where the record said); ``due`` whether it has persisted
    past the grace (it is acted on); ``outcome`` what the repair did (None:
    nothing yet).
    """

    kind: str
    uuid: str
    host: str | None
    reason: str
    first_seen: float
    due: bool = False
    outcome: str | None = None
    #: What the repair needs (the report's entry, its time, the record's host).
    running: RunningInstance | None = field(default=None, compare=False, repr=False)
    reported_at: float | None = field(default=None, compare=False, repr=False)
    placed: str | None = field(default=None, compare=False, repr=False)

    @property
    def action(self) -> str:
        return ACTIONS[self.kind]

    @property
    def repaired(self) -> bool:
        """Acted on (not skipped as settled meanwhile, not failed)."""
        return (
            self.outcome is not None
            and self.outcome != SKIPPED
            and not (self.outcome.startswith(FAILED))
        )

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.kind, self.uuid, self.host)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "uuid": self.uuid,
            "host": self.host,
            "reason": self.reason,
            "action": self.action,
            "first_seen": self.first_seen,
            "due": self.due,
            "outcome": self.outcome,
        }

    def line(self) -> str:
        """The finding in one line, for the audit."""
        if self.kind in KEPT_IN_VIEW:
            state = self.outcome or "kept in view"
        else:
            state = self.outcome or ("due" if self.due else "in grace")
        return (
            f"{self.kind:<18} {self.uuid or '-'}  host={self.host or '-'}  action={self.action} "
            f"({state})  {self.reason}"
        )


def format_counts(findings: Sequence[Finding]) -> str:
    """The counts per kind, in one line (the audit's last)."""
    counts = Counter(f.kind for f in findings)
    return "findings: " + " ".join(f"{kind}={counts.get(kind, 0)}" for kind in KINDS)


def stale_reports(
    stale: Mapping[str, float], beats: Mapping[str, float], now: float, max_age: float
) -> Iterator[tuple[str, str]]:
    """(host, why) for each host of ``stale`` (host -> when it last reported)
    that still heartbeats (``beats``: host -> its last heartbeat): alive, but
    its compute's reports do not get through, so its VMs are not judged. One
    that stopped heartbeating too is down: evacuation's business, not this."""
    for host, reported_at in sorted(stale.items()):
        if now - beats.get(host, float("-inf")) <= max_age:
            yield (
                host,
                f"it heartbeats but last reported {now - reported_at:.0f} s ago "
                f"(report_max_age {max_age:g} s): its VMs are not judged",
            )


def moves_in_flight(records: Iterable[InstanceRecord]) -> dict[str, InstanceRecord]:
    """The records that name a migration, by migration uuid, while they are not
    settled: a move under way, and also a record being deleted (an evacuated
    instance deleted while its source is down keeps its migration's
    allocation until the delete finishes; a record in flight is never a
    finding)."""
    return {
        r.migration_uuid: r for r in records if r.migration_uuid and r.state not in FINAL_STATES
    }


def orphaned(
    consumer: Consumer,
    hosts: set[str],
    record: InstanceRecord | None,
    migrations: Mapping[str, InstanceRecord],
) -> str | None:
    """Why an allocation is no one's (None: it is someone's)."""
    if consumer.uuid in migrations:
        return None  # a move in flight holds it
    if record is None:
        return "no record holds it (nor a move)"
    if record.state == DELETED:
        return "its instance is DELETED"
    if record.state == PENDING:
        return "its instance is PENDING (it holds nothing while it waits)"
    if record.state not in FINAL_STATES:
        return None  # a build, move, delete or shelve in flight
    if record.state != ACTIVE:
        return f"its instance is {record.state}"
    if record.host not in hosts:
        return f"its record places it on {record.host}"
    return None


@dataclass(frozen=True)
class Seen:
    """What the fresh reports say: each host's report, the reports that show
    each instance running, and the tombstones of each instance."""

    latest: Mapping[str, InstanceReport]
    runs_on: Mapping[str, Sequence[InstanceReport]]
    ended: Mapping[str, Sequence[tuple[InstanceReport, EndedInstance]]]

    @classmethod
    def of(cls, reports: Iterable[InstanceReport]) -> Seen:
        latest: dict[str, InstanceReport] = {}
        runs_on: dict[str, list[InstanceReport]] = {}
        ended: dict[str, list[tuple[InstanceReport, EndedInstance]]] = {}
        for report in reports:
            latest[report.host] = report
            for vm in report.instances:
                runs_on.setdefault(vm.uuid, []).append(report)
            for tomb in report.ended:
                ended.setdefault(tomb.uuid, []).append((report, tomb))
        return cls(latest, runs_on, ended)

    def started(self, uuid: str, host: str) -> float | None:
        """When ``host``'s report says the instance's VM started (None: unknown)."""
        report = self.latest.get(host)
        for vm in report.instances if report else ():
            if vm.uuid == uuid:
                return vm.started_at
        return None

    def tombstone(
        self, record: InstanceRecord, what: str, host: str | None = None
    ) -> tuple[InstanceReport, EndedInstance] | None:
        """A tombstone of ``what`` for the instance written after its record last
        changed (on ``host`` only, if given): the record is behind it."""
        for report, tomb in self.ended.get(record.uuid, ()):
            if tomb.what == what and tomb.at > record.updated_at and host in (None, report.host):
                return report, tomb
        return None


@dataclass(frozen=True)
class Placement:
    """A settled record the reports disagree with (:func:`misplacements`)."""

    kind: str
    uuid: str
    host: str  # where the finding is: the record's host, or where the VM runs
    reason: str
    reported_at: float
    placed: str | None = None  # the record's host, for an adoption


def misplacements(seen: Seen, records: Iterable[InstanceRecord]) -> Iterator[Placement]:
    """The settled records that the fresh reports contradict: a delete or a
    shelve the store forgot (a tombstone newer than the record), an ACTIVE
    instance running elsewhere than its record says, or nowhere. A record
    changed since the report that would judge it is not judged, nor one
    whose host has no fresh report (down: evacuation's business)."""
    for record in records:
        settled = record.state in FINAL_STATES or (
            record.state == RESIZED and record.task_state is None
        )
        if not settled or record.state == DELETED:
            continue  # in flight (its own deadline settles it), or gone
        deleted = seen.tombstone(record, ENDED_DELETE)
        if deleted is not None:
            report, tomb = deleted
            yield Placement(
                LOST_DELETE,
                record.uuid,
                report.host,
                f"{report.host} destroyed it for a delete at {tomb.at:.3f}, after its "
                f"record last changed ({record.state})",
                report.reported_at,
            )
            continue
        if record.state == SHELVED_OFFLOADED:
            placement = _unshelved(seen, record)
        elif record.state == ACTIVE:
            placement = _active(seen, record)
        elif record.state == RESIZED:
            placement = _resized(seen, record)
        else:
            continue
        if placement is not None:
            yield placement


def _resized(seen: Seen, record: InstanceRecord) -> Placement | None:
    """A RESIZED record whose destination's report, made since the record last
    changed, does not show its VM: whatever ran it there was undone (a revert
    cut short, or one the store forgot); the source still has it."""
    report = seen.latest.get(record.host or "")
    if report is None or record.updated_at >= report.reported_at:
        return None
    if any(r.host == record.host for r in seen.runs_on.get(record.uuid, ())):
        return None
    return Placement(
        LOST_RESIZE,
        record.uuid,
        report.host,
        f"RESIZED on {record.host}, whose report does not show it (its source "
        f"{record.source_host} keeps it)",
        report.reported_at,
    )


def _unshelved(seen: Seen, record: InstanceRecord) -> Placement | None:
    """A SHELVED_OFFLOADED record whose VM a host started after the record last
    changed: an unshelve the store forgot (a shelved instance is built only
    by an unshelve's guarded build). A VM that started before (a shelve given
    up on a host that never answered) is a stray."""
    running = sorted(
        r.host
        for r in seen.runs_on.get(record.uuid, ())
        if (started := seen.started(record.uuid, r.host)) is not None
        and started > record.updated_at
    )
    if not running:
        return None  # started before the record was shelved: a stray (reaped)
    report = seen.latest[running[0]]
    return Placement(
        MISPLACED_VM,
        record.uuid,
        running[0],
        f"its record is {SHELVED_OFFLOADED} (on no host), and it runs on {running[0]}: "
        "an unshelve the store forgot",
        report.reported_at,
        placed=None,
    )


def _active(seen: Seen, record: InstanceRecord) -> Placement | None:
    """What the reports say of an ACTIVE record, when its host's report does
    not show it (None: it runs there, or it cannot be judged)."""
    report = seen.latest.get(record.host or "")
    if report is None or record.updated_at >= report.reported_at:
        return None
    running = [r for r in seen.runs_on.get(record.uuid, ()) if r.reported_at > record.updated_at]
    if any(r.host == record.host for r in running):
        return None
    elsewhere = sorted(r.host for r in running)
    if elsewhere:
        return Placement(
            MISPLACED_VM,
            record.uuid,
            elsewhere[0],
            f"its record places it on {record.host}, whose report does not show it; "
            f"it runs on {elsewhere[0]}",
            report.reported_at,
            placed=record.host,
        )
    if seen.tombstone(record, ENDED_OFFLOAD, record.host) is not None:
        return Placement(
            LOST_SHELVE,
            record.uuid,
            report.host,
            f"{report.host} destroyed it for a shelve after its record last changed",
            report.reported_at,
        )
    return Placement(
        LOST_VM,
        record.uuid,
        report.host,
        f"its record places it on {record.host}, whose report does not show it",
        report.reported_at,
    )


#: The kinds :func:`misplacements` finds: a settled record the reports contradict.
#: The findings about the pending index (:mod:`conductor_stub.pending`).
INDEX_FINDINGS = frozenset({PENDING_UNINDEXED, STALE_PENDING})
RECORD_JUDGED = frozenset({LOST_VM, LOST_SHELVE, MISPLACED_VM, LOST_DELETE, LOST_RESIZE})


def stale_entry(record: InstanceRecord | None) -> bool:
    """Whether a pending index entry for ``record`` has nothing left to index:
    the record is gone or neither PENDING nor BUILDING (a BUILDING one, being
    retried, may come back PENDING at the same place: its entry is left)."""
    return record is None or record.state not in (PENDING, BUILDING)


def still_contradicted(finding: Finding, record: InstanceRecord | None) -> bool:
    """Whether a :data:`RECORD_JUDGED` finding still holds of the record as it
    is now: not changed since the report that judged it, and as it was; or an
    :data:`INDEX_FINDINGS` one: the record still PENDING with no entry, or
    the entry still stale."""
    if finding.kind == PENDING_UNINDEXED:
        return record is not None and record.state == PENDING
    if finding.kind == STALE_PENDING:
        return stale_entry(record)
    assert finding.reported_at is not None
    if record is None or record.updated_at >= finding.reported_at:
        return False
    if finding.kind == LOST_DELETE:
        return record.state not in (DELETED, DELETING)
    if finding.kind == LOST_RESIZE:
        resized = record.state == RESIZED and record.task_state is None
        return resized and record.host == finding.host
    if finding.kind == MISPLACED_VM and finding.placed is None:
        return record.state == SHELVED_OFFLOADED
    placed = finding.placed if finding.kind == MISPLACED_VM else finding.host
    return record.state == ACTIVE and record.host == placed


def adopted_elsewhere(placements: Iterable[Placement]) -> set[tuple[str, str]]:
    """The (instance, host) pairs an adoption takes: their VMs are not strays."""
    return {(p.uuid, p.host) for p in placements if p.kind == MISPLACED_VM}
