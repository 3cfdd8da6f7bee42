"""Preemption: which lower-priority instances a request that finds no host
would evict, and on which host (issue 33, item 2).

A request whose priority class may preempt (:data:`scheduler.priority.PREEMPT`)
and that finds no host asks, per candidate host, which preemptible
instances of strictly lower priority would have to go for it to pass every
stage: the candidate step (capacity per request group over the host's
provider tree, traits, aggregates, liveness) and every host filter, the
server group's strict policies included, as if those instances were gone.

The search, in the host view (:meth:`Preemptor.find`):

1. The pool: every instance that may be evicted by the request's priority
   (:func:`scheduler.store.records.eviction_refused`, the rule the store's
   claim applies too: ACTIVE with no task, preemptible, priority strictly
   lower), with what it holds, read whole from the store and kept for
   :data:`POOL_AGE` seconds. The hosts whose row changed since are searched
   last: steps 2 to 4 run first without them, and only if no other host makes
   room are they read again (what every consumer on their providers holds,
   and those consumers' records: new instances there are found) and the
   search run again over the pool so brought up to date.
2. By level, the lowest priority first: the pool's instances at or below
   the level leave the view (their usage and consumer count taken off, in
   one array operation; the per-host instance counts some filters read are
   not, which can only keep a host out) and
   the candidate step and the filters run once over every host, as a normal
   decision does. The hosts that pass and hold some of those instances are
   where evicting at most up to this level can make room; the first level
   with one decides the lowest highest-victim priority.
3. On each of those hosts (at most :data:`EXAMINED`, those with the fewest
   such instances first), the reprieve: with every one of them gone, each is
   given back in turn, the most important first (higher priority, then the
   longest running), and kept if the host still passes with it (capacity on
   its tree and every filter on that host, the group's members on it
   counted as they are with only that host's victims gone). What is left
   must go: a minimal set, since no one of them can be given back.
4. Of those hosts, the one whose victims have the lowest highest priority,
   then the fewest victims, then the least evicted (the victims' share of
   the host's capacity, summed over the classes they hold) wins; ties by
   host name.

The view is left as it was. Nothing here claims: the store's atomic step,
:meth:`scheduler.store.base.PlacementStore.claim_preempting`, takes the
victims as read here (:meth:`Preemption.victims_as_read`) and the records'
changes (:meth:`Preemption.eviction`), and refuses if any of them changed
since. The search is what ``explain`` shows for a request that finds no
host, and what a boot that finds none claims with
(:meth:`scheduler.manager.stages.Stages._preempt`); ending the victims' VMs
before the preemptor is built is the conductor's
(:mod:`conductor_stub.tasks.preempt`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from scheduler.engine.context import CycleState, PlacementContext
from scheduler.engine.hostview import UsageShift
from scheduler.engine.placement import Placement, place
from scheduler.explain import InstanceTrace, WouldPreempt
from scheduler.objects import InstanceRecord, Selection
from scheduler.priority import PREEMPT, PriorityClass
from scheduler.store.base import Consumer, Eviction, Victim
from scheduler.store.records import eviction_refused

if TYPE_CHECKING:
    from scheduler.engine.claims import Claims
    from scheduler.engine.hostview import HostView
    from scheduler.engine.stages import Stages

#: How many of the hosts that pass at the deciding level are examined one by
#: one (the reprieve), those needing the fewest evictions first.
EXAMINED = 8
#: How long (seconds) the instances that may be evicted, read whole from the
#: store, are used before they are read whole again. Meanwhile a host whose
#: usage changed is read again when the search needs it (see the module doc);
#: a record that changed without its host's usage changing is not seen yet (a
#: build ending: not a candidate until the next read; a delete begun: refused
#: by the store's step).
POOL_AGE = 2.0


class PreemptionReader(Protocol):
    """What the search reads of the store: the instance records and what
    each holds, all of them or those of some hosts."""

    def scan_instances(self, batch: int = 500) -> Iterator[InstanceRecord]: ...

    def get_consumer(self, consumer_uuid: str) -> Consumer | None: ...

    def consumers_on(
        self, provider_uuids: Collection[str], batch: int = 500
    ) -> list[Consumer]: ...

    def list_instances(self, uuids: Iterable[str] | None = None) -> list[InstanceRecord]: ...


def may_preempt(chosen: PriorityClass | None) -> bool:
    """Whether a request of class ``chosen`` may evict others: a class whose
    policy is ``preempt``; a request with no class never does."""
    return chosen is not None and chosen.preemption_policy == PREEMPT


@dataclass(frozen=True)
class Candidate:
    """An instance the request may evict: its record and what it holds, as read."""

    record: InstanceRecord
    held: Consumer
    index: int  # its host's row in the view

    @property
    def importance(self) -> tuple[int, float]:
        """Higher is more important: its priority, then how long it has run."""
        return (self.record.priority, -self.record.created_at)

    def as_victim(self) -> Victim:
        return Victim(
            self.record.uuid,
            self.held.allocations,
            self.record.host,
            self.record.updated_at,
            self.record.priority_class,
            self.record.priority,
        )


@dataclass(frozen=True)
class Preemption:
    """Where a request would go by evicting ``victims`` there, and its Selection."""

    selection: Selection
    victims: tuple[Candidate, ...]
    evicted: float  # the victims' share of the host's capacity, summed over classes

    @property
    def host(self) -> str:
        return self.selection.host

    @property
    def key(self) -> tuple[int, int, float, str]:
        """The order hosts are chosen in: lowest highest-victim priority, fewest
        victims, least evicted, then by name."""
        highest = max(v.record.priority for v in self.victims)
        return (highest, len(self.victims), self.evicted, self.host)

    def victims_as_read(self) -> list[Victim]:
        return [v.as_victim() for v in self.victims]

    def eviction(
        self, request_id: str, at: float, priority_class: str | None, priority: int
    ) -> Eviction:
        """What the claim writes on the records (:class:`Eviction`): the
        preemptor placed on this host, its victims' delete due at ``at``."""
        s = self.selection
        return Eviction(
            request_id, at, s.host, s.node, s.availability_zone, priority_class, priority
        )

    def explained(self) -> WouldPreempt:
        """What explain shows of it."""
        return WouldPreempt(
            self.host,
            tuple(
                (v.record.uuid, v.record.priority_class, v.record.priority) for v in self.victims
            ),
        )


