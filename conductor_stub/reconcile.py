"""The reconciler: what the hosts really run against what the store holds.

The store is the scheduler's truth about claims; the computes are the truth
about what runs. Each compute reports, every ``[compute] report_interval``,
the VMs each of its hosts runs (:class:`~scheduler.store.InstanceReport`).
:class:`Reconciler` compares those reports, the instance records and the
allocations, and repairs what disagrees, as Nova's periodic tasks and audits
do:

========================  ==========================================  ==============
kind                      what was found                              action
========================  ==========================================  ==============
``stray_vm``              a VM a host runs that no live record keeps  ``reap``: cast
                          there (DELETED, ERROR, SHELVED_OFFLOADED,   ``reap_instance``
                          or placed elsewhere:                        to the host
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
                          does not show its VM, nor any other host's  record ERROR with
                          (a VM lost by its host, or a delete or      a fault, its claim
                          shelve the store forgot)                    released
                                                                      (``[conductor]
                                                                      lost_vm_action``;
                                                                      ``log``: none)
========================  ==========================================  ==============

Every action is logged at warning (``reconcile_action``: kind, action,
instance_uuid, host, reason, outcome) and counted, per kind, in
:attr:`Reconciler.counts` and on the conductor's ``/metrics``
(``conductor_reconcile_actions_total``, with ``[conductor] health_port``).

A healed allocation is written without the capacity check (the VM runs,
whether it fits or not); when it takes a host past its capacity the finding,
the log line (``reconcile_overcommit``) and the counts say so.

What keeps it from racing the conductor's own work:

* only a fresh report counts (younger than ``[conductor] report_max_age``): a
  host whose compute stopped reporting is down, and evacuation's business;
* a report is compared with a record only when the record has not changed
  since the report was made (``updated_at < reported_at``), and a record in a
  non-final state (a build, move, delete or shelve in flight) is never a
  finding: its own deadline and re-drive settle it;
* a finding must be seen on every pass for ``[conductor] orphan_grace``
  seconds before it is acted on (Nova's ``running_deleted_instance_timeout``),
  and it is checked once more against the store just before the action. The
  first sightings are kept in the reconciler's memory: a restarted conductor
  starts every grace again, which only delays a repair;
* consumers are read before records: a record is created before anything
  claims for it, so a consumer seen has its record in the scan that follows.

The store cannot tell a lost record from one never written (a raw
``run_instance`` for an unknown uuid): both are VMs that run with a claim and
no record, and both are re-created, which keeps a user's VM rather than
destroying it; the fault says where the record came from. One fenced
(``deleted:<uuid>``: being deleted or DELETED within its retention) is reaped.

It lives in the conductor because the conductor owns the instance records
(it writes every transition; the reconciler only writes a record back, an
allocation, or a release, each guarded like the conductor's own). Several
conductors may each run one: every action is idempotent (a reap of a VM
already gone is a no-op, a record is re-created with a set-if-absent, a heal
is refused once the consumer holds anything, a release of nothing is
nothing), and each is re-checked against the store just before it is taken,
so two reconcilers repeat work but do not undo each other's; no lease is
needed for that.

What a pass reads: every report, every consumer and every live record, each
a page at a time (HSCAN, 500 a page: no command holds the store), plus the
DELETED records of the uuids seen without a live one. That is work in
proportion to the cloud once per ``reconcile_interval``, not per sweep: keep
the interval in minutes on a large cell.

``scheduler-admin audit [--fix]`` runs the same comparison once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from conductor_stub.metrics import ACTIONS_TAKEN
from scheduler.exceptions import ConsumerConflict, ConsumerDeleted, ProviderNotFound
from scheduler.log import bind_request, get_logger
from scheduler.objects import (
    ACTIVE,
    DELETED,
    ERROR,
    FINAL_STATES,
    MIGRATING,
    REBUILDING,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    AllocationRequest,
    Flavor,
    InstanceRecord,
    RequestSpec,
    evacuated_from,
)
from scheduler.rpc import RequestContext
from scheduler.store import Consumer, GroupClaim, InstanceReport, RunningInstance
from scheduler.store.base import InstanceStore, PlacementStore, ServiceStore

LOG = get_logger(__name__)

STRAY_VM = "stray_vm"
LOST_RECORD = "lost_record"
MISSING_ALLOCATION = "missing_allocation"
ORPHAN_ALLOCATION = "orphan_allocation"
LOST_BOOT = "lost_boot"
LOST_VM = "lost_vm"
#: Every kind, in the order the audit prints them.
KINDS = (STRAY_VM, LOST_RECORD, MISSING_ALLOCATION, ORPHAN_ALLOCATION, LOST_BOOT, LOST_VM)
#: What is done about each kind.
ACTIONS = {
    STRAY_VM: "reap",
    LOST_RECORD: "recreate",
    MISSING_ALLOCATION: "heal",
    ORPHAN_ALLOCATION: "release",
    LOST_BOOT: "none",
    LOST_VM: "error",  # [conductor] lost_vm_action = log: "none"
}
#: ``[conductor] lost_vm_action``'s choices.
LOST_VM_ERROR = "error"
LOST_VM_LOG = "log"
#: The user-facing fault of an instance whose VM was lost (``lost_vm``).
LOST_VM_FAULT = "The instance's VM was lost."
#: The outcome of a finding that no longer held when it was to be acted on.
SKIPPED = "skipped"
#: How the outcome of an action that raised begins.
FAILED = "failed"
#: The count of healed allocations that took a host past its capacity.
OVERCOMMIT = "overcommit"


#: The user-facing fault of a record the boot client saw vanish (``lost_boot``).
LOST_FAULT = "The instance was lost."
#: The user-facing fault of a record re-created from a compute's report.
RECOVERED_FAULT = "The instance's record was recovered from its host."

#: The states in which an instance's migration may hold an allocation (the
#: source's, parked while the instance moves).
MOVE_STATES = frozenset({RESIZING, RESIZED, REBUILDING, MIGRATING})


def moves_in_flight(records: Iterable[InstanceRecord]) -> dict[str, InstanceRecord]:
    """The records that name a migration, by migration uuid, while they are not
    settled: a move under way, and also a record being deleted (an evacuated
    instance deleted while its source is down keeps its migration's
    allocation until the delete finishes; a record in flight is never a
    finding)."""
    return {
        r.migration_uuid: r for r in records if r.migration_uuid and r.state not in FINAL_STATES
    }


#: How many uuids one read of records names.
LOOKUP_BATCH = 500


class ReconcilerStore(PlacementStore, InstanceStore, ServiceStore, Protocol):
    """What the reconciler reads and repairs: reports, records, allocations."""


class Reaper(Protocol):
    """The one compute call the reconciler makes (``ComputeClient`` has it)."""

    def reap_instance(self, ctxt: Any, host: str, instance_uuid: str, reason: str) -> None: ...


@dataclass(frozen=True)
class ReconcileSettings:
    """``interval``: seconds between passes; ``orphan_grace``: seconds a finding
    must persist before it is acted on; ``report_max_age``: a report older
    than this is stale (its host is down) and not compared; ``batch``: what
    one paginated read fetches; ``lost_vm_action``: what a lost VM leads to
    (``error``: the instance ERROR, its claim released; ``log``: nothing)."""

    interval: float = 60.0
    orphan_grace: float = 120.0
    report_max_age: float = 60.0
    batch: int = 500
    lost_vm_action: str = LOST_VM_ERROR

    @property
    def lost_after(self) -> float:
        """Seconds a boot client waits for a vanished record to be re-created
        (a VM runs it: one report, a pass to see it, the grace, a pass to act)
        before it calls the record lost."""
        return self.report_max_age + self.orphan_grace + 2 * self.interval


@dataclass(frozen=True)
class Finding:
    """One disagreement between the hosts and the store.

    ``uuid`` is the instance's (or, for an allocation, the consumer's);
    ``host`` where it was found; ``due`` whether it has persisted past the
    grace (it is acted on); ``outcome`` what the repair did (None: nothing
    yet); ``overcommit`` a healed allocation took the host past its capacity.
    """

    kind: str
    uuid: str
    host: str | None
    reason: str
    first_seen: float
    due: bool = False
    outcome: str | None = None
    overcommit: bool = False
    #: What the repair needs (the report's entry, its time, the record's time).
    running: RunningInstance | None = field(default=None, compare=False, repr=False)
    reported_at: float | None = field(default=None, compare=False, repr=False)

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
            "overcommit": self.overcommit,
        }

    def line(self) -> str:
        """The finding in one line, for the audit."""
        state = self.outcome or ("due" if self.due else "in grace")
        return (
            f"{self.kind:<18} {self.uuid}  host={self.host or '-'}  action={self.action} "
            f"({state})  {self.reason}"
        )


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def recovered_spec(running: RunningInstance) -> dict[str, Any] | None:
    """The request spec of a record re-created from a report, as far as the
    report allows: a flavor of exactly its standard amounts, its project and
    user. None when the amounts make no flavor (nothing known of it)."""
    res = running.resources
    if set(res) - {"VCPU", "MEMORY_MB", "DISK_GB"} or not res.get("VCPU"):
        return None
    if not res.get("MEMORY_MB"):
        return None
    flavor = Flavor(
        name="recovered",
        vcpus=int(res["VCPU"]),
        memory_mb=int(res["MEMORY_MB"]),
        root_gb=int(res.get("DISK_GB", 0)),
    )
    spec = RequestSpec(
        flavor=flavor,
        project_id=running.project_id or "unknown",
        user_id=running.user_id or "unknown",
    )
    return spec.to_primitive() if spec.resources == dict(res) else None


class Reconciler:
    """Compares reports, records and allocations (:meth:`audit`) and repairs
    the findings past their grace (:meth:`repair`); :meth:`run` does both every
    ``interval`` seconds. ``counts`` is the actions taken per kind (and
    ``overcommit``) since start."""

    def __init__(
        self,
        store: ReconcilerStore,
        compute: Reaper | None,
        settings: ReconcileSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.compute = compute
        self.settings = settings or ReconcileSettings()
        self._clock = clock
        self._first_seen: dict[tuple[str, str, str | None], float] = {}
        self._host_of: dict[str, str] = {}  # provider uuid -> host (its root's name)
        self._root_of: dict[str, str] = {}  # host -> its root provider's uuid
        self._moving: dict[str, InstanceRecord] | None = None
        self.counts: Counter[str] = Counter()

    # --- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """A pass every ``interval`` seconds until ``stop`` is set."""
        while not stop.wait(self.settings.interval):
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - the store or broker is down: next pass
                LOG.warning("reconcile_failed", error=repr(exc))

    def run_once(self) -> list[Finding]:
        findings = self.repair(self.audit())
        acted = Counter(f.kind for f in findings if f.repaired)
        if findings:
            LOG.info(
                "reconcile_pass",
                found=dict(Counter(f.kind for f in findings)),
                acted=dict(acted),
                total=dict(self.counts),
            )
        return findings

    # --- the comparison -------------------------------------------------------------

    def audit(self) -> list[Finding]:
        """One comparison; every finding, ``due`` once past its grace."""
        now = self._clock()
        batch = self.settings.batch
        reports = [
            r
            for r in self.store.instance_reports(batch)
            if now - r.reported_at <= self.settings.report_max_age
        ]
        # Consumers before records: a record is written before anything claims
        # for it, so a consumer read here has its record in the scan below.
        consumers = {c.uuid: c for c in self.store.scan_consumers(batch)}
        records = {r.uuid: r for r in self.store.scan_instances(batch)}
        reported = {vm.uuid for report in reports for vm in report.instances}
        records.update(self._lookup(sorted((reported | set(consumers)) - set(records))))
        findings = [
            *self._compare_reports(reports, records, consumers),
            *(
                self._found(LOST_VM, uuid, host, reason, now, reported_at=at)
                for uuid, host, reason, at in lost_vms(reports, records.values(), reported)
            ),
            *self._compare_allocations(consumers, records, reports),
            *(
                self._found(LOST_BOOT, r.uuid, None, "its record vanished; nothing ran it", now)
                for r in records.values()
                if r.state == ERROR and r.fault == LOST_FAULT
            ),
        ]
        seen = {f.key for f in findings}
        for key in [k for k in self._first_seen if k not in seen]:
            del self._first_seen[key]  # gone: its grace starts again if it comes back
        return findings

    def _lookup(self, uuids: Sequence[str]) -> dict[str, InstanceRecord]:
        """Records of ``uuids`` the scan did not give (DELETED ones within
        their retention), a batch at a time."""
        found: dict[str, InstanceRecord] = {}
        for chunk in _chunks(uuids, LOOKUP_BATCH):
            found.update((r.uuid, r) for r in self.store.list_instances(chunk))
        return found

    def _found(
        self,
        kind: str,
        uuid: str,
        host: str | None,
        reason: str,
        now: float,
        **extra: Any,
    ) -> Finding:
        first = self._first_seen.setdefault((kind, uuid, host), now)
        due = kind != LOST_BOOT and now - first >= self.settings.orphan_grace
        return Finding(kind, uuid, host, reason, first, due, **extra)

    def _compare_reports(
        self,
        reports: Iterable[InstanceReport],
        records: Mapping[str, InstanceRecord],
        consumers: Mapping[str, Consumer],
    ) -> Iterator[Finding]:
        now = self._clock()
        for report in reports:
            for vm in report.instances:
                record = records.get(vm.uuid)
                found = self._compare_vm(report, vm, record, consumers.get(vm.uuid))
                if found is not None:
                    kind, reason = found
                    yield self._found(
                        kind,
                        vm.uuid,
                        report.host,
                        reason,
                        now,
                        running=vm,
                        reported_at=report.reported_at,
                    )

    def _compare_vm(
        self,
        report: InstanceReport,
        vm: RunningInstance,
        record: InstanceRecord | None,
        consumer: Consumer | None,
    ) -> tuple[str, str] | None:
        """What one VM of a report is found to be (kind, reason), or None."""
        host = report.host
        if record is None:
            if not vm.resources:  # nothing to account it with
                return STRAY_VM, "runs with no record, and its host reports no amounts"
            return LOST_RECORD, "runs with no record in the store"
        if record.updated_at >= report.reported_at:
            return None  # changed since the report: the next one will tell
        if record.state == DELETED:
            return STRAY_VM, "its instance is DELETED"
        if record.state not in FINAL_STATES:
            return None  # a build, move, delete or shelve in flight: not ours
        if record.state in (ERROR, SHELVED_OFFLOADED):
            return STRAY_VM, f"its instance is {record.state}"
        if evacuated_from(record, host):
            return STRAY_VM, f"its record places it on {record.host}"
        if consumer is None or host not in self._hosts(consumer):
            return MISSING_ALLOCATION, "ACTIVE here with no allocation here"
        return None

    def _compare_allocations(
        self,
        consumers: Mapping[str, Consumer],
        records: Mapping[str, InstanceRecord],
        reports: Iterable[InstanceReport],
    ) -> Iterator[Finding]:
        now = self._clock()
        migrations = moves_in_flight(records.values())
        running = {(vm.uuid, report.host) for report in reports for vm in report.instances}
        for consumer in consumers.values():
            hosts = self._hosts(consumer)
            if any((consumer.uuid, h) in running for h in hosts):
                continue  # a VM runs on it: the report's finding (if any) says what to do
            reason = self._orphaned(consumer, hosts, records.get(consumer.uuid), migrations)
            if reason is not None:
                yield self._found(
                    ORPHAN_ALLOCATION, consumer.uuid, ",".join(sorted(hosts)) or None, reason, now
                )

    @staticmethod
    def _orphaned(
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
        if record.state not in FINAL_STATES:
            return None  # a build, move, delete or shelve in flight
        if record.state != ACTIVE:
            return f"its instance is {record.state}"
        if record.host not in hosts:
            return f"its record places it on {record.host}"
        return None

    def _hosts(self, consumer: Consumer) -> set[str]:
        """The hosts (provider tree roots) a consumer's allocation is on."""
        out = set()
        for rp in consumer.allocations:
            host = self._host_of.get(rp)
            if host is None:
                try:
                    provider = self.store.get_provider(rp)
                    root = (
                        self.store.get_provider(provider.root_uuid)
                        if provider.root_uuid
                        else provider
                    )
                except ProviderNotFound:
                    continue
                host = self._host_of[rp] = root.name
            out.add(host)
        return out

    def _root(self, host: str) -> str:
        """The uuid of the root provider named after ``host`` (cached: a
        provider is never renamed)."""
        uuid = self._root_of.get(host)
        if uuid is None:
            uuid = self._root_of[host] = self.store.get_provider_by_name(host).uuid
        return uuid

    # --- the repairs ----------------------------------------------------------------

    def repair(self, findings: Iterable[Finding]) -> list[Finding]:
        """Act on every finding past its grace; each comes back with its outcome."""
        self._moving = None
        out = []
        for finding in findings:
            if finding.due:
                with bind_request(instance_uuid=finding.uuid, host=finding.host):
                    try:
                        finding = self._repair(finding)
                    except Exception as exc:  # noqa: BLE001 - one must not stop the rest
                        LOG.warning("reconcile_action_failed", kind=finding.kind, error=repr(exc))
                        finding = replace(finding, outcome=f"{FAILED}: {exc!r}")
            out.append(finding)
        return out

    def _repair(self, finding: Finding) -> Finding:
        # The store is read once more: what the pass saw may have settled since.
        still = self._still(finding)
        if still is None:
            return replace(finding, outcome=SKIPPED)
        finding = still
        if finding.kind == STRAY_VM:
            finding = self._reap(finding)
        elif finding.kind == LOST_RECORD:
            finding = self._recreate(finding)
        elif finding.kind == MISSING_ALLOCATION:
            finding = self._heal(finding)
        elif finding.kind == ORPHAN_ALLOCATION:
            released = self.store.release(finding.uuid)
            finding = replace(finding, outcome="released" if released else SKIPPED)
        elif finding.kind == LOST_VM:
            finding = lost_vm_acted(self.store, finding, self.settings.lost_vm_action, self._clock)
        if finding.outcome == SKIPPED:
            return finding
        self.counts[finding.kind] += 1
        ACTIONS_TAKEN.labels(finding.kind).inc()
        if finding.overcommit:
            self.counts[OVERCOMMIT] += 1
            ACTIONS_TAKEN.labels(OVERCOMMIT).inc()
        self._first_seen.pop(finding.key, None)
        LOG.warning(
            "reconcile_action",
            kind=finding.kind,
            action=finding.action,
            instance_uuid=finding.uuid,
            host=finding.host,
            reason=finding.reason,
            outcome=finding.outcome,
            overcommit=finding.overcommit,
        )
        return finding

    def _still(self, finding: Finding) -> Finding | None:
        """The finding as the store is now (None: it no longer holds)."""
        listed = self.store.list_instances([finding.uuid])
        record = listed[0] if listed else None
        if finding.kind == LOST_VM:
            lost = record is not None and record.state == ACTIVE and record.host == finding.host
            return finding if lost else None
        consumer = self.store.get_consumer(finding.uuid)
        if finding.kind == ORPHAN_ALLOCATION:
            if consumer is None:
                return None
            migrations = self._migrations() if record is None else {}
            hosts = self._hosts(consumer)
            reason = self._orphaned(consumer, hosts, record, migrations)
            return None if reason is None else replace(finding, reason=reason)
        assert finding.running is not None and finding.host is not None
        assert finding.reported_at is not None
        report = InstanceReport(finding.host, finding.reported_at, (finding.running,))
        found = self._compare_vm(report, finding.running, record, consumer)
        if found is None or found[0] != finding.kind:
            return None
        return replace(finding, reason=found[1])

    def _migrations(self) -> Mapping[str, InstanceRecord]:
        """The records of the moves in flight by migration uuid, read once per
        repair (a consumer with no record of its own may be a migration's)."""
        if self._moving is None:
            self._moving = moves_in_flight(self.store.scan_instances(self.settings.batch))
        return self._moving

    def _reap(self, finding: Finding) -> Finding:
        assert self.compute is not None and finding.host is not None
        self.compute.reap_instance(
            RequestContext.admin(), finding.host, finding.uuid, finding.reason
        )
        return replace(finding, outcome="reap cast")

    def _recreate(self, finding: Finding) -> Finding:
        """The record back from the report (ACTIVE there), its allocation healed
        first: a fenced uuid (being deleted) is refused there and reaped instead."""
        assert finding.running is not None and finding.host is not None
        vm, host = finding.running, finding.host
        spec = recovered_spec(vm)
        try:
            overcommit = self._heal_for(vm.uuid, host, dict(vm.resources), vm, spec)
        except ConsumerDeleted:
            return self._reap(replace(finding, kind=STRAY_VM, reason="its instance is deleted"))
        now = self._clock()
        self.store.create_instances(
            [
                InstanceRecord(
                    uuid=vm.uuid,
                    state=ACTIVE,
                    task_state=None,
                    host=host,
                    node=host,
                    attempts=1,
                    fault=RECOVERED_FAULT,
                    fault_details=(
                        f"re-created by the reconciler from {host}'s report of "
                        f"{finding.reported_at:.3f} (the store had no record of a VM "
                        "that runs there)"
                    ),
                    request_spec=spec,
                    created_at=now,
                    updated_at=now,
                    request_id=vm.request_id,
                )
            ]
        )
        return replace(
            finding, outcome="recreated" + self._over(overcommit), overcommit=bool(overcommit)
        )

    def _heal(self, finding: Finding) -> Finding:
        assert finding.running is not None and finding.host is not None
        [record] = self.store.list_instances([finding.uuid])
        spec = (
            RequestSpec.from_primitive(dict(record.request_spec)) if record.request_spec else None
        )
        resources = spec.resources if spec is not None else dict(finding.running.resources)
        overcommit = self._heal_for(
            finding.uuid,
            finding.host,
            resources,
            finding.running,
            record.request_spec,
        )
        if overcommit is None:
            return replace(finding, outcome=SKIPPED)
        return replace(finding, outcome="healed" + self._over(overcommit), overcommit=overcommit)

    def _heal_for(
        self,
        uuid: str,
        host: str,
        resources: dict[str, int],
        vm: RunningInstance,
        spec: Mapping[str, Any] | None,
    ) -> bool | None:
        """Write ``resources`` for ``uuid`` on ``host``'s root provider; whether
        that overcommits it (None: the consumer holds something already)."""
        parsed = RequestSpec.from_primitive(dict(spec)) if spec else None
        request = AllocationRequest(
            allocations={self._root(host): resources},
            project_id=(parsed.project_id if parsed else vm.project_id) or "unknown",
            user_id=(parsed.user_id if parsed else vm.user_id) or "unknown",
        )
        group = GroupClaim.for_spec(parsed, host) if parsed else None
        try:
            return self.store.heal_allocation(uuid, request, group)
        except ConsumerConflict:
            return None

    @staticmethod
    def _over(overcommit: bool | None) -> str:
        return " (overcommits the host)" if overcommit else ""


