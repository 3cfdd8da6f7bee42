"""The store's contract: placement semantics, services, instance records.

Two implementations keep it: :mod:`scheduler.store.redis_store` (every write
that must be atomic is one Lua script) and :mod:`scheduler.store.memory` (one
lock; for the all-in-one demo and fast unit tests). One contract suite,
``tests/unit/store/test_contract.py``, runs against both.

The contract comes in parts, so that each consumer asks for the part it uses:
:class:`PlacementStore` (providers and allocations; :class:`PlacementReader`
is its reads by uuid), :class:`ChangeFeed` (what a host view reads),
:class:`ServiceStore`, :class:`InstanceStore`; :class:`Store` is all of them
and the housekeeping. They are protocols: a consumer that uses two parts
names their union where it uses them (``class ConductorStore(PlacementStore,
InstanceStore, Protocol)``), and every store is one without saying so. The
two implementations subclass :class:`Store`, and every member is abstract,
so one that lacks a method cannot be instantiated (mypy says so too, and
checks each signature against the one here).

Semantics (Placement's, where it is good):

* Capacity per resource class = int((total - reserved) * allocation_ratio).
  One request never exceeds ``max_unit`` (default: total), is at least
  ``min_unit`` and a multiple of ``step_size``.
* Provider writes (inventory, traits, aggregates) carry the generation the
  caller read; a stale one raises :class:`GenerationConflict` and writes
  nothing. Callers re-read and decide; they never blindly repeat.
* A claim carries no provider generation: capacity is re-checked inside the
  one atomic step, which also checks the server group policy when given,
  records the allocation, bumps every touched provider's generation and
  appends to the change feed. A claim happens whole or not at all; the same
  claim repeated for the same consumer is a no-op (and says so: it returns
  False); a different one for a consumer that already holds allocations
  raises :class:`ConsumerConflict`.
  Each refusal has its own type (:class:`CapacityExceeded`,
  :class:`NoSuchInventory`, :class:`UnitRuleViolation`,
  :class:`GroupPolicyViolation`, :class:`ProviderNotFound`).
* A preempting claim (:meth:`PlacementStore.claim_preempting`) is a claim
  that first drops the allocations of named victims, in the same atomic
  step, and only while each victim is as the scheduler read it; the same
  step fences the victims (DELETING, as a delete begins) and marks the
  claimant's record as waiting on them.
* Release is idempotent; it ends the consumer's server-group membership in
  the same step.
* An instance being deleted is fenced (:meth:`InstanceStore.start_delete`):
  a claim for it raises :class:`ConsumerDeleted`, until its DELETED record
  expires.
* A move hands one consumer's allocations to another in one atomic step
  (a resize parks the instance's allocation on its migration consumer, and a
  revert hands it back): usage does not change, a repeated move is a no-op.
* Every provider, usage, aggregate and service-state write (reports of
  capabilities and stats included, heartbeats not) appends a
  :class:`Change` to the feed, so a worker's host view stays fresh by deltas.
* Disabling a service sets the trait ``COMPUTE_STATUS_DISABLED`` on its root
  provider in the same atomic write (and enabling clears it).
* Nested providers: a child names its parent; every provider knows its
  root. One claim may span the providers of a tree (or any providers): it
  checks them all and writes them all, or nothing.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from scheduler.exceptions import InvalidRequest, StreamTruncated
from scheduler.objects import AllocationRequest, InstanceRecord
from scheduler.priority import MAX_PRIORITY
from scheduler.store.columns import CompactSnapshot
from scheduler.store.records import (
    CORRUPT_CHANGE,
    Aggregate,
    Change,
    Consumer,
    EndedInstance,
    Eviction,
    GroupClaim,
    InstanceReport,
    Inventory,
    PreemptionEntry,
    Provider,
    RecordCheck,
    Refusal,
    RunningInstance,
    Service,
    ServiceReport,
    Victim,
)

#: The records are at home in :mod:`scheduler.store.records`; named here too,
#: where the contract that hands them out is.
__all__ = [
    "CORRUPT_CHANGE",
    "Aggregate",
    "Change",
    "ChangeFeed",
    "CompactSnapshot",
    "Consumer",
    "EndedInstance",
    "Eviction",
    "GroupClaim",
    "InstanceReport",
    "PreemptionEntry",
    "PreemptionLog",
    "RecordCheck",
    "Refusal",
    "Victim",
    "RefusalLog",
    "InstanceStore",
    "Inventory",
    "PlacementReader",
    "PlacementStore",
    "Provider",
    "RunningInstance",
    "Service",
    "ServiceReport",
    "ServiceStore",
    "Store",
]

#: What a step's guard reads of one instance (:meth:`InstanceStore.step_reads`):
#: its record (None: no record) and whether it holds its claim on the host asked.
StepRead = tuple[InstanceRecord | None, bool]

#: What :meth:`InstanceStore.mark_built` did: the record went ACTIVE there
#: (``BUILT``); it is BUILDING but its claim is not on that host (``STALE``);
#: there is no record (``NO_RECORD``); it is in another state (``NOT_BUILDING``).
BUILT, STALE, NO_RECORD, NOT_BUILDING = "built", "stale", "no record", "not building"

# --- the contract, in parts: each consumer asks for the part it uses ------------------


class PlacementReader(Protocol):
    """One provider or one consumer, read by uuid."""

    @abc.abstractmethod
    def get_provider(self, uuid: str) -> Provider:
        """:class:`ProviderNotFound` if absent."""

    @abc.abstractmethod
    def get_consumer(self, consumer_uuid: str) -> Consumer | None: ...


class PlacementStore(PlacementReader, Protocol):
    """Providers with their inventories, traits and aggregates; allocations."""

    @abc.abstractmethod
    def create_provider(self, uuid: str, name: str, parent_uuid: str | None = None) -> Provider:
        """Create with generation 0; :class:`ProviderExists` if uuid or name is taken."""

    @abc.abstractmethod
    def get_provider_by_name(self, name: str) -> Provider:
        """:class:`ProviderNotFound` if absent."""

    @abc.abstractmethod
    def list_providers(self) -> list[Provider]: ...

    @abc.abstractmethod
    def set_inventory(
        self, uuid: str, generation: int, inventories: Mapping[str, Inventory]
    ) -> int:
        """Replace the inventory; return the new generation.

        :class:`GenerationConflict` if stale; :class:`InventoryInUse` if a
        resource class with usage would be removed.
        """

    @abc.abstractmethod
    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int: ...

    @abc.abstractmethod
    def set_aggregates(self, uuid: str, generation: int, aggregates: Iterable[str]) -> int: ...

    @abc.abstractmethod
    def put_aggregate(self, aggregate: Aggregate) -> None:
        """Create or replace an aggregate's name and metadata."""

    @abc.abstractmethod
    def list_aggregates(self) -> list[Aggregate]: ...

    # allocations
    @abc.abstractmethod
    def claim(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        """Atomically check and write a consumer's allocations (see module doc).

        True when written; False when the consumer already held exactly
        these (nothing written). So one round trip both claims and tells a
        re-driven request that it already holds its allocations.
        """

    @abc.abstractmethod
    def claim_preempting(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        victims: Sequence[Victim],
        priority: int,
        group: GroupClaim | None = None,
        *,
        eviction: Eviction,
    ) -> bool:
        """:meth:`claim`, evicting ``victims`` in the same atomic step.

        The claimant's record must be one :meth:`Eviction.unmatched` lets
        claim (a boot being scheduled), and every victim must still be as
        read (:meth:`Victim.unmatched`: a live ACTIVE record with the same
        ``updated_at``, preemptible and of a priority strictly below
        ``priority``, holding exactly the allocations read), else
        :class:`RecordChanged` naming it and nothing is written. Then the
        victims' allocations and group memberships are dropped and the
        claim is checked against what is left (capacity, units, the group
        policy) and written; a refusal there writes nothing either (the
        victims keep what they hold). Every touched provider's generation
        goes up by one and feeds one ``usage`` change.

        In the same step the victims are fenced as :meth:`start_delete`
        fences an instance (DELETING, every later claim for them refused)
        with :meth:`Eviction.victim_fields` (their delete due at once, the
        fault naming the claimant), and the claimant's record takes
        :meth:`Eviction.preemptor_fields` (it waits on them). A repeat for
        a consumer that already holds exactly these allocations is a no-op
        (False), victims and records unread.
        """

    @abc.abstractmethod
    def release(self, consumer_uuid: str, check: RecordCheck | None = None) -> bool:
        """Drop all of a consumer's allocations; True if it held any.

        With ``check``, only while that instance record is as it says, checked
        in the same atomic step: else :class:`RecordChanged` and nothing is
        written (a compute's step releases only while its step is due).
        """

    @abc.abstractmethod
    def move_allocations(
        self,
        source_uuid: str,
        target_uuid: str,
        replace: bool = False,
        check: RecordCheck | None = None,
    ) -> bool:
        """Atomically hand ``source``'s allocations to ``target``; True if moved.
        ``check`` as for :meth:`release`.

        The amounts stay on the same providers (usage does not change); only
        the consumer holding them does, with its project, user and server-group
        membership. Every touched provider's generation is bumped and fed.
        A source that holds nothing moves nothing and returns False, so a
        repeated move is a no-op. A target that holds allocations raises
        :class:`ConsumerConflict` and nothing is written, unless ``replace``:
        then the target's allocations are dropped in the same step (a resize
        revert drops the destination's claim and restores the source's).
        """

    @abc.abstractmethod
    def list_consumers(self) -> list[Consumer]:
        """Every consumer holding allocations (no daemon lists them all: the
        tests check usage against it)."""

    @abc.abstractmethod
    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        """Members per host of a server group, from the live allocations."""

    # what the reconciler reads and writes

    @abc.abstractmethod
    def scan_consumers(self, batch: int = 500) -> Iterator[Consumer]:
        """Every consumer holding allocations, read ``batch`` at a time (HSCAN,
        like :meth:`ServiceStore.instance_reports`), in no set order, each once:
        what the reconciler walks, so that no one command holds the store. One
        written or released during the scan may be seen or not."""

    @abc.abstractmethod
    def consumers_on(self, provider_uuids: Collection[str], batch: int = 500) -> list[Consumer]:
        """Every consumer holding an allocation on any of ``provider_uuids``,
        in no set order, each once: what the preemption search reads again of
        the hosts whose usage changed. A provider's record counts its
        consumers but does not name them, so this walks every consumer: in
        the store's own memory, or ``batch`` at a time (HSCAN) decoding only
        the entries that name one of the providers. One written or released
        during the walk may be seen or not."""

    @abc.abstractmethod
    def heal_allocation(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        group: GroupClaim | None = None,
        overcommit: bool = True,
    ) -> bool:
        """Write the allocation of a consumer that holds none, WITHOUT the
        unit checks of :meth:`claim` and, unless ``overcommit`` is False, its
        capacity check: what a compute really runs is accounted for even where
        it does not fit (``heal_allocations``). With ``overcommit=False`` an
        allocation past some provider's capacity is refused instead
        (:class:`CapacityExceeded`, nothing written). Usage,
        generations and the feed change as for a claim; with ``group`` the
        consumer becomes a member on ``group.host`` (no policy check: it runs
        there already).

        Returns True when the allocation takes some provider past its capacity
        (the caller must say so: it is never silent), else False.
        :class:`ConsumerDeleted` if the uuid is fenced, :class:`ConsumerConflict`
        if the consumer holds any allocation (nothing to heal),
        :class:`ProviderNotFound` / :class:`NoSuchInventory` as for a claim; then
        nothing is written.
        """


class ChangeFeed(PlacementReader, Protocol):
    """What a host view reads: one load, the deltas after it, heartbeats; and a
    provider or consumer re-read by uuid."""

    @abc.abstractmethod
    def compact_snapshot(self, batch: int = 1000) -> CompactSnapshot:
        """Every provider, aggregate and service, and a feed cursor, as columns
        with no object per host (:mod:`scheduler.store.columns`): what a host
        view loads at start, then brings up to date with :meth:`changes`
        after the cursor.

        A store may read it ``batch`` records at a time while writes go on
        (the Redis store does: no one command holds the store), so it need
        not be one instant: the cursor is read first, and each record is as
        it stood at some moment after it. Replaying every change after the
        cursor over it converges on the store, because:

        * each change carries the whole new state of what it changes (a
          ``provider`` change the whole provider; a ``usage`` change the
          absolute usages, consumer count and generation; an ``aggregate`` or
          ``service`` change the whole record), so the last change of a
          record sets what the store holds, whatever an older change
          replayed over a newer record did before it; a record no change
          after the cursor touches was read as it still is;
        * providers' generations only grow (every provider write bumps it)
          and a view skips what is older than what it holds, so a replayed
          older change does not even pass through;
        * nothing is deleted but heartbeats (providers, aggregates and
          service records are never removed), so no record read in a page
          can outlive its deletion;
        * a child provider is created after its root, so a child read in a
          page before its root was (or whose root a page missed: created
          during the walk) waits in the view for its root's ``provider``
          change, which comes before any change of the child's;
        * heartbeats are not fed: a heartbeat read is at least as new as at
          the cursor (they only move forward), a host marked down after it
          is marked down by its ``service`` change, and any heartbeat newer
          than its page reaches the view with the next heartbeat re-read, as
          it would for a view loaded long before.
        """

    @abc.abstractmethod
    def changes(self, cursor: str, limit: int = 1000) -> list[Change]:
        """Changes after ``cursor``, oldest first, at most ``limit``.

        :class:`StreamTruncated` when the cursor is older than what the feed
        still holds: the caller reloads from :meth:`compact_snapshot`.
        """

    @abc.abstractmethod
    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        """The last heartbeat of every host (registered or not), or of those of
        ``hosts`` that have one, by host.

        Liveness alone, one number per host and no service record read: what
        a host view re-reads every ``services_refresh_interval`` for the hosts
        whose liveness could have changed, since heartbeats are not fed
        (everything else about a service is).
        """


class ServiceStore(Protocol):
    """Compute services: registration, reports, heartbeats, disabling, build results."""

    @abc.abstractmethod
    def register_services(self, services: Iterable[Service]) -> None:
        """Create or update service records (host, rpc_server), fed as changes."""

    @abc.abstractmethod
    def report_services(self, reports: Iterable[ServiceReport]) -> None:
        """Replace what computes report (capabilities, stats) in one atomic step.

        Only a part that changed is written and fed as a ``service`` change,
        so a compute may report as often as it likes. :class:`NotFound` (kind
        ``service``) if a host has no service record; then nothing is written.
        """

    @abc.abstractmethod
    def heartbeat(self, hosts: Iterable[str], now: float) -> None:
        """Record that these hosts are alive at ``now`` (not fed as changes)."""

    @abc.abstractmethod
    def list_services(self) -> list[Service]: ...

    @abc.abstractmethod
    def get_service(self, host: str) -> Service | None: ...

    @abc.abstractmethod
    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None) -> None:
        """Disable or enable a service and, in the same atomic step, add or
        remove the trait ``COMPUTE_STATUS_DISABLED`` on the root provider
        named after the host (if there is one), bumping its generation. The
        trait is what the disabled-computes request filter forbids."""

    @abc.abstractmethod
    def record_build_result(self, host: str, success: bool) -> None:
        """A failure increments the host's failed_builds, a success resets it."""

    @abc.abstractmethod
    def report_instances(self, reports: Iterable[InstanceReport]) -> None:
        """Replace what these hosts run (a compute's periodic report of its
        VMs), all in one write; not fed as changes."""

    @abc.abstractmethod
    def instance_reports(self, batch: int = 500) -> Iterator[InstanceReport]:
        """Every host's last report, read ``batch`` hosts at a time so that
        no one command holds the store (the reconciler walks them)."""

    @abc.abstractmethod
    def mark_down(self, hosts: Iterable[str]) -> None:
        """Say these hosts are down now (their compute stopped): forget each
        one's heartbeat and feed its service record in one atomic step, which
        then carries no heartbeat (``last_seen`` 0), so a host view counts them
        down at once instead of after ``service_down_time``. Hosts with no
        service record are skipped. Their next heartbeat brings them back up."""


