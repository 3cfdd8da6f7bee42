"""The scheduling pipeline: from a request spec to claimed Selections.

:meth:`Engine.schedule` wires every stage, in order, in one function; each
stage's mechanics sit in a small method below it. The stages read the
columnar :class:`~scheduler.engine.hostview.HostView`, so every per-host
question is an array operation; Python loops only run over the short final
list (the subset pick, claim fall-through and alternates).

Before any host is examined the request spec becomes a typed
:class:`~scheduler.resource_request.ResourceRequest` (refused with
InvalidRequest if malformed), and the enabled request filters
(:mod:`scheduler.request_filters`) add their constraints to it. The
candidate step (:mod:`scheduler.engine.placement`) then asks the hosts'
provider trees a range of rows at a time, and stops once it has
``max_placement_results`` candidates (see :meth:`Engine._candidates`);
disabled and down hosts are removed before the cut.

A strict server group's members are read once per request; a claim the
store refuses for the group's policy (another worker placed a member since
that read) reads them again and, if they changed, decides that instance
anew with them, at most :data:`GROUP_REREADS` times, before the host counts
as refused.

An instance that already holds a claim (a re-driven request) reuses it,
never claims twice; unless the claim's host has stopped heartbeating, when
the claim is released and the instance placed afresh on a live host (its
build went down with the host, and nothing else would ever move it).

Every decision is reproducible: the random draws for one instance come from
a generator seeded with the request id and the instance uuid, so replaying
the same request on the same view gives the same hosts. Each instance leaves
an :class:`~scheduler.explain.InstanceTrace` (survivors per stage, rejections
per reason, the top weighed hosts with each weigher's share) for logs and
``explain``.

:meth:`Engine.explain` is the dry run of one request (nothing claimed): the
same stages, the same random draws for the same request id and instance
uuids, and, asked for all hosts, every stage's hosts by name and the whole
weighed list. Those names are recorded only then: the decisions of
``select_destinations`` count hosts, they never list them.
:meth:`Engine.run_filter` runs one host filter alone on every host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import structlog

from scheduler import health, rules
from scheduler.engine import reasons
from scheduler.engine.context import CycleState, PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.placement import (
    CANDIDATES,
    HOSTS_UP,
    Placement,
    host_constraint_mask,
    place,
    sees_every_candidate,
    spans,
)
from scheduler.engine.plugins import FILTERS_GROUP, WEIGHERS_GROUP, build, load_plugins
from scheduler.engine.ranking import Ranking
from scheduler.engine.settings import EngineSettings
from scheduler.engine.shapecache import ShapeCache
from scheduler.exceptions import (
    ClaimFailed,
    ConsumerConflict,
    GroupPolicyViolation,
    NoValidHost,
    ProviderNotFound,
    StoreError,
)
from scheduler.explain import (
    CANDIDATE_STEP,
    HOST_FILTER,
    REQUEST_FILTER,
    ExplainReport,
    InstanceTrace,
    StageHosts,
    WeighedHost,
    WeighedHostDetail,
    WeigherShare,
)
from scheduler.filters.base import BaseFilter
from scheduler.objects import AllocationRequest, RequestSpec, Selection
from scheduler.request_filters.availability_zone import AvailabilityZoneRequestFilter
from scheduler.request_filters.base import RequestFilter
from scheduler.request_filters.destination import DestinationRequestFilter
from scheduler.request_filters.disabled_computes import DisabledComputesRequestFilter
from scheduler.request_filters.image_type import ImageTypeRequestFilter
from scheduler.request_filters.isolated_aggregates import IsolatedAggregatesRequestFilter
from scheduler.request_filters.tenant_aggregates import TenantAggregatesRequestFilter
from scheduler.resource_request import ResourceRequest
from scheduler.store.base import ChangeFeed, Consumer, GroupClaim, PlacementStore
from scheduler.weighers import profiles
from scheduler.weighers.base import BaseWeigher

LOG = structlog.get_logger(__name__)

#: How many of the best weighed hosts a trace keeps.
TRACE_TOP = 5

# Rejection reasons of the engine's own stages live in scheduler.engine.reasons
# (filters bring their own); these names stay importable from here.
OVER_LIMIT = reasons.OVER_LIMIT
CLAIM_CONFLICT = reasons.CLAIM_CONFLICT
GROUP_CONFLICT = reasons.GROUP_CONFLICT
NOT_TRIED = reasons.NOT_TRIED
insufficient = reasons.insufficient

#: How many times one instance's decision is made again after a claim refused
#: for its group, whose members had changed since they were read (another
#: worker placed one between the read and the claim). With affinity the first
#: re-read pins the group's host, so one suffices unless members are deleted
#: meanwhile; with anti-affinity each re-read sees the racers' new members. A
#: bound so that a group changing under every claim still ends (each decision
#: costs about a millisecond, under the engine's lock); then the refused hosts
#: count as refused, as before.
GROUP_REREADS = 3

#: (request-filter switch, host filter) pairs that enforce one policy: with
#: the switch off, only that host filter keeps it (disabled hosts, zones).
_POLICY_FILTERS = (
    ("compute_status_filter", "ComputeFilter"),
    ("query_placement_for_availability_zone", "AvailabilityZoneFilter"),
)

#: (host index, allocations) of a claim accounted for in the view.
Consumed = tuple[int, Mapping[str, Mapping[str, int]]]


class SchedulerStore(PlacementStore, ChangeFeed, Protocol):
    """What the engine asks of the store: claims and their reads, and the change
    feed its host view is kept by."""


@dataclass(frozen=True)
class ScheduleResult:
    """Per instance, the Selections (primary first) and the trace of the decision."""

    selections: list[list[Selection]]
    traces: list[InstanceTrace]


class Engine:
    """Filters, weighs, picks and claims hosts for request specs.

    Thread-safe: one decision at a time (the worker serves RPCs on threads;
    decisions take about a millisecond, and a second process scales better
    than a second thread).
    """

    def __init__(
        self,
        store: SchedulerStore,
        settings: EngineSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self._clock = clock
        self.view = HostView(store, settings)
        self.request_filters: list[RequestFilter] = [
            cls(settings)
            for cls, on in (
                # An admin's forced host or requested destination first: it names
                # the few hosts the request may go to, so every other host is
                # counted under that reason and the later ones explain the rest.
                (DestinationRequestFilter, True),
                # Disabled computes next: the most common reason a host is out,
                # and the max_placement_results cut must never be spent on them.
                (DisabledComputesRequestFilter, settings.compute_status_filter),
                # The availability zone: a request names at most one, and it
                # removes whole aggregates of hosts.
                (AvailabilityZoneRequestFilter, settings.query_placement_for_availability_zone),
                # The project's own aggregates, when some are reserved for it.
                (TenantAggregatesRequestFilter, settings.limit_tenants_to_placement_aggregate),
                # Aggregates reserved for traits the request does not ask for;
                # after the groups are parsed, whose required traits it reads.
                (IsolatedAggregatesRequestFilter, settings.enable_isolated_aggregate_filtering),
                # The image's disk format, last: a trait every host usually has.
                (ImageTypeRequestFilter, settings.query_placement_for_image_type_support),
            )
            if on
        ]
        self.filters, self.weighers = build_plugins(settings)
        # A policy that both a request filter and a host filter can enforce
        # is not enforced at all when an operator turns off the one and
        # leaves the other out: say so at start-up.
        for option, host_filter in _POLICY_FILTERS:
            if not getattr(settings, option) and host_filter not in settings.enabled_filters:
                LOG.warning("policy_not_enforced", option=option, host_filter=host_filter)
        # A filter kept only so that configs naming it load: it is not needed.
        for name, configured in self.filters:
            if configured.NOT_NEEDED:
                LOG.warning("host_filter_not_needed", host_filter=name, why=configured.NOT_NEEDED)
        # Times each wait for it (scheduler_engine_wait_seconds), so a
        # decision's own time is told apart from its wait.
        self._lock = health.EngineLock()
        #: Repeated request shapes decided from what their last decision found.
        self.shapes = ShapeCache(self) if settings.shape_cache else None

    @contextlib.contextmanager
    def fresh_view(self) -> Iterator[HostView]:
        """The host view caught up with the store, held while the caller reads it
        (no decision runs meanwhile): for readers such as the metrics."""
        with self._lock:
            self.view.refresh(self._clock())
            yield self.view

    def select(
        self,
        ctx_request_id: str,
        spec: RequestSpec,
        instance_uuids: Sequence[str],
        return_alternates: bool = True,
        claim: bool = True,
        migration_uuid: str | None = None,
    ) -> list[list[Selection]]:
        """Per instance, the primary Selection (claimed) then its alternates.

        A move of one instance (a resize) names its ``migration_uuid``, the
        consumer holding the instance's source allocation: its group
        membership there is the instance's own (see :class:`PlacementContext`).

        :raises NoValidHost: some instance found no host; nothing this call
            claimed is left behind.
        """
        return self.schedule(
            ctx_request_id,
            spec,
            instance_uuids,
            return_alternates,
            claim,
            migration_uuid=migration_uuid,
        ).selections

    def explain(
        self,
        request_id: str,
        spec: RequestSpec,
        instance_uuids: Sequence[str],
        all_hosts: bool = False,
    ) -> ExplainReport:
        """The dry run of a request: where each instance would go and why,
        nothing claimed, the view left as it was.

        Given the request id and instance uuids of a real request, it draws
        every tie as :meth:`select` would on the same view (the draws are
        seeded by them). With ``all_hosts`` each instance's explanation holds
        its :class:`~scheduler.explain.InstanceHosts`: every stage's
        survivors and removed hosts by name, and the whole weighed list with
        each weigher's normalised value, multiplier and contribution.

        :raises InvalidRequest: the request spec is malformed.
        """
        # The weighers that run: a multiplier of 0 turns one off.
        weighers = {name: w.multiplier for name, w in self.weighers if w.multiplier}
        try:
            result = self.schedule(
                request_id, spec, instance_uuids, False, claim=False, all_hosts=all_hosts
            )
        except NoValidHost as exc:
            return ExplainReport.build(request_id, spec, exc.traces, weighers, placeable=False)
        return ExplainReport.build(request_id, spec, result.traces, weighers, placeable=True)

    def run_filter(self, name: str, spec: RequestSpec) -> StageHosts:
        """Host filter ``name`` alone on every host of the view, for ``spec``: the
        hosts it keeps and the reason of each it removes, as a stage of kind
        :data:`~scheduler.explain.HOST_FILTER`. Nothing else runs
        on the hosts (the request filters only shape the request the filter
        reads, as in :meth:`schedule`). A filter that is not configured is
        built with this engine's settings, so an operator can try one first.

        :raises UnknownPlugin: ``name`` is not a registered host filter.
        :raises InvalidRequest: the request spec is malformed.
        """
        configured = dict(self.filters)
        host_filter = configured.get(name) or build_filters(self.settings, [name])[0][1]
        with self._lock:
            now = self._clock()
            self.view.refresh(now)
            request = self._request_filters(spec.resource_request, spec)
            ctx = PlacementContext(
                spec=spec, now=now, group_members=self._group_members(spec), request=request
            )
            hosts = np.arange(self.view.size)
            state = host_filter.prepare(ctx)
            if state is None:
                return StageHosts(name, HOST_FILTER, self._names(hosts), skipped=True)
            keep = host_filter.passes(self.view, hosts, ctx, state)
            return StageHosts(
                name,
                HOST_FILTER,
                self._names(hosts[keep]),
                self._removed([(host_filter.REASON, hosts[~keep])]),
            )

    def schedule(
        self,
        ctx_request_id: str,
        spec: RequestSpec,
        instance_uuids: Sequence[str],
        return_alternates: bool = True,
        claim: bool = True,
        all_hosts: bool = False,
        migration_uuid: str | None = None,
    ) -> ScheduleResult:
        """:meth:`select` with the trace of every decision.

        With ``claim=False`` (a dry run) nothing is claimed and the view is
        left as it was. With ``all_hosts`` each trace also lists every stage's
        hosts by name (:attr:`InstanceTrace.detail`); a cost paid only then.
        """
        with self._lock:
            now = self._clock()
            # Refresh first: every stage below reads the view. A view a few
            # changes stale costs at worst a claim conflict, never an
            # overcommit: the claim re-checks capacity atomically.
            self.view.refresh(now)
            # Validate: the typed resource request (flavor, overrides, traits,
            # aggregates, granular groups); a bad one is refused with
            # InvalidRequest before anything is chosen or claimed.
            request = spec.resource_request
            # Request filters turn policy into constraints, once per request
            # (each returns a new request; see _request_filters for the order).
            request = self._request_filters(request, spec)
            ctx = PlacementContext(
                spec=spec,
                now=now,
                group_members=self._group_members(spec),
                request=request,
                migration_uuid=migration_uuid,
                own_host=self._own_host(spec, migration_uuid),
            )
            # Each filter's and weigher's per-request state, prepared once for
            # all the request's instances (when first needed, see _filter).
            call = _Call(ctx_request_id, ctx, CycleState(ctx), claim, return_alternates, all_hosts)
            selections: list[list[Selection]] = []
            try:
                for position, instance_uuid in enumerate(instance_uuids):
                    call.traces.append(InstanceTrace(instance_uuid, 0))  # replaced below
                    # A claim the store refused for the group, whose members
                    # changed since they were read, re-reads them and decides
                    # this instance again, at most GROUP_REREADS times.
                    for rereads in itertools.count():
                        try:
                            index, primary, alternates = self._decide(
                                call,
                                instance_uuid,
                                position,
                                len(instance_uuids),
                                reread=rereads < GROUP_REREADS,
                            )
                        except _GroupChanged:
                            continue
                        break
                    selections.append([primary, *alternates])
            except BaseException as exc:
                # All or nothing: release what this call claimed.
                self._release(call.claimed)
                self._unconsume(call.consumed)
                if isinstance(exc, NoValidHost):
                    # Every decision so far, the failed one last (for explain).
                    exc.traces = call.traces
                raise
            if not claim:
                self._unconsume(call.consumed)
            return ScheduleResult(selections, call.traces)

    def _decide(
        self, call: _Call, instance_uuid: str, position: int, instances: int, reread: bool
    ) -> tuple[int | None, Selection, list[Selection]]:
        """One instance's decision, every stage (see :meth:`schedule`): its view
        index, primary Selection and alternates. Its trace is the last of
        ``call.traces``; what it claims is added to ``call``.

        :raises _GroupChanged: ``reread`` allowed, a claim was refused for the
            group and its members (now in ``call.ctx``) changed since they were
            read: decide again.
        """
        ctx, states, claim = call.ctx, call.states, call.claim
        now = ctx.now
        rng = _rng(call.request_id, instance_uuid)
        trace = InstanceTrace(instance_uuid, self.view.size, position, instances)
        if call.all_hosts:
            trace.by_name = []
        call.traces[-1] = trace
        # A repeated shape: the stages below, answered from what the last
        # decision of its shape found, re-asked where the view changed since
        # (scheduler.engine.shapecache); the same candidates, weights and trace.
        cached = (
            self.shapes.rank(ctx.spec, ctx, states, rng, trace)
            if self.shapes is not None
            and ShapeCache.cacheable(ctx.spec, self.settings.randomize_candidates, call.all_hosts)
            else None
        )
        held = None
        if cached is not None:
            placement, ranked = cached
        else:
            # Candidates: host constraints, liveness, then the provider
            # trees with room for every request group; what placement
            # answers. Disabled and down hosts go before the cut, and
            # the cut bounds all that follows.
            placement = self._candidates(ctx, rng, trace)
            # Host filters, in configured order, on candidates only.
            candidates = self._filter(placement.hosts, ctx, states, trace)
            # No host now: unless a re-driven request placed this
            # instance already, that is the answer.
            held = (
                self.store.get_consumer(instance_uuid) if claim and not len(candidates) else None
            )
            if held is not None and self._on_a_down_host(held, now):
                # Its host died with the build (no result will come):
                # place it afresh, as if it had never been placed.
                self._release_from_down_host(held)
                held = None
            if not len(candidates) and held is None:
                raise self._no_valid_host(trace)
            # Weighers rank the survivors (a shuffle first breaks ties at random).
            ranked = self._weigh(candidates, ctx, states, rng, trace)
        if held is not None:
            index, primary = self._held(held, ranked, trace, ctx.spec)
        else:
            # Pick one of the best host_subset_size, then claim it
            # atomically; a conflict (another worker got there
            # first) falls through to the next best, boundedly.
            # The claim is also the idempotency check: an instance
            # a re-driven request placed already is found by it,
            # never claimed twice.
            order = self._pick(len(ranked), rng)
            index, primary, new = self._claim(
                instance_uuid,
                ranked,
                order,
                placement,
                ctx,
                claim,
                trace,
                reread,
            )
            if new and index is not None:
                # Consume in the view and count the group member,
                # so the next instance of this request sees both.
                allocations = primary.allocation_request.allocations
                self.view.consume_allocation(index, allocations)
                call.consumed.append((index, allocations))
                ctx.group_members[primary.host] += 1
                if claim:
                    call.claimed.append(instance_uuid)
        trace.host = primary.host
        # Alternates last: they must have room for this instance in
        # the view as it is after the primary and earlier instances.
        alternates = (
            self._alternates(ranked, index, placement, ctx, trace)
            if call.return_alternates
            else []
        )
        return index, primary, alternates

    # --- stages ---------------------------------------------------------------------

    def _group_members(self, spec: RequestSpec) -> Counter[str]:
        if spec.group is None:
            return Counter()
        return Counter(self.store.group_hosts(spec.group.uuid))

    def _reread_group(self, ctx: PlacementContext, host: str) -> None:
        """After a claim on ``host`` refused for the group: its members as the
        store has them now, into ``ctx``. They include this request's earlier
        instances (claimed already), so nothing the request placed is lost.

        :raises _GroupChanged: they changed since they were read.
        """
        fresh = self._group_members(ctx.spec)
        if +fresh == +ctx.group_members:
            return  # not a change of members: the host is refused as it stands
        LOG.info(
            "group_members_reread",
            group_uuid=ctx.spec.group.uuid if ctx.spec.group else None,
            refused_host=host,
            hosts=len(fresh),
        )
        ctx.group_members = fresh
        raise _GroupChanged

    def _own_host(self, spec: RequestSpec, migration_uuid: str | None) -> str | None:
        """Where the moved instance's own membership of its group is held (by its migration)."""
        if spec.group is None or migration_uuid is None:
            return None
        held = self.store.get_consumer(migration_uuid)
        return held.member_host(spec.group.uuid) if held is not None else None

    def _request_filters(self, request: ResourceRequest, spec: RequestSpec) -> ResourceRequest:
        """The enabled request filters, in the order wired in ``__init__``;
        each may add one host constraint (a new request, never this one)."""
        for request_filter in self.request_filters:
            request = request_filter.apply(request, spec, self.view.aggregates)
        return request

    def _candidates(
        self, ctx: PlacementContext, rng: np.random.Generator, trace: InstanceTrace
    ) -> Placement:
        """Hosts whose provider trees can take the request, at most
        ``max_placement_results``, with where each request group lands.

        The hosts are examined a range of rows at a time (see
        :func:`~scheduler.engine.placement.spans`) and the scan stops once
        the cut is reached, so a decision's cost follows
        ``max_placement_results``, not the size of the cloud. The
        hosts kept are those the whole scan would keep: the first that can
        take the request in store order, or, randomised, in store order from
        a host drawn with the decision's seed, going round (kube-scheduler's
        rotating start). Hosts left unexamined are counted as beyond the cut;
        each stage counts the hosts examined. A dry run asked for all hosts
        examines every host, so that it can name each.
        """
        view, request = self.view, ctx.request
        assert request is not None  # set by schedule()
        by_name = trace.by_name is not None
        limit = None if sees_every_candidate(ctx.spec) else self.settings.max_placement_results
        size = view.size
        start = 0
        if limit is not None and self.settings.randomize_candidates and size:
            start = int(rng.integers(size))
        # The request filters' constraints on the compute node, in their
        # order, then hosts that stopped heartbeating: all before the cut.
        stages = [
            *((c.stage or c.reason, c.reason, REQUEST_FILTER) for c in request.host_constraints),
            (HOSTS_UP, reasons.HOST_DOWN, CANDIDATE_STEP),
        ]
        survivors = [0] * len(stages)
        kept: list[list[np.ndarray]] = [[] for _ in stages]  # by name only
        gone: list[list[tuple[str, np.ndarray]]] = [[] for _ in stages]
        out: list[tuple[str, np.ndarray]] = []
        parts: list[Placement] = []
        found = examined = 0
        down_time = self.settings.service_down_time
        for rows in spans(size, start, None if by_name else limit):
            alive = np.ones(rows.stop - rows.start, dtype=bool)
            masks = [host_constraint_mask(view, c, rows) for c in request.host_constraints]
            masks.append(rules.is_up(ctx.now, view.last_seen[rows], down_time))
            for k, ok in enumerate(masks):
                removed = alive & ~ok
                trace.reject(stages[k][1], int(np.count_nonzero(removed)))
                alive &= ok
                survivors[k] += int(np.count_nonzero(alive))
                if by_name:
                    kept[k].append(rows.start + np.flatnonzero(alive))
                    gone[k].append((stages[k][1], rows.start + np.flatnonzero(removed)))
            # Traits, aggregates and capacity per request group, over the trees.
            part = place(
                view,
                request,
                rows,
                alive=alive,
                reject=trace.reject,
                removed=out.append if by_name else None,
            )
            parts.append(part)
            found += len(part)
            examined += rows.stop - rows.start
            if limit is not None and found >= limit:
                break
        for k, (stage, _reason, kind) in enumerate(stages):
            trace.survived(stage, survivors[k])
            if by_name:
                self._record(trace, stage, kind, np.concatenate(kept[k]), gone[k])
        placement = Placement.joined(parts)
        if start:  # in scan order: from the drawn host, going round
            placement = placement.take(np.argsort((placement.hosts - start) % size, kind="stable"))
        over = 0 if limit is None else max(len(placement) - limit, 0)
        if over or examined < size:
            trace.reject(OVER_LIMIT, over + size - examined)
            if by_name:
                out.append((OVER_LIMIT, placement.hosts[limit:]))
            placement = placement.take(slice(0, limit))
        if start:  # ascending again: claims and alternates look hosts up by bisection
            placement = placement.take(np.argsort(placement.hosts))
        trace.survived(CANDIDATES, len(placement))
        if by_name:
            self._record(trace, CANDIDATES, CANDIDATE_STEP, placement.hosts, out)
        return placement

    def _filter(
        self,
        candidates: np.ndarray,
        ctx: PlacementContext,
        states: CycleState,
        trace: InstanceTrace,
    ) -> np.ndarray:
        """The candidates every filter keeps; a filter whose state for the request
        is None has nothing to check, and is skipped."""
        by_name = trace.by_name is not None
        for name, host_filter in self.filters:
            out: list[tuple[str, np.ndarray]] = []
            skipped = False
            if len(candidates) and (state := states.of(host_filter)) is not None:
                keep = host_filter.passes(self.view, candidates, ctx, state)
                removed = len(candidates) - int(np.count_nonzero(keep))
                trace.reject(host_filter.REASON, removed)
                if by_name:
                    out.append((host_filter.REASON, candidates[~keep]))
                if removed:  # (a filter that keeps every host: nothing to copy)
                    candidates = candidates[keep]
            else:
                skipped = bool(len(candidates))
            trace.survived(name, len(candidates))
            if by_name:
                self._record(trace, name, HOST_FILTER, candidates, out, skipped)
        return candidates

    def _weigh(
        self,
        candidates: np.ndarray,
        ctx: PlacementContext,
        states: CycleState,
        rng: np.random.Generator,
        trace: InstanceTrace,
    ) -> Ranking:
        """The candidates weighed, best first."""
        total = np.zeros(len(candidates))
        shares: list[tuple[str, np.ndarray]] = []
        # Asked for all hosts: each weigher's normalised values and multipliers.
        parts: list[tuple[np.ndarray, np.ndarray]] | None = (
            [] if trace.by_name is not None else None
        )
        if len(candidates) > 1:  # one host left: nothing to weigh
            # Several weighers read the same columns of the candidates
            # (capacity, usage): each is gathered once.
            with self.view.gathering(candidates):
                for name, weigher in self.weighers:
                    if not weigher.multiplier:
                        continue
                    state = states.of(weigher)
                    if parts is None:
                        share = weigher.weigh(self.view, candidates, ctx, state)
                    else:  # the same product, its factors kept for explain
                        norm, mult = self._weigher_parts(weigher, candidates, ctx, state)
                        share = mult * norm
                        parts.append((norm, mult))
                    if state is not None:  # (None: a share of 0 everywhere adds nothing)
                        total += share
                    shares.append((name, share))
        return self._ranked(candidates, total, shares, parts, rng, trace)

    def _ranked(
        self,
        candidates: np.ndarray,
        total: np.ndarray,
        shares: Sequence[tuple[str, np.ndarray]],
        parts: Sequence[tuple[np.ndarray, np.ndarray]] | None,
        rng: np.random.Generator,
        trace: InstanceTrace,
    ) -> Ranking:
        """The weighed candidates ranked (ties drawn with ``rng``), the best in
        ``trace`` with each weigher's share (and, given ``parts``, all of them)."""
        settings = self.settings
        head = (
            max(settings.host_subset_size, settings.claim_attempts + 1, TRACE_TOP)
            + settings.max_attempts
        )
        ranking = Ranking(candidates, total, rng, head)
        trace.top = [
            WeighedHost(
                self.view.names[candidates[k]],
                float(total[k]),
                {name: float(share[k]) for name, share in shares},
            )
            for k in ranking.order(TRACE_TOP)
        ]
        if parts is not None:
            names = self.view.names
            trace.weighed = [
                WeighedHostDetail(
                    names[candidates[k]],
                    float(total[k]),
                    {
                        name: WeigherShare(float(norm[k]), float(mult[k]), float(share[k]))
                        for (name, share), (norm, mult) in zip(shares, parts, strict=True)
                    },
                )
                for k in ranking.order()
            ]
        return ranking

    def _weigher_parts(
        self,
        weigher: BaseWeigher[Any],
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A weigher's normalised values and (signed) multipliers per candidate,
        whose product is what its ``weigh`` gives (explain only)."""
        normalised = weigher.scaled(self.view, candidates, ctx, state)
        multipliers = np.broadcast_to(
            weigher.SIGN * np.asarray(weigher.multipliers(self.view, candidates), dtype=float),
            len(candidates),
        )
        return normalised, multipliers

    def _pick(self, count: int, rng: np.random.Generator) -> list[int]:
        """Positions in the ranking to claim in turn: one drawn from the best
        ``host_subset_size``, then the others best first, ``claim_attempts`` in all.
        """
        first = int(rng.integers(min(self.settings.host_subset_size, count)))
        attempts = self.settings.claim_attempts
        return [first, *(p for p in range(min(count, attempts + 1)) if p != first)][:attempts]

    def _claim(
        self,
        instance_uuid: str,
        ranked: Ranking,
        order: list[int],
        placement: Placement,
        ctx: PlacementContext,
        claim: bool,
        trace: InstanceTrace,
        reread: bool = False,
    ) -> tuple[int | None, Selection, bool]:
        """Claim the first host of ``order`` the store accepts.

        Returns its view index (None for a host not in the view), its
        Selection, and whether this call claimed it: False when the instance
        held allocations already (a re-drive, or a racing duplicate of this
        request), which are then reused, never claimed twice.

        :raises _GroupChanged: ``reread`` allowed, the store refused a claim
            for the group's policy and the group's members, read again into
            ``ctx``, are not those the ranking was made with (another worker
            placed one meanwhile): the ranking is stale, decide again.
        """
        for position in order:
            index = ranked.host(position)
            at = int(np.searchsorted(placement.hosts, index))
            selection = self._selection(
                index, ranked.weight(position), placement.allocations(self.view, at), ctx.spec
            )
            if not claim:
                return index, selection, True
            try:
                new = self._claim_one(instance_uuid, selection, ctx)
            except ConsumerConflict:
                held = self.store.get_consumer(instance_uuid)
                if held is None:  # released again meanwhile: try the next host
                    trace.conflicts.append((selection.host, ConsumerConflict.__name__))
                    continue
                return (*self._held(held, ranked, trace, ctx.spec), False)
            except (ClaimFailed, ProviderNotFound) as exc:
                LOG.info(
                    "claim_conflict",
                    instance_uuid=instance_uuid,
                    host=selection.host,
                    error=type(exc).__name__,
                )
                health.CLAIM_CONFLICTS.inc()
                if isinstance(exc, GroupPolicyViolation) and reread:
                    self._reread_group(ctx, selection.host)
                trace.conflicts.append((selection.host, type(exc).__name__))
                if isinstance(exc, ClaimFailed):  # re-read the tree's providers it asked
                    for provider_uuid in selection.allocation_request.allocations:
                        self.view.refresh_provider(provider_uuid)
                continue
            if not new:  # held exactly this already
                trace.reused = True
                LOG.info("allocation_reused", instance_uuid=instance_uuid, host=selection.host)
            return index, selection, new
        # Say why the claims failed: a strict group policy the store enforced
        # (another worker placed a member there first) or plain capacity.
        for kind, count in Counter(kind for _, kind in trace.conflicts).items():
            trace.reject(
                GROUP_CONFLICT if kind == GroupPolicyViolation.__name__ else CLAIM_CONFLICT, count
            )
        trace.reject(NOT_TRIED, len(ranked) - len(trace.conflicts))
        raise self._no_valid_host(trace)

    def _alternates(
        self,
        ranked: Ranking,
        primary: int | None,
        placement: Placement,
        ctx: PlacementContext,
        trace: InstanceTrace,
    ) -> list[Selection]:
        """Up to ``max_attempts - 1`` other hosts, best first, each with room now."""
        wanted = self.settings.max_attempts - 1
        if not wanted:
            return []
        assert ctx.request is not None  # set by schedule()
        out: list[Selection] = []
        if not trace.conflicts:
            # Since the candidate step placed the request, the view changed on
            # the primary's providers only (this instance's claim), so its
            # placement still holds for every other host.
            best = ranked.hosts(wanted + 1)
            for position in np.flatnonzero(best != (-1 if primary is None else primary))[:wanted]:
                index = int(best[position])
                at = int(np.searchsorted(placement.hosts, index))
                out.append(
                    self._selection(
                        index,
                        ranked.weight(int(position)),
                        placement.allocations(self.view, at),
                        ctx.spec,
                    )
                )
            return out
        hosts, weights = ranked.hosts(), ranked.total[ranked.order()]
        positions = np.flatnonzero(hosts != (-1 if primary is None else primary))
        # Hosts were re-read after refused claims: place the request again on
        # the best trees as the view stands now.
        # Best first, in growing chunks: usually the first few still fit.
        start, chunk = 0, 4 * wanted
        while len(out) < wanted and start < len(positions):
            part = positions[start : start + chunk]
            fresh = place(self.view, ctx.request, hosts[part])
            for at in range(min(wanted - len(out), len(fresh))):
                index = int(fresh.hosts[at])
                weight = float(weights[part[np.flatnonzero(hosts[part] == index)[0]]])
                out.append(
                    self._selection(index, weight, fresh.allocations(self.view, at), ctx.spec)
                )
            start, chunk = start + chunk, chunk * 4
        return out

    # --- helpers --------------------------------------------------------------------

    def _names(self, hosts: np.ndarray) -> tuple[str, ...]:
        """The names of ``hosts``: view indices, or a mask over the view."""
        names = self.view.names
        return tuple(names[i] for i in (np.flatnonzero(hosts) if hosts.dtype == bool else hosts))

    def _removed(self, removed: Sequence[tuple[str, np.ndarray]]) -> dict[str, str]:
        """Host name -> reason, from (reason, hosts as for :meth:`_names`) pairs."""
        return {name: reason for reason, hosts in removed for name in self._names(hosts)}

    def _record(
        self,
        trace: InstanceTrace,
        stage: str,
        kind: str,
        kept: np.ndarray,
        removed: Sequence[tuple[str, np.ndarray]],
        skipped: bool = False,
    ) -> None:
        """One stage's hosts by name, in a trace that asked for them."""
        assert trace.by_name is not None
        trace.by_name.append(
            StageHosts(stage, kind, self._names(kept), self._removed(removed), skipped)
        )

    def _selection(
        self,
        index: int,
        weight: float,
        allocations: Mapping[str, Mapping[str, int]],
        spec: RequestSpec,
    ) -> Selection:
        """A destination; its provider is the host's root, its allocation request
        lists every provider of the tree the request takes from."""
        name = self.view.names[index]
        return Selection(
            host=name,
            node=name,
            provider_uuid=self.view.uuids[index],
            allocation_request=AllocationRequest(allocations, spec.project_id, spec.user_id),
            weight=weight,
            availability_zone=self.view.zone_of(index, spec.availability_zone),
        )

    def _held(
        self,
        held: Consumer,
        ranked: Ranking,
        trace: InstanceTrace,
        spec: RequestSpec,
    ) -> tuple[int | None, Selection]:
        """The Selection of allocations the instance already holds (never re-claimed)."""
        trace.reused = True
        provider_uuid = next(
            (rp for rp in held.allocations if self.view.index_of_uuid(rp) is not None),
            next(iter(held.allocations)),
        )
        index = self.view.index_of_uuid(provider_uuid)
        if index is not None:
            host = self.view.names[index]
        else:  # not a host of the view (a nested provider)
            host = held.host or self.store.get_provider(provider_uuid).name
        weight = 0.0
        if index is not None and (found := ranked.weight_of(index)) is not None:
            weight = found
        request = AllocationRequest(held.allocations, held.project_id, held.user_id)
        at_host = index if index is not None else self.view.index_of(host)
        zone = self.view.zone_of(at_host, spec.availability_zone) if at_host is not None else None
        LOG.info("allocation_reused", instance_uuid=held.uuid, host=host)
        return index, Selection(
            host=host,
            node=host,
            provider_uuid=provider_uuid,
            allocation_request=request,
            weight=weight,
            availability_zone=zone,
        )

    def _claim_one(self, instance_uuid: str, selection: Selection, ctx: PlacementContext) -> bool:
        """Claim ``selection`` for the instance: True when written, False when
        the instance held exactly this already. A claim it holds elsewhere, on
        a host that has stopped heartbeating, is dropped and the claim made
        again; any other claim it holds is a :class:`ConsumerConflict`."""

        def claim() -> bool:
            return self.store.claim(
                instance_uuid,
                selection.allocation_request,
                GroupClaim.for_spec(ctx.spec, selection.host, ctx.migration_uuid),
            )

        try:
            return claim()
        except ConsumerConflict:
            held = self.store.get_consumer(instance_uuid)
            if held is None or not self._on_a_down_host(held, ctx.now):
                raise
            # Its host died with the build (no result will come): place it
            # afresh, as if it had never been placed.
            self._release_from_down_host(held)
            return claim()

    def _on_a_down_host(self, held: Consumer, now: float) -> bool:
        """Whether the host of a claim the instance holds has stopped heartbeating."""
        for provider_uuid in held.allocations:
            index = self.view.index_of_uuid(provider_uuid)
            if index is not None:
                return not rules.is_up(
                    now, float(self.view.last_seen[index]), self.settings.service_down_time
                )
        return False

    def _release_from_down_host(self, held: Consumer) -> None:
        """Drop a re-driven instance's claim on a host that is down, so it is placed
        again on a live one (the conductor re-drives a boot whose build never
        reported back; re-using the claim would send it to the dead host again)."""
        host = next(
            (
                self.view.names[i]
                for rp in held.allocations
                if (i := self.view.index_of_uuid(rp)) is not None
            ),
            held.host,
        )
        self.store.release(held.uuid)
        LOG.warning("allocation_on_down_host_released", instance_uuid=held.uuid, host=host)

    def _no_valid_host(self, trace: InstanceTrace) -> NoValidHost:
        details = trace.details()
        LOG.info("no_valid_host", instance_uuid=trace.instance_uuid, details=details)
        return NoValidHost(details=details, reasons=trace.reasons)

    def _release(self, consumers: Sequence[str]) -> None:
        for consumer in consumers:
            try:
                self.store.release(consumer)
            except StoreError:
                # Keep releasing the others; the caller gets the original error.
                LOG.exception("release_failed", instance_uuid=consumer)

    def _unconsume(self, consumed: Sequence[Consumed]) -> None:
        for index, allocations in consumed:
            self.view.consume_allocation(index, allocations, sign=-1)


class _GroupChanged(Exception):
    """A claim was refused for the group, whose members changed since they
    were read (the new ones are in the context): decide the instance again."""


@dataclass
class _Call:
    """One :meth:`Engine.schedule` call, as its instances' decisions share it:
    what it claimed and consumed in the view (released and given back if it
    fails) and each instance's trace."""

    request_id: str
    ctx: PlacementContext
    states: CycleState
    claim: bool
    return_alternates: bool
    all_hosts: bool
    claimed: list[str] = field(default_factory=list)
    consumed: list[Consumed] = field(default_factory=list)
    traces: list[InstanceTrace] = field(default_factory=list)


def build_plugins(
    settings: EngineSettings,
) -> tuple[list[tuple[str, BaseFilter[Any]]], list[tuple[str, BaseWeigher[Any]]]]:
    """The configured host filters and weighers, in order, each with its own
    arguments (its options), checked here, once.

    :raises UnknownPlugin: a configured name is not a registered plugin.
    :raises ValueError: an option is out of its bounds (one line, naming it).
    """
    filters = build_filters(settings, settings.enabled_filters)
    # The weigher profile adds its weighers and its option defaults.
    names, options = profiles.resolve(settings)
    profiled = dataclasses.replace(settings, plugin_options=options)
    weighers: list[tuple[str, BaseWeigher[Any]]] = [
        (name, build(cls, profiled))
        for name, cls in load_plugins(
            WEIGHERS_GROUP,
            names,
            BaseWeigher,  # type: ignore[type-abstract]
        )
    ]
    return filters, weighers


def build_filters(
    settings: EngineSettings, names: Sequence[str]
) -> list[tuple[str, BaseFilter[Any]]]:
    """The host filters ``names``, in order, each with its arguments.

    :raises UnknownPlugin: a name is not a registered host filter.
    """
    return [
        (name, build(cls, settings))
        for name, cls in load_plugins(
            FILTERS_GROUP,
            names,
            BaseFilter,  # type: ignore[type-abstract]
        )
    ]


def _rng(request_id: str, instance_uuid: str) -> np.random.Generator:
    """The random source of one instance's decision, replayable from its ids."""
    digest = hashlib.blake2b(f"{request_id}/{instance_uuid}".encode(), digest_size=16).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))