def lost_vms(
    reports: Sequence[InstanceReport], records: Iterable[InstanceRecord], reported: set[str]
) -> Iterator[tuple[str, str, str, float]]:
    """The lost VMs (instance, host, why, the report's time): ACTIVE instances
    whose host's fresh report (``reports``) does not show them, and that no
    other host runs either (``reported``: that is a move the record forgot,
    not a loss). A record changed since the report is not judged, nor a host
    with no fresh report (down: evacuation's business)."""
    latest = {r.host: r for r in reports}
    for record in records:
        report = latest.get(record.host or "")
        if (
            record.state != ACTIVE
            or report is None
            or record.uuid in reported
            or record.updated_at >= report.reported_at
        ):
            continue
        why = f"its record places it on {record.host}, whose report does not show it"
        yield record.uuid, report.host, why, report.reported_at


def lost_vm_acted(
    store: ReconcilerStore, finding: Finding, action: str, clock: Callable[[], float]
) -> Finding:
    """A lost VM, as ``action`` (``[conductor] lost_vm_action``) says: the record
    ERROR (if it is still ACTIVE on that host: a compare-and-set) with a fault
    naming what was lost, then its allocation released; or only logged."""
    if action == LOST_VM_LOG:
        return replace(finding, outcome="logged (lost_vm_action = log)")
    reported = f"{finding.reported_at:.3f}" if finding.reported_at else "?"
    done = store.update_instance(
        finding.uuid,
        expected_states=[ACTIVE],
        expect={"host": finding.host},
        state=ERROR,
        task_state=None,
        fault=LOST_VM_FAULT,
        fault_details=(
            f"lost by the reconciler: {finding.host}'s report of {reported} does not "
            "show the VM its record placed there, and no other host runs it"
        ),
        updated_at=clock(),
        deadline=None,
    )
    if done is None:
        return replace(finding, outcome=SKIPPED)
    released = store.release(finding.uuid)
    return replace(finding, outcome="ERROR" + (", released" if released else ""))


def format_counts(findings: Sequence[Finding]) -> str:
    """The counts per kind, in one line (the audit's last)."""
    counts = Counter(f.kind for f in findings)
    over = sum(1 for f in findings if f.overcommit)
    parts = [f"{kind}={counts.get(kind, 0)}" for kind in KINDS]
    if over:
        parts.append(f"{OVERCOMMIT}={over}")
    return "findings: " + " ".join(parts)