class InstanceStore(Protocol):
    """Instance records, which the conductor owns."""

    @abc.abstractmethod
    def create_instances(self, records: Iterable[InstanceRecord]) -> None:
        """Create records; an existing uuid is left as it is (idempotent)."""

    @abc.abstractmethod
    def get_instance(self, uuid: str) -> InstanceRecord:
        """:class:`InstanceNotFound` if absent."""

    @abc.abstractmethod
    def mark_built(
        self, uuid: str, built_on: str, **changes: Any
    ) -> tuple[str, InstanceRecord | None]:
        """A build's result, checked and written in one round trip: if the
        record is BUILDING and the instance's consumer holds an allocation on
        ``built_on``'s provider, apply ``changes`` and count the attempt
        (``attempts`` + 1): (:data:`BUILT`, the new record). Otherwise nothing
        is written: (:data:`STALE`, the record), (:data:`NO_RECORD`, None) or
        (:data:`NOT_BUILDING`, the record as :meth:`get_instance` reads it)."""

    @abc.abstractmethod
    def step_reads(self, reads: Sequence[tuple[str, str | None]]) -> list[StepRead]:
        """For each (instance uuid, host or None), in one store round trip:
        the instance's record as :meth:`get_instance` reads it (None where
        that raises :class:`InstanceNotFound`) and whether the instance's
        consumer holds an allocation on that host's provider (False for no
        host, an unknown host or no consumer): what a step's guard reads."""

    @abc.abstractmethod
    def update_instance(
        self,
        uuid: str,
        expected_states: Iterable[str] | None = None,
        expect: Mapping[str, str | None] | None = None,
        **changes: Any,
    ) -> InstanceRecord | None:
        """Apply ``changes`` atomically; return the new record.

        With ``expected_states``, only if the record's state is one of them,
        and with ``expect``, only if each of those fields (text fields, such
        as ``migration_uuid`` or ``task_state``) holds that value (None: none);
        otherwise nothing is written and ``None`` is returned (a late or
        duplicate result cannot overwrite a final state, nor a step of one
        move the record of the next). A DELETED record is never changed:
        ``None`` too.
        """

    @abc.abstractmethod
    def list_instances(self, uuids: Iterable[str] | None = None) -> list[InstanceRecord]:
        """The records of ``uuids`` (DELETED ones within their retention too), or
        every live record (no DELETED one)."""

    @abc.abstractmethod
    def scan_instances(self, batch: int = 500) -> Iterator[InstanceRecord]:
        """Every live record (no DELETED one), read ``batch`` at a time, in no set
        order: to go through a cloud's instances without holding them all. Each
        uuid is yielded once; one created or removed during the scan may be
        seen or not."""

    @abc.abstractmethod
    def start_delete(self, uuid: str, **changes: Any) -> tuple[InstanceRecord, bool]:
        """Start deleting an instance: in one step, its record goes DELETING (with
        ``changes``) and a fence is set, so that every claim for the uuid is
        refused from then on (:class:`ConsumerDeleted`), whatever it races.

        Returns (the record, True), or (the record as it is, False) when it
        was DELETING or DELETED already (nothing written).
        :class:`InstanceNotFound` if there is no such record.
        """

    @abc.abstractmethod
    def finish_delete(
        self, uuid: str, host: str | None, retention: float, now: float, force: bool = False
    ) -> InstanceRecord | None:
        """``host`` says the VM of a DELETING instance is gone there: it leaves
        ``pending_hosts``. Once none is left (or with ``force``), in one step:
        the instance's allocations and its migration's are released (their
        server-group memberships end with them), and the record is DELETED,
        kept ``retention`` seconds, then removed by the store itself (no sweep
        finds it). A DELETED record is never changed again
        (:meth:`update_instance` returns None for it), and the fence lasts as
        long as it does.

        Returns the record as it now is; the DELETED record as it is when
        repeated; None when the instance is neither DELETING nor DELETED
        (nothing written). :class:`InstanceNotFound` if there is no record.
        """

    @abc.abstractmethod
    def list_instances_due(self, now: float, limit: int = 1000) -> list[InstanceRecord]:
        """Records whose ``deadline`` is set and not after ``now``, earliest first.

        At most ``limit``; ties in uuid order. This is the conductor's
        pending set: what it sent and has not heard back on in time, read
        from the store so that a restarted conductor finds it again. Each
        write of a record keeps it in an index by deadline in the same atomic
        step (a record whose deadline is cleared, that is DELETED or removed,
        leaves it), so this reads only what is due: its cost does not grow
        with the number of records, finished ones included.
        """


