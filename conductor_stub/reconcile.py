"""The reconciler: what the hosts really run against what the store holds.

The store is the scheduler's truth about claims; the computes are the truth
about what runs. Each compute reports, every ``[compute] report_interval``,
the VMs each of its hosts runs (:class:`~scheduler.store.InstanceReport`).
:class:`Reconciler` compares those reports, the instance records and the
allocations, and repairs what disagrees, as Nova's periodic tasks and audits
do:

What it finds, and what it does about each kind, is
:mod:`conductor_stub.findings`' table.

Every action is logged at warning (``reconcile_action``: kind, action,
instance_uuid, host, reason, outcome), notified (``scheduler.reconcile.action``,
:class:`~scheduler.notifications.ReconcileActionPayload`, when the conductor
has notifications on) and counted, per kind, in :attr:`Reconciler.counts`
and on the conductor's ``/metrics`` (``conductor_reconcile_actions_total``;
``conductor_reconcile_findings`` for what the last pass found, with
``[conductor] health_port``).

A healed allocation is written only where it fits: where it would take a
host past its capacity it is refused, and the VM is an ``overcommit`` finding
on every pass (``conductor_reconcile_findings{kind="overcommit"}``, the
audit, the dashboard) until an operator or a move resolves it.

What keeps it from racing the conductor's own work:

* only a fresh report counts (younger than ``[conductor] report_max_age``): a
  host whose compute stopped reporting is down, and evacuation's business;
  a host that still heartbeats with a stale report is a ``stale_report``
  finding (its compute cannot report: the reconciler is blind there, and
  says so rather than going quiet);
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
from dataclasses import dataclass, replace
from typing import Any, Protocol

from conductor_stub import pending, repairs
from conductor_stub.findings import (
    FAILED,
    INDEX_FINDINGS,
    KEPT_IN_VIEW,
    KINDS,
    LOST_BOOT,
    LOST_DELETE,
    LOST_FAULT,
    LOST_RECORD,
    LOST_RESIZE,
    LOST_SHELVE,
    LOST_VM,
    LOST_VM_ERROR,
    MISPLACED_VM,
    MISSING_ALLOCATION,
    ORPHAN_ALLOCATION,
    OVERCOMMIT,
    RECORD_JUDGED,
    SKIPPED,
    STALE_REPORT,
    STRAY_VM,
    Finding,
    Seen,
    adopted_elsewhere,
    misplacements,
    moves_in_flight,
    orphaned,
    stale_reports,
    still_contradicted,
)
from conductor_stub.metrics import ACTIONS_TAKEN, FINDINGS
from scheduler import rules
from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    ConsumerDeleted,
    ProviderNotFound,
)
from scheduler.log import bind_request, get_logger
from scheduler.notifications import ReconcileActionPayload
from scheduler.notifier import Notifier
from scheduler.objects import (
    DELETED,
    ERROR,
    FINAL_STATES,
    SHELVED_OFFLOADED,
    AllocationRequest,
    Flavor,
    InstanceRecord,
    RequestSpec,
    evacuated_from,
)
from scheduler.rpc import RequestContext
from scheduler.store import Consumer, GroupClaim, InstanceReport, RunningInstance
from scheduler.store.base import (
    ChangeFeed,
    InstanceStore,
    PendingIndex,
    PlacementStore,
    ServiceStore,
)

LOG = get_logger(__name__)

#: How many uuids one read of records names.
LOOKUP_BATCH = 500


class ReconcilerStore(
    PlacementStore, InstanceStore, PendingIndex, ServiceStore, ChangeFeed, Protocol
):
    """What the reconciler reads and repairs: reports, records, allocations
    (and the heartbeats of the hosts whose reports are stale)."""


class Reaper(repairs.Reverter, Protocol):
    """The compute calls the reconciler makes (``ComputeClient`` has them)."""

    def reap_instance(self, ctxt: Any, host: str, instance_uuid: str, reason: str) -> None: ...


@dataclass(frozen=True)
class ReconcileSettings:
    """``interval``: seconds between passes; ``orphan_grace``: seconds a finding
    must persist before it is acted on; ``report_max_age``: a report older
    than this is stale (its host is down) and not compared; ``batch``: what
    one paginated read fetches; ``lost_vm_action``: what a lost VM leads to
    (``error``: the instance ERROR, its claim released; ``log``: nothing);
    ``deleted_retention``: how long a delete it finishes keeps its record;
    ``resize_timeout``: the deadline of a revert it begins."""

    interval: float = 60.0
    orphan_grace: float = 120.0
    report_max_age: float = 60.0
    batch: int = 500
    lost_vm_action: str = LOST_VM_ERROR
    deleted_retention: float = 86400.0
    resize_timeout: float = 300.0

    @property
    def lost_after(self) -> float:
        """Seconds a boot client waits for a vanished record to be re-created
        (a VM runs it: one report, a pass to see it, the grace, a pass to act)
        before it calls the record lost."""
        return self.report_max_age + self.orphan_grace + 2 * self.interval


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
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        self.compute = compute
        self.settings = settings or ReconcileSettings()
        self._clock = clock
        self.notifier = notifier
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
        max_age = self.settings.report_max_age
        reports, stale = [], {}
        for r in self.store.instance_reports(batch):
            if now - r.reported_at <= max_age:
                reports.append(r)
            else:
                stale[r.host] = r.reported_at
        # Consumers before records: a record is written before anything claims
        # for it, so a consumer read here has its record in the scan below.
        consumers = {c.uuid: c for c in self.store.scan_consumers(batch)}
        records = {r.uuid: r for r in self.store.scan_instances(batch)}
        reported = {vm.uuid for report in reports for vm in report.instances}
        records.update(self._lookup(sorted((reported | set(consumers)) - set(records))))
        placements = list(misplacements(Seen.of(reports), records.values()))
        adopted = adopted_elsewhere(placements)
        findings = [
            *self._compare_reports(reports, records, consumers, adopted),
            *(
                self._found(
                    p.kind,
                    p.uuid,
                    p.host,
                    p.reason,
                    now,
                    reported_at=p.reported_at,
                    placed=p.placed,
                )
                for p in placements
            ),
            *self._compare_allocations(consumers, records, reports),
            *(
                self._found(LOST_BOOT, r.uuid, None, "its record vanished; nothing ran it", now)
                for r in records.values()
                if r.state == ERROR and r.fault == LOST_FAULT
            ),
            *pending.audit(self.store, records, self._found, now),
            *(
                self._found(STALE_REPORT, "", host, why, now)
                for host, why in stale_reports(
                    stale, self.store.heartbeats(sorted(stale)) if stale else {}, now, max_age
                )
            ),
        ]
        keys = {f.key for f in findings}
        for key in [k for k in self._first_seen if k not in keys]:
            del self._first_seen[key]  # gone: its grace starts again if it comes back
        counts = Counter(f.kind for f in findings)
        for kind in KINDS:
            FINDINGS.labels(kind).set(counts.get(kind, 0))
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
        due = kind not in KEPT_IN_VIEW and now - first >= self.settings.orphan_grace
        return Finding(kind, uuid, host, reason, first, due, **extra)

    def _compare_reports(
        self,
        reports: Iterable[InstanceReport],
        records: Mapping[str, InstanceRecord],
        consumers: Mapping[str, Consumer],
        adopted: set[tuple[str, str]],
    ) -> Iterator[Finding]:
        now = self._clock()
        for report in reports:
            for vm in report.instances:
                if (vm.uuid, report.host) in adopted:
                    continue  # the only copy: its record is moved to it (misplaced_vm)
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
            if consumer is None and not self._fits(host, record, vm):
                return OVERCOMMIT, "ACTIVE here with no allocation: it would overcommit the host"
            return MISSING_ALLOCATION, "ACTIVE here with no allocation here"
        return None

    def _fits(self, host: str, record: InstanceRecord, vm: RunningInstance) -> bool:
        """Whether the instance's allocation fits on ``host``'s root provider now."""
        try:
            provider = self.store.get_provider(self._root(host))
        except ProviderNotFound:
            return True  # the heal says what is wrong
        for rc, amount in _resources(record, vm).items():
            inventory = provider.inventories.get(rc)
            if inventory is not None and amount > rules.free(
                inventory, provider.usages.get(rc, 0)
            ):
                return False
        return True

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
            reason = orphaned(consumer, hosts, records.get(consumer.uuid), migrations)
            if reason is not None:
                yield self._found(
                    ORPHAN_ALLOCATION, consumer.uuid, ",".join(sorted(hosts)) or None, reason, now
                )

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
        elif finding.kind in INDEX_FINDINGS:
            finding = pending.repair_index(self.store, finding)
        elif finding.kind == LOST_VM:
            finding = repairs.lost_vm(
                self.store, finding, self.settings.lost_vm_action, self._clock
            )
        elif finding.kind == LOST_DELETE:
            finding = repairs.lost_delete(
                self.store, finding, self.settings.deleted_retention, self._clock
            )
        elif finding.kind == LOST_SHELVE:
            finding = repairs.lost_shelve(self.store, finding, self._clock)
        elif finding.kind == MISPLACED_VM:
            finding = self._adopt(finding)
        elif finding.kind == LOST_RESIZE:
            assert self.compute is not None
            timeout = self.settings.resize_timeout
            finding = repairs.lost_resize(self.store, self.compute, finding, timeout, self._clock)
        if finding.outcome == SKIPPED:
            return finding
        self.counts[finding.kind] += 1
        ACTIONS_TAKEN.labels(finding.kind).inc()
        self._first_seen.pop(finding.key, None)
        told(finding, self.notifier)
        return finding

    def _still(self, finding: Finding) -> Finding | None:
        """The finding as the store is now (None: it no longer holds)."""
        listed = self.store.list_instances([finding.uuid])
        record = listed[0] if listed else None
        if finding.kind in RECORD_JUDGED | INDEX_FINDINGS:
            return finding if still_contradicted(finding, record) else None
        consumer = self.store.get_consumer(finding.uuid)
        if finding.kind == ORPHAN_ALLOCATION:
            if consumer is None:
                return None
            migrations = self._migrations() if record is None else {}
            hosts = self._hosts(consumer)
            reason = orphaned(consumer, hosts, record, migrations)
            return None if reason is None else replace(finding, reason=reason)
        assert finding.running is not None and finding.host is not None
        assert finding.reported_at is not None
        report = InstanceReport(finding.host, finding.reported_at, (finding.running,))
        found = self._compare_vm(report, finding.running, record, consumer)
        if found is None or found[0] != finding.kind:
            return None
        return replace(finding, reason=found[1])

    def _migrations(self) -> Mapping[str, InstanceRecord]:
        """Moves in flight by migration uuid, read once per repair (whose may a consumer be)."""
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
        first: a fenced uuid (being deleted) is refused there and reaped instead.
        An allocation that would overcommit the host is not written (the
        record is: the VM runs; it is an ``overcommit`` finding from then on)."""
        assert finding.running is not None and finding.host is not None
        vm, host = finding.running, finding.host
        spec = recovered_spec(vm)
        try:
            healed = self._heal_for(vm.uuid, host, dict(vm.resources), vm, spec)
        except ConsumerDeleted:
            return self._reap(replace(finding, kind=STRAY_VM, reason="its instance is deleted"))
        self.store.create_instances([repairs.recovered_record(finding, spec, self._clock())])
        return replace(finding, outcome="recreated" + ("" if healed == HEALED else f"; {healed}"))

    def _heal(self, finding: Finding) -> Finding:
        assert finding.running is not None and finding.host is not None
        [record] = self.store.list_instances([finding.uuid])
        outcome = self._heal_for(
            finding.uuid,
            finding.host,
            _resources(record, finding.running),
            finding.running,
            record.request_spec,
        )
        return replace(finding, outcome=outcome)

    def _adopt(self, finding: Finding) -> Finding:
        """The record moved to where its only VM runs, then its claim: released
        where it was, healed there (if it fits: else an ``overcommit`` finding
        from the next pass on)."""
        assert finding.host is not None
        if not repairs.adopt_record(self.store, finding, self._clock):
            return replace(finding, outcome=SKIPPED)
        [record] = self.store.list_instances([finding.uuid])
        self.store.release(finding.uuid)
        healed = self._heal_for(
            finding.uuid, finding.host, _resources(record, None), None, record.request_spec
        )
        return replace(finding, outcome=f"adopted on {finding.host}; {healed}")

    def _heal_for(
        self,
        uuid: str,
        host: str,
        resources: dict[str, int],
        vm: RunningInstance | None,
        spec: Mapping[str, Any] | None,
    ) -> str:
        """Write ``resources`` for ``uuid`` on ``host``'s root provider, if they
        fit: :data:`HEALED`; :data:`SKIPPED` when the consumer holds something
        already; else why it was refused (nothing written)."""
        parsed = RequestSpec.from_primitive(dict(spec)) if spec else None
        request = AllocationRequest(
            allocations={self._root(host): resources},
            project_id=(parsed.project_id if parsed else vm.project_id if vm else None)
            or "unknown",
            user_id=(parsed.user_id if parsed else vm.user_id if vm else None) or "unknown",
        )
        group = GroupClaim.for_spec(parsed, host) if parsed else None
        try:
            self.store.heal_allocation(uuid, request, group, overcommit=False)
        except ConsumerConflict:
            return SKIPPED
        except CapacityExceeded as exc:
            return f"claim refused ({OVERCOMMIT}): {exc}"
        return HEALED