@dataclass(frozen=True)
class _Pool:
    """The instances that may be evicted, as read at ``read_at`` (view epoch
    ``epoch``, change-log ``version``): each one's priority and host, and
    what they hold as arrays the view shifts at once."""

    epoch: int
    version: int
    read_at: float
    candidates: tuple[Candidate, ...]
    priorities: np.ndarray
    hosts: np.ndarray
    shift: UsageShift


class Preemptor:
    """The preemption search of one engine, over its view (see the module doc).
    Called under the engine's lock, with the view refreshed."""

    def __init__(self, view: HostView, stages: Stages, claims: Claims) -> None:
        self.view = view
        self.stages = stages
        self.claims = claims
        self._pool: _Pool | None = None

    def find(
        self,
        store: PreemptionReader,
        ctx: PlacementContext,
        states: CycleState,
        rng: np.random.Generator,
        priority: int,
    ) -> Preemption | None:
        """The host and victims that make room for the request of ``priority``
        (None: evicting every lower-priority preemptible instance makes room
        nowhere)."""
        pool = self.pool(store, ctx.now)
        changed = self.view.changed_since(pool.version)
        if changed is None or not len(changed):
            return self._search(ctx, states, rng, pool, pool.priorities < priority)
        # First without the hosts whose row changed since the pool was read
        # (what their instances hold may have changed, new ones may be there):
        # reading them again walks the store's consumers.
        usable = (pool.priorities < priority) & ~np.isin(pool.hosts, changed)
        found = self._search(ctx, states, rng, pool, usable)
        if found is not None:
            return found
        self._pool = pool = self._refreshed(store, pool, changed)
        return self._search(ctx, states, rng, pool, pool.priorities < priority)

    def _search(
        self,
        ctx: PlacementContext,
        states: CycleState,
        rng: np.random.Generator,
        pool: _Pool,
        usable: np.ndarray,
    ) -> Preemption | None:
        """Steps 2 to 4 (see the module doc) over the pool's ``usable``; the
        view left as found."""
        gone = np.zeros(len(pool.candidates), dtype=bool)
        try:
            for level in np.unique(pool.priorities[usable]):
                more = usable & (pool.priorities == level)
                self.view.shift_usage(pool.shift, more, -1)
                gone |= more
                found = self._at_level(ctx, states, rng, pool, gone)
                if found is not None:
                    return found
            return None
        finally:
            self.view.shift_usage(pool.shift, gone, +1)

    def pool(self, store: PreemptionReader, now: float) -> _Pool:
        """Every instance that may be evicted by a higher priority
        (:func:`~scheduler.store.records.eviction_refused`) on a host of the
        view, with what it holds there, as last read whole: again after
        :data:`POOL_AGE` seconds, or once the view reloaded or its change log
        no longer reaches back to the read. (The hosts whose row changed
        since are read again by :meth:`find` when it needs them.)"""
        pool = self._pool
        if (
            pool is not None
            and pool.epoch == self.view.epoch
            and now - pool.read_at < POOL_AGE
            and self.view.changed_since(pool.version) is not None
        ):
            return pool
        return self._read(store, now)

    def _read(self, store: PreemptionReader, now: float) -> _Pool:
        """The pool read whole: every instance record, and what each that may
        be evicted holds."""
        epoch, version = self.view.epoch, self.view.version
        found = []
        for record in store.scan_instances():
            if eviction_refused(record) is not None:
                continue
            candidate = self._candidate(record, store.get_consumer(record.uuid))
            if candidate is not None:
                found.append(candidate)
        self._pool = pool = _Pool(
            epoch,
            version,
            now,
            tuple(found),
            np.array([c.record.priority for c in found], dtype=np.int64),
            np.array([c.index for c in found], dtype=np.int64),
            self.view.usage_shift([(c.index, c.held.allocations) for c in found]),
        )
        return pool

    def _refreshed(self, store: PreemptionReader, pool: _Pool, changed: np.ndarray) -> _Pool:
        """``pool`` with the entries of the ``changed`` hosts read again: what
        every consumer on their providers (roots and children) holds, and
        those consumers' records, two batched reads. Their old entries are
        dropped, and those of the instances that may be evicted there now
        (new ones included) added; the others are kept as they are. The
        pool's age stays that of its whole read (a record can change without
        its host's row changing: a build ending, a delete beginning)."""
        version = self.view.version
        kids, _ = self.view.kids_of(changed)
        providers = [self.view.uuids[h] for h in changed.tolist()]
        providers += [self.view.kid_uuids[k] for k in kids.tolist()]
        held = {c.uuid: c for c in store.consumers_on(providers)}
        rows = set(changed.tolist())
        fresh = []
        for record in store.list_instances(sorted(held)):
            if eviction_refused(record) is not None:
                continue
            candidate = self._candidate(record, held.get(record.uuid))
            if candidate is not None and candidate.index in rows:
                fresh.append(candidate)
        keep = ~np.isin(pool.hosts, changed)
        kept = [c for c, k in zip(pool.candidates, keep.tolist(), strict=True) if k]
        added = self.view.usage_shift([(c.index, c.held.allocations) for c in fresh])
        return _Pool(
            pool.epoch,
            version,
            pool.read_at,
            (*kept, *fresh),
            np.concatenate(
                [pool.priorities[keep], np.array([c.record.priority for c in fresh], np.int64)]
            ),
            np.concatenate([pool.hosts[keep], np.array([c.index for c in fresh], np.int64)]),
            _joined(pool.shift, keep, added),
        )

    def _candidate(self, record: InstanceRecord, held: Consumer | None) -> Candidate | None:
        """``record`` (one the rule lets be evicted) as a candidate: None when
        its host is not in the view or what it holds is not all on that host."""
        if record.host is None:  # (the rule says it is on a host: narrowed for the index)
            return None
        index = self.view.index_of(record.host)
        if index is None or held is None or not self._on_host(held, index):
            return None
        return Candidate(record, held, index)

    def _on_host(self, held: Consumer, index: int) -> bool:
        """Whether every provider ``held`` names is the host's or a child of it."""
        root = self.view.uuids[index]
        others = [rp for rp in held.allocations if rp != root]
        if not others:
            return bool(held.allocations)
        kids = set(self.view.kids_of(np.array([index]))[0].tolist())
        return all(self.view.kid_index_of(rp) in kids for rp in others)

    def _at_level(
        self,
        ctx: PlacementContext,
        states: CycleState,
        rng: np.random.Generator,
        pool: _Pool,
        gone: np.ndarray,
    ) -> Preemption | None:
        """With the pool's ``gone`` out of the view: the best host among those
        that pass and hold some of them, after the reprieve (None: no host
        passes)."""
        scratch = InstanceTrace("preemption", self.view.size)
        wide = ctx
        if ctx.spec.group is not None:
            wide = self._without(ctx, [pool.candidates[k] for k in np.flatnonzero(gone)])
        placement = self.stages.candidates(wide, rng, scratch)
        passing = self.stages.filter(placement.hosts, wide, states, scratch)
        # Of the passing hosts holding some of ``gone``, those with the fewest.
        here = np.flatnonzero(gone & np.isin(pool.hosts, passing))
        counts = np.bincount(pool.hosts[here], minlength=self.view.size)
        holding = np.flatnonzero(counts)
        fewest = holding[np.lexsort((holding, counts[holding]))][:EXAMINED]
        by_host: dict[int, list[int]] = defaultdict(list)
        for k in here[np.isin(pool.hosts[here], fewest)]:
            by_host[int(pool.hosts[k])].append(int(k))
        hosts = [int(h) for h in fewest]
        at = {h: int(np.searchsorted(placement.hosts, h)) for h in hosts}
        found = [self._reprieve(h, by_host[h], pool, ctx, states, placement, at[h]) for h in hosts]
        best = [f for f in found if f is not None]
        return min(best, key=lambda p: p.key) if best else None

    def _reprieve(
        self,
        index: int,
        here: list[int],
        pool: _Pool,
        ctx: PlacementContext,
        states: CycleState,
        screened: Placement,
        position: int,
    ) -> Preemption | None:
        """The fewest of the pool's ``here`` (all out of the view, on host
        ``index``, which passed the level's screen: ``screened`` at
        ``position``) the host needs gone, giving each back the most
        important first; the view left as found."""
        candidates = pool.candidates
        evicted = set(here)
        order = sorted(here, key=lambda k: candidates[k].importance, reverse=True)
        passed: Placement | None = None
        try:
            for k in order:
                self._shift(pool, k, +1)
                evicted.discard(k)
                kept = self._passes(index, [candidates[j] for j in evicted], ctx, states)
                if kept is None:
                    self._shift(pool, k, -1)
                    evicted.add(k)
                else:
                    passed = kept
            victims = tuple(sorted((candidates[k] for k in evicted), key=lambda c: c.record.uuid))
            if len(evicted) < len(here):
                # The last victim given back passed with exactly these gone.
                passed = self._passes(index, victims, ctx, states) if passed is None else passed
            elif ctx.spec.group is None:
                # All must go: as the screen found (no group: nothing but
                # this host's own state decides).
                passed = screened.take(slice(position, position + 1))
            else:  # the group's members elsewhere counted as they are
                passed = self._passes(index, victims, ctx, states)
        finally:
            for k in here:
                if k not in evicted:
                    self._shift(pool, k, -1)
        if passed is None or not victims:
            return None
        allocations = passed.allocations(self.view, 0)
        selection = self.claims.selection(index, 0.0, allocations, ctx.spec)
        return Preemption(selection, victims, self._share(index, victims))

    def _shift(self, pool: _Pool, k: int, sign: int) -> None:
        """Give the pool's ``k`` back to the view (+1), or take it off (-1)."""
        self.view.shift_usage(pool.shift, k, sign)

    def _passes(
        self,
        index: int,
        victims: Sequence[Candidate],
        ctx: PlacementContext,
        states: CycleState,
    ) -> Placement | None:
        """The request's placement on host ``index`` as the view is now, with
        ``victims`` out of the group's members; None if a stage refuses it."""
        request = ctx.request
        assert request is not None  # set by the engine
        host = np.array([index])
        placement = place(self.view, request, host)
        if not len(placement):
            return None
        scratch = InstanceTrace("preemption", 1)
        kept = self.stages.filter(placement.hosts, self._without(ctx, victims), states, scratch)
        return placement if len(kept) else None

    def _without(self, ctx: PlacementContext, gone: Sequence[Candidate]) -> PlacementContext:
        """``ctx`` with the group members among ``gone`` taken off."""
        group = ctx.spec.group
        if group is None:
            return ctx
        members = Counter(ctx.group_members)
        for candidate in gone:
            host = candidate.held.member_host(group.uuid)
            if host is not None and members[host] > 0:
                members[host] -= 1
        return dataclasses.replace(ctx, group_members=members)

    def _share(self, index: int, victims: Sequence[Candidate]) -> float:
        """The victims' share of the host's capacity, summed over the classes
        they hold (of its root provider's capacity; a class only its children
        have counts by its amount)."""
        totals: Counter[str] = Counter()
        for victim in victims:
            for amounts in victim.held.allocations.values():
                totals.update(amounts)
        host = np.array([index])
        share = 0.0
        for rc, amount in sorted(totals.items()):
            capacity = float(self.view.of_class("capacity", rc, host)[0])
            share += amount / capacity if capacity > 0 else float(amount)
        return share


def _joined(shift: UsageShift, keep: np.ndarray, added: UsageShift) -> UsageShift:
    """The consumers of ``shift`` that ``keep`` marks, renumbered in order,
    followed by those of ``added``: as :meth:`HostView.usage_shift` would
    build them from both lists, without walking the kept ones again."""
    position = np.cumsum(keep) - 1
    count = int(keep.sum())
    parts = []
    for (owners, *columns), (new_owners, *new_columns) in zip(
        shift.parts, added.parts, strict=True
    ):
        picked = keep[owners]
        parts.append(
            (
                np.concatenate([position[owners[picked]], new_owners + count]),
                *(
                    np.concatenate([old[picked], new])
                    for old, new in zip(columns, new_columns, strict=True)
                ),
            )
        )
    return UsageShift(np.concatenate([shift.hosts[keep], added.hosts]), tuple(parts))