class PendingIndex(Protocol):
    """The requests waiting for capacity (PENDING records), in the order they
    are retried: priority first (higher first), then age (older first).

    The index is the conductor's: it adds an entry once a record is PENDING
    and removes it once the record has left PENDING. Its writes are not in
    one step with the record's, so an entry may outlive its record's
    PENDING state (its reader skips and removes it) or be missing for a
    PENDING record (the reconciler puts it back); see
    :mod:`conductor_stub.pending`.
    """

    @abc.abstractmethod
    def add_pending(self, uuid: str, priority: int, created_at: float) -> None:
        """Index ``uuid`` at (``priority``, ``created_at``); an entry it had is
        replaced (idempotent)."""

    @abc.abstractmethod
    def remove_pending(self, uuid: str) -> bool:
        """Drop ``uuid``'s entry; False when it had none (idempotent)."""

    @abc.abstractmethod
    def list_pending(self, limit: int = 1000, offset: int = 0) -> list[str]:
        """``limit`` uuids in retry order from the ``offset``-th (0: the
        first): priority descending, then ``created_at`` ascending, ties by
        uuid. One page of a read however long the index (``scheduler-admin
        pending`` reads page after page)."""

    @abc.abstractmethod
    def count_pending(self) -> int:
        """How many entries the index holds (stale ones included)."""


