"""The scheduling pipeline: from a request spec to claimed Selections.

:meth:`Engine.schedule` wires every stage, in order, in one function; each
stage's mechanics sit in a small method of its part: the candidate step,
the host filters and the weighers in :class:`~scheduler.engine.stages.Stages`,
the pick, the claim and the alternates in
:class:`~scheduler.engine.claims.Claims`. The stages read the
columnar :class:`~scheduler.engine.hostview.HostView`, so every per-host
question is an array operation; Python loops only run over the short final
list (the subset pick, claim fall-through and alternates).

Before any host is examined the request spec becomes a typed
:class:`~scheduler.resource_request.ResourceRequest` (refused with
InvalidRequest if malformed), and the enabled request filters
(:mod:`scheduler.request_filters`) add their constraints to it. The
candidate step (:mod:`scheduler.engine.placement`) then asks the hosts'
provider trees a range of rows at a time, and stops once it has
``max_placement_results`` candidates (see
:meth:`~scheduler.engine.stages.Stages.candidates`); disabled and down
hosts are removed before the cut.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import structlog

from scheduler import health
from scheduler.engine import reasons
from scheduler.engine.claims import Claims, Consumed, GroupChanged, no_valid_host
from scheduler.engine.context import CycleState, PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.plugins import FILTERS_GROUP, WEIGHERS_GROUP, build, load_plugins
from scheduler.engine.preemption import Preemption, Preemptor, may_preempt
from scheduler.engine.settings import EngineSettings
from scheduler.engine.shapecache import ShapeCache
from scheduler.engine.stages import TRACE_TOP as TRACE_TOP  # importable from here, as it was
from scheduler.engine.stages import Stages
from scheduler.exceptions import (
    NoValidHost,
)
from scheduler.explain import (
    HOST_FILTER,
    ExplainReport,
    InstanceTrace,
    StageHosts,
)
from scheduler.filters.base import BaseFilter
from scheduler.objects import RequestSpec, Selection
from scheduler.request_filters.availability_zone import AvailabilityZoneRequestFilter
from scheduler.request_filters.base import RequestFilter
from scheduler.request_filters.destination import DestinationRequestFilter
from scheduler.request_filters.disabled_computes import DisabledComputesRequestFilter
from scheduler.request_filters.image_type import ImageTypeRequestFilter
from scheduler.request_filters.isolated_aggregates import IsolatedAggregatesRequestFilter
from scheduler.request_filters.tenant_aggregates import TenantAggregatesRequestFilter
from scheduler.resource_request import ResourceRequest
from scheduler.store.base import ChangeFeed, InstanceStore, PlacementStore
from scheduler.weighers import profiles
from scheduler.weighers.base import BaseWeigher

LOG = structlog.get_logger(__name__)

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


class SchedulerStore(PlacementStore, ChangeFeed, InstanceStore, Protocol):
    """What the engine asks of the store: claims and their reads, the change
    feed its host view is kept by, and the instance records (the preemption
    search reads who may be evicted)."""


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
        # The stages, each a part of its own: the candidate step, the filters
        # and the weighers over the view; the pick, the claim and the alternates.
        self.stages = Stages(self.view, settings, self.filters, self.weighers)
        self.claims = Claims(self)
        #: The preemption search (what explain shows, and what a boot that
        #: finds no host claims with: :meth:`preemption`).
        self.preemptor = Preemptor(self.view, self.stages, self.claims)
        #: Repeated request shapes decided from what their last decision found.
        self.shapes = ShapeCache(self.stages) if settings.shape_cache else None

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
        chosen = self.settings.priority_classes.of(spec.flavor.extra_specs)
        try:
            result = self.schedule(
                request_id, spec, instance_uuids, False, claim=False, all_hosts=all_hosts
            )
        except NoValidHost as exc:
            # The instance that found no host: where evicting would place it.
            failed = exc.traces[-1].instance_uuid if exc.traces else None
            found = self.preemption(request_id, spec, failed) if failed else None
            return ExplainReport.build(
                request_id,
                spec,
                exc.traces,
                weighers,
                placeable=False,
                priority_class=chosen,
                preemption=found.explained() if found is not None else None,
            )
        return ExplainReport.build(
            request_id, spec, result.traces, weighers, placeable=True, priority_class=chosen
        )

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
                spec=spec, now=now, group_members=self.claims.group_members(spec), request=request
            )
            hosts = np.arange(self.view.size)
            state = host_filter.prepare(ctx)
            if state is None:
                return StageHosts(name, HOST_FILTER, self.stages.names(hosts), skipped=True)
            keep = host_filter.passes(self.view, hosts, ctx, state)
            return StageHosts(
                name,
                HOST_FILTER,
                self.stages.names(hosts[keep]),
                self.stages.removed(host_filter.reasons(self.view, hosts[~keep], ctx)),
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
        asked = self.view.asked()  # before the wait: see HostView.refresh
        with self._lock:
            now = self._clock()
            # Refresh first: every stage below reads the view. A view a few
            # changes stale costs at worst a claim conflict, never an
            # overcommit: the claim re-checks capacity atomically. A catch-up
            # that began after this call did (another request's, while this
            # one waited) is not repeated: the view holds every write made
            # before this call began.
            self.view.refresh(now, asked)
            # Validate: the typed resource request (flavor, overrides, traits,
            # aggregates, granular groups); a bad one is refused with
            # InvalidRequest before anything is chosen or claimed.
            ctx = self._context(spec, now, migration_uuid)
            # Each filter's and weigher's per-request state, prepared once for
            # all the request's instances (when first needed, see Stages.filter).
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
                        except GroupChanged:
                            continue
                        break
                    selections.append([primary, *alternates])
            except BaseException as exc:
                # All or nothing: release what this call claimed.
                self.claims.release(call.claimed)
                self.claims.unconsume(call.consumed)
                if isinstance(exc, NoValidHost):
                    # Every decision so far, the failed one last (for explain).
                    exc.traces = call.traces
                raise
            if not claim:
                self.claims.unconsume(call.consumed)
            return ScheduleResult(selections, call.traces)

    def _context(
        self, spec: RequestSpec, now: float, migration_uuid: str | None = None
    ) -> PlacementContext:
        """A request's context: its typed resource request (InvalidRequest if
        malformed) shaped by the request filters, and its group's members."""
        # Request filters turn policy into constraints, once per request
        # (each returns a new request; see _request_filters for the order).
        request = self._request_filters(spec.resource_request, spec)
        return PlacementContext(
            spec=spec,
            now=now,
            group_members=self.claims.group_members(spec),
            request=request,
            migration_uuid=migration_uuid,
            own_host=self.claims.own_host(spec, migration_uuid),
        )

    def preemption(
        self, request_id: str, spec: RequestSpec, instance_uuid: str
    ) -> Preemption | None:
        """Where one instance of ``spec`` would go by evicting lower-priority
        preemptible instances, and which (:mod:`scheduler.engine.preemption`);
        None when its class may not preempt or no eviction makes room.
        Nothing is claimed or evicted, the view is left as it was: the victims
        are as read, for :meth:`PlacementStore.claim_preempting`.

        :raises InvalidRequest: the request spec is malformed.
        """
        chosen = self.settings.priority_classes.of(spec.flavor.extra_specs)
        if chosen is None or not may_preempt(chosen):
            return None
        with self._lock:
            now = self._clock()
            self.view.refresh(now)
            ctx = self._context(spec, now)
            return self.preemptor.find(
                self.store, ctx, CycleState(ctx), _rng(request_id, instance_uuid), chosen.priority
            )

    def _decide(
        self, call: _Call, instance_uuid: str, position: int, instances: int, reread: bool
    ) -> tuple[int | None, Selection, list[Selection]]:
        """One instance's decision, every stage (see :meth:`schedule`): its view
        index, primary Selection and alternates. Its trace is the last of
        ``call.traces``; what it claims is added to ``call``.

        :raises GroupChanged: ``reread`` allowed, a claim was refused for the
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
            placement = self.stages.candidates(ctx, rng, trace)
            # Host filters, in configured order, on candidates only.
            candidates = self.stages.filter(placement.hosts, ctx, states, trace)
            # No host now: unless a re-driven request placed this
            # instance already, that is the answer.
            held = (
                self.store.get_consumer(instance_uuid) if claim and not len(candidates) else None
            )
            if held is not None and self.claims.on_a_down_host(held, now):
                # Its host died with the build (no result will come):
                # place it afresh, as if it had never been placed.
                self.claims.release_from_down_host(held)
                held = None
            if not len(candidates) and held is None:
                raise no_valid_host(trace)
            # Weighers rank the survivors (a shuffle first breaks ties at random).
            ranked = self.stages.weigh(candidates, ctx, states, rng, trace)
        if held is not None:
            index, primary = self.claims.held(held, ranked, trace, ctx.spec)
        else:
            # Pick one of the best host_subset_size, then claim it
            # atomically; a conflict (another worker got there
            # first) falls through to the next best, boundedly.
            # The claim is also the idempotency check: an instance
            # a re-driven request placed already is found by it,
            # never claimed twice.
            order = self.claims.pick(len(ranked), rng)
            index, primary, new = self.claims.claim_first(
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
            self.claims.alternates(ranked, index, placement, ctx, trace)
            if call.return_alternates
            else []
        )
        return index, primary, alternates

    def _request_filters(self, request: ResourceRequest, spec: RequestSpec) -> ResourceRequest:
        """The enabled request filters, in the order wired in ``__init__``;
        each may add one host constraint (a new request, never this one)."""
        for request_filter in self.request_filters:
            request = request_filter.apply(request, spec, self.view.aggregates)
        return request


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