#: The outcome of a heal that was written.
HEALED = "healed"


def _resources(record: InstanceRecord, vm: RunningInstance | None) -> dict[str, int]:
    """What the instance's allocation takes: its request spec's amounts, else
    what its host reports it takes."""
    if record.request_spec:
        return RequestSpec.from_primitive(dict(record.request_spec)).resources
    return dict(vm.resources) if vm is not None else {}


def told(finding: Finding, notifier: Notifier | None) -> None:
    """An action taken, logged at warning (``reconcile_action``) and notified
    (``scheduler.reconcile.action``) if there is a notifier; a notification
    that cannot be queued is logged, never raised (the repair is done)."""
    LOG.warning(
        "reconcile_action",
        kind=finding.kind,
        action=finding.action,
        instance_uuid=finding.uuid,
        host=finding.host,
        reason=finding.reason,
        outcome=finding.outcome,
    )
    if notifier is None:
        return
    payload = ReconcileActionPayload(
        kind=finding.kind,
        action=finding.action,
        instance_uuid=finding.uuid,
        host=finding.host,
        reason=finding.reason,
        outcome=finding.outcome or "",
    )
    try:
        notifier.info(RequestContext.admin(), RECONCILE_ACTION, payload)
    except Exception as exc:  # noqa: BLE001 - a notification never undoes a repair
        LOG.warning("reconcile_notify_failed", kind=finding.kind, error=repr(exc))


#: The event of an action the reconciler took.
RECONCILE_ACTION = "scheduler.reconcile.action"