def pending_member(uuid: str, priority: int, created_at: float) -> str:
    """The pending index's sort key of one entry, as text whose byte order is
    the retry order (priority descending, then age, then uuid): the one rule
    both stores sort by (the Redis store as a sorted set's members of equal
    score). The uuid is last, after the final ``:``."""
    rank = MAX_PRIORITY - max(-MAX_PRIORITY, min(MAX_PRIORITY, priority))
    return f"{rank:010d}:{max(created_at, 0.0):020.6f}:{uuid}"


def pending_uuid(member: str) -> str:
    """The uuid of a :func:`pending_member`."""
    return member.rpartition(":")[2]


class RefusalLog(Protocol):
    """The last NoValidHosts, for "why did the last requests fail?"."""

    @abc.abstractmethod
    def record_refusal(self, refusal: Refusal) -> None:
        """Keep ``refusal`` (a NoValidHost) as the newest of the last
        ``REFUSALS_KEPT``; the oldest beyond them go."""

    @abc.abstractmethod
    def recent_refusals(self, limit: int = 20) -> list[Refusal]:
        """The last ``limit`` refusals, newest first."""


class PreemptionLog(Protocol):
    """The last preemptions, for "whom did preemption evict lately?"; each
    entry is written by the preempting claim's own atomic step
    (:meth:`PlacementStore.claim_preempting`, :meth:`Eviction.entry`), so
    the log holds every preemption that took effect and no other."""

    @abc.abstractmethod
    def recent_preemptions(self, limit: int = 20) -> list[PreemptionEntry]:
        """The last ``limit`` preemptions (of the last ``PREEMPTIONS_KEPT``),
        newest first."""


