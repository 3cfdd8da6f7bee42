"""The stages of a decision that read the host view alone: the candidate step,
the host filters and the weighers, and the ranking of what they leave.

:class:`Stages` runs them for one :class:`~scheduler.engine.pipeline.Engine`
(which wires them, in order, in :meth:`~scheduler.engine.pipeline.Engine.schedule`)
and for its shape cache (:mod:`scheduler.engine.shapecache`, which ranks
with :meth:`Stages.ranked` so that ties fall as they fall uncached). Each
stage fills the instance's :class:`~scheduler.explain.InstanceTrace`: the
survivors per stage, the rejections per reason, the best weighed hosts, and,
in a dry run asked for all hosts, every stage's hosts by name
(:meth:`Stages.record`). Nothing here writes the store or the view; the
claim and the alternates are :mod:`scheduler.engine.claims`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler import rules
from scheduler.engine import reasons
from scheduler.engine.context import CycleState, PlacementContext
from scheduler.engine.placement import (
    CANDIDATES,
    HOSTS_UP,
    Placement,
    host_constraint_mask,
    place,
    sees_every_candidate,
    spans,
)
from scheduler.engine.ranking import Ranking
from scheduler.engine.reasons import OVER_LIMIT
from scheduler.explain import (
    CANDIDATE_STEP,
    HOST_FILTER,
    REQUEST_FILTER,
    InstanceTrace,
    StageHosts,
    WeighedHost,
    WeighedHostDetail,
    WeigherShare,
)

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings
    from scheduler.filters.base import BaseFilter
    from scheduler.weighers.base import BaseWeigher

#: How many of the best weighed hosts a trace keeps.
TRACE_TOP = 5


class Stages:
    """The candidate step, the host filters and the weighers of an engine, over
    its view (see the module doc)."""

    def __init__(
        self,
        view: HostView,
        settings: EngineSettings,
        filters: list[tuple[str, BaseFilter[Any]]],
        weighers: list[tuple[str, BaseWeigher[Any]]],
    ) -> None:
        self.view = view
        self.settings = settings
        #: The configured host filters and weighers, in order (the engine's own lists).
        self.filters = filters
        self.weighers = weighers

    def candidates(
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
                self.record(trace, stage, kind, np.concatenate(kept[k]), gone[k])
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
            self.record(trace, CANDIDATES, CANDIDATE_STEP, placement.hosts, out)
        return placement

    def filter(
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
                self.record(trace, name, HOST_FILTER, candidates, out, skipped)
        return candidates

    def weigh(
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
                        norm, mult = self.weigher_parts(weigher, candidates, ctx, state)
                        share = mult * norm
                        parts.append((norm, mult))
                    if state is not None:  # (None: a share of 0 everywhere adds nothing)
                        total += share
                    shares.append((name, share))
        return self.ranked(candidates, total, shares, parts, rng, trace)

    def ranked(
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

    def weigher_parts(
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

    def names(self, hosts: np.ndarray) -> tuple[str, ...]:
        """The names of ``hosts``: view indices, or a mask over the view."""
        names = self.view.names
        return tuple(names[i] for i in (np.flatnonzero(hosts) if hosts.dtype == bool else hosts))

    def removed(self, removed: Sequence[tuple[str, np.ndarray]]) -> dict[str, str]:
        """Host name -> reason, from (reason, hosts as for :meth:`_names`) pairs."""
        return {name: reason for reason, hosts in removed for name in self.names(hosts)}

    def record(
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
            StageHosts(stage, kind, self.names(kept), self.removed(removed), skipped)
        )