class Store(
    PlacementStore,
    ChangeFeed,
    ServiceStore,
    InstanceStore,
    PendingIndex,
    RefusalLog,
    PreemptionLog,
    Protocol,
):
    """Every part, and the housekeeping: what both implementations provide."""

    @abc.abstractmethod
    def ping(self) -> bool:
        """True if the backing service answers."""

    @abc.abstractmethod
    def wipe(self) -> None:
        """Delete everything under this store's key prefix (tests, demo runs)."""

    def close(self) -> None:  # pragma: no cover - trivial default
        """Release connections."""
        return None


# --- input checks both implementations make -----------------------------------------

_CURSOR = re.compile(r"(\d+)-(\d+)")

#: The fields ``update_instance`` may change.
INSTANCE_FIELDS = frozenset(InstanceRecord.__dataclass_fields__) - {"uuid"}


def check_inventories(inventories: Mapping[str, Inventory]) -> None:
    """Refuse nonsense with :class:`InvalidRequest`.

    Nonsense: a negative total or reserved, a min_unit or step_size below 1,
    an allocation ratio that is not positive.
    """
    for rc, inv in inventories.items():
        if (
            inv.total < 0
            or inv.reserved < 0
            or inv.min_unit < 1
            or inv.step_size < 1
            or not inv.allocation_ratio > 0
        ):
            raise InvalidRequest(reason=f"{rc} inventory is out of range: {inv}")


def check_allocation_request(request: AllocationRequest) -> None:
    """:class:`InvalidRequest` unless every named provider gets at least one amount."""
    if not request.allocations or not all(request.allocations.values()):
        raise InvalidRequest(reason="an allocation request needs an amount on every provider")


def check_victims(consumer_uuid: str, victims: Sequence[Victim], group: GroupClaim | None) -> None:
    """:class:`InvalidRequest` for a preempting claim with no victims, one
    named twice, or one that is the claimant (or its own-membership consumer)."""
    uuids = [v.uuid for v in victims]
    own = {consumer_uuid, group.own_consumer if group is not None else None}
    if not uuids or len(set(uuids)) != len(uuids) or own & set(uuids):
        raise InvalidRequest(
            reason="a preempting claim needs distinct victims other than the claimant"
        )


def check_move(source_uuid: str, target_uuid: str) -> None:
    """:class:`InvalidRequest` for a move of a consumer onto itself."""
    if source_uuid == target_uuid:
        raise InvalidRequest(reason=f"cannot move allocations of {source_uuid} onto itself")


def check_reports(reports: Iterable[ServiceReport]) -> list[ServiceReport]:
    """The reports as a list; :class:`InvalidRequest` unless every stat is a
    non-negative integer and the capabilities are a JSON object."""
    out = list(reports)
    for report in out:
        if report.capabilities is not None and not isinstance(report.capabilities, Mapping):
            raise InvalidRequest(reason=f"capabilities of {report.host} must be a mapping")
        for name, value in (report.stats or {}).items():
            if (
                not isinstance(name, str)
                or isinstance(value, bool)
                or not isinstance(value, int)
                or value < 0
            ):
                raise InvalidRequest(
                    reason=f"stat {name!r} of {report.host} must be a non-negative integer"
                )
    return out


def freeze_json(value: Any) -> Any:
    """A read-only deep copy of a JSON value (objects as mapping proxies, arrays
    as tuples): what both stores hand out for reported capabilities."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze_json(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze_json(v) for v in value)
    return value


def check_instance_changes(changes: Mapping[str, Any]) -> None:
    """:class:`TypeError` for a field an instance record does not have (or its uuid)."""
    unknown = sorted(set(changes) - INSTANCE_FIELDS)
    if unknown:
        raise TypeError(f"cannot update instance field(s): {', '.join(unknown)}")


def cursor_key(cursor: str) -> tuple[int, int]:
    """A feed cursor (``"<ms>-<seq>"``, like a Redis stream id) as a comparable pair.

    A string no feed issues raises :class:`StreamTruncated`: the caller's
    remedy, a reload from a snapshot, is the right one for it too.
    """
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise StreamTruncated(cursor=cursor)
    return int(match.group(1)), int(match.group(2))
