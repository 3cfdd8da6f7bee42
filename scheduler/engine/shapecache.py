"""The shape cache: a repeated request shape decided from what the last decision
of that shape found, patched where the view changed since.

A real request stream repeats a handful of shapes (flavor, extra specs,
image, zone, project): each decision of a shape asks the same questions of
mostly the same hosts. :class:`ShapeCache` keeps, per shape, the answer of
every host the candidate step examined: the first reason that removed it
(a host constraint, liveness, the placement), or where the request lands on
its tree; for the hosts within the ``max_placement_results`` cut, the first
host filter that removed it; for the hosts that passed the filters, each
weigher's raw value. A decision of that shape then re-asks only the hosts
whose rows changed since (the view's change log, see
:meth:`~scheduler.engine.hostview.HostView.changed_since`) and those whose
liveness the clock turned, extends or shortens the scan to where the
uncached scan would stop, runs the filters and weighers on the hosts that
joined the cut, and scales the raw values across the candidates as
:meth:`BaseWeigher.weigh <scheduler.weighers.base.BaseWeigher.weigh>`
does. The ranking, the pick, the claim and the alternates are the
engine's own, with the same random draws: every decision is the one the
uncached engine makes on the same view (same hosts, alternates, weights,
and the same trace: stage survivors and rejections per reason), which
``tests/unit/engine/test_shape_cache.py`` checks decision by decision.

What that rests on:

* A host's answer at every stage depends on its own rows and the request
  alone (the candidate step's and the filters' contract), and a weigher's
  raw value on the host's rows, the request and the weigher's state. A
  filter's or weigher's ``prepare`` reads the request and the settings
  only, except a weigher marked :attr:`~scheduler.weighers.base.BaseWeigher.LEARNS`
  (the headroom weigher learns the largest flavor from the stream): that
  one is prepared as the uncached engine prepares it, and its raw values
  are worked out again when its state differs from the cached one.
* Liveness moves with the clock, with no change logged: each shape keeps
  the earliest moment a host it examined could turn (up to down, or a host
  seen in the future coming into the window) and re-asks liveness of them
  all from then. ComputeFilter's own liveness test agrees with the
  candidate step's (same clock, same window), so its answer on a candidate
  depends on the disabled flag alone.
* Anything that changes the view's shape (a load, a host added, an
  aggregate changed, a new class, trait or aggregate bit) voids every
  shape (:attr:`HostView.epoch`), and so does a change log that no longer
  reaches back to a shape's version.

Not cached (the engine decides them uncached, as before): requests in a
server group or with host hints (their filters read the group's members,
which change between instances), requests naming their hosts (forced
hosts, a requested destination), a randomised cut
(``randomize_allocation_candidates``), dry runs asked for all hosts, and a
decision that finds no candidate after the filters (the uncached path then
decides it, with its NoValidHost account and re-driven claims). A shape's
first request is decided uncached too: a shape is kept from its second
request on, so a stream of shapes never repeated pays only for their keys.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler import rules
from scheduler.engine import reasons
from scheduler.engine.context import CycleState, PlacementContext
from scheduler.engine.placement import (
    CANDIDATES,
    HOSTS_UP,
    ROOT,
    Placement,
    Slot,
    host_constraint_mask,
    place,
    sees_every_candidate,
    slot_resources,
    spans,
)
from scheduler.engine.ranking import Ranking
from scheduler.explain import InstanceTrace, StageCount
from scheduler.weighers import base as weighers_base

if TYPE_CHECKING:
    from scheduler.engine.stages import Stages
    from scheduler.objects import RequestSpec
    from scheduler.weighers.base import BaseWeigher

#: How many shapes are kept (the least recently decided goes first).
MAX_SHAPES = 32
#: How many request specs' keys are remembered (a caller that asks again with
#: the same spec object pays for its key once).
MAX_SPECS = 256
#: A host's code once it passed a stage (the candidate step, or every filter).
PASSED = -1
#: A filter code not worked out yet (the host has not been in the cut since).
UNKNOWN = -2
#: Liveness is re-asked this long before the earliest moment it could turn
#: (seconds), so that rounding never lets a turn go unseen.
_MARGIN = 1e-3


def shape_key(spec: RequestSpec) -> Hashable:
    """Everything of ``spec`` but its instance count, as one hashable value."""
    return tuple(
        _frozen(getattr(spec, f.name))
        for f in dataclasses.fields(spec)
        if f.name != "num_instances"
    )


def _frozen(value: Any) -> Hashable:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            *(_frozen(getattr(value, f.name)) for f in dataclasses.fields(value)),
        )
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = tuple(_frozen(v) for v in value)
        return tuple(sorted(items, key=repr)) if isinstance(value, (set, frozenset)) else items
    return value


#: No hosts.
_NONE = np.zeros(0, dtype=np.int64)


def _member(rows: np.ndarray, sorted_rows: np.ndarray) -> np.ndarray:
    """Mask of ``rows`` found in ``sorted_rows`` (ascending)."""
    if not len(sorted_rows):
        return np.zeros(len(rows), dtype=bool)
    at = np.searchsorted(sorted_rows, rows).clip(max=len(sorted_rows) - 1)
    return sorted_rows[at] == rows


@dataclass(frozen=True)
class _Outline:
    """What a decision of a shape reads until a host's answer changes: the cut,
    the candidates after the filters, their placement, and the trace's stage
    survivors and rejections."""

    cut: np.ndarray
    candidates: np.ndarray
    placement: Placement
    stages: tuple[Any, ...]
    reasons: Mapping[str, int]


def _within(bounds: tuple[float, float], before: np.ndarray, after: np.ndarray) -> bool:
    """Whether replacing values ``before`` by ``after`` leaves the candidates'
    scaling ``bounds`` (low, high) as they are: no value that was a bound goes,
    and no new value passes one. BY_MAX's bounds are (0, top) over values
    floored at 0, which this answers alike (a value at or below 0 is never top
    unless top is 0, and then any value above 0 moves it)."""
    low, high = bounds
    return bool(
        len(after) == 0
        or (
            (before > low).all()
            and (before < high).all()
            and (after > low).all()
            and (after < high).all()
        )
    )


@dataclass
class _Weights:
    """The weighers' view of one set of candidates: per weigher (in the order of
    the weighers that run) the raw values over the candidates, their bounds,
    the multiplier, and the shares; and the total."""

    candidates: np.ndarray
    count: int
    values: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    bounds: list[Any] = dataclasses.field(default_factory=list)
    mult: list[Any] = dataclasses.field(default_factory=list)
    share: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    total: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.values = [None] * self.count
        self.bounds = [None] * self.count
        self.mult = [None] * self.count
        self.share = [None] * self.count

    def rescale(
        self,
        w: int,
        weigher: BaseWeigher[Any],
        state: Any,
        raw: np.ndarray,
        new: np.ndarray,
        at: np.ndarray,
    ) -> bool:
        """Weigher ``w``'s shares of the candidates (``weigher``, prepared as
        ``state``) brought up to date with the raw values of hosts ``new`` (at
        positions ``at``); True when all of them were worked out again."""
        n = len(self.candidates)
        sign_mult = weigher.SIGN * self.mult[w]
        if state is None:  # nothing to weigh: 0 everywhere, as Stages.weigh has it
            if self.share[w] is None:
                self.share[w] = sign_mult * np.zeros(n)
                return True
            return False
        scaling = weigher.SCALING
        values = self.values[w]
        if self.share[w] is not None and values is not None:
            before = values[at]
            values[at] = raw[new]
            bounds = self.bounds[w]
            if bounds is None or _within(bounds, before, values[at]):
                scaled = weighers_base.scale(values[at], scaling, bounds)
                self.share[w][at] = sign_mult * scaled  # type: ignore[index]
                return False
        else:
            values = self.values[w] = raw[self.candidates]
        bounds = self.bounds[w] = weighers_base.scale_bounds(values, scaling)
        self.share[w] = sign_mult * weighers_base.scale(values, scaling, bounds)
        return True


@dataclass
class _Shape:
    """What the decisions of one shape found, valid at view ``version``."""

    epoch: int
    version: int
    #: Rows ``[0, stop)`` were examined (the scan's ranges up to where it stopped).
    stop: int
    #: Per examined host: PASSED, or the index in ``Shape.causes`` of what removed it.
    code: np.ndarray
    #: Per examined host: up at the last time its liveness was asked.
    up: np.ndarray
    #: Per slot of the placement, the provider of each examined host that passed.
    who: list[np.ndarray]
    resources: tuple[Mapping[str, int], ...]
    #: Per examined host: UNKNOWN, PASSED, or the index of the filter that removed it.
    filtered: np.ndarray
    #: Per weigher that runs, its raw values (where ``weighed``) and its state.
    raw: list[np.ndarray]
    weighed: np.ndarray
    weigher_states: list[Any]
    filter_states: list[Any]
    #: When liveness must be asked again of every examined host.
    recheck_at: float
    #: What removed hosts: (stage, reason), the stage the index of a host
    #: constraint, then liveness, then the placement (as the trace counts them).
    causes: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    #: Hosts whose rows changed since their filters' verdict (re-asked in the cut).
    stale: np.ndarray = dataclasses.field(default_factory=lambda: _NONE)
    #: What the next decision reads, while no host's answer changes (None: work it out).
    outline: _Outline | None = None
    #: The weighing of the outline's candidates (None: none yet).
    weights: _Weights | None = None
    #: Hosts whose rows changed since they were weighed.
    fresh: np.ndarray = dataclasses.field(default_factory=lambda: _NONE)

    def append(self, code: np.ndarray, up: np.ndarray, who: list[np.ndarray]) -> None:
        """The answers of the hosts examined next (rows from :attr:`stop` on):
        their codes, liveness and providers; their filters and weighers unasked."""
        self.code = np.concatenate([self.code, code])
        self.up = np.concatenate([self.up, up])
        self.who = [np.concatenate([old, new]) for old, new in zip(self.who, who, strict=True)]
        grow = len(code)
        self.filtered = np.concatenate([self.filtered, np.full(grow, UNKNOWN, np.int32)])
        self.raw = [np.concatenate([r, np.zeros(grow)]) for r in self.raw]
        self.weighed = np.concatenate([self.weighed, np.zeros(grow, dtype=bool)])
        self.stop += grow
        self.outline = None

    def truncate(self, stop: int) -> None:
        """Forget the hosts from row ``stop`` on (the scan stops sooner now)."""
        self.stop = stop
        self.outline = None
        self.stale = self.stale[self.stale < stop]
        self.fresh = self.fresh[self.fresh < stop]
        self.code = self.code[:stop]
        self.up = self.up[:stop]
        self.who = [w[:stop] for w in self.who]
        self.filtered = self.filtered[:stop]
        self.raw = [r[:stop] for r in self.raw]
        self.weighed = self.weighed[:stop]


class ShapeCache:
    """Per request shape, the engine's answers for the hosts it examined (see the
    module doc). One per :class:`~scheduler.engine.pipeline.Engine`, used under
    its lock."""

    def __init__(self, stages: Stages) -> None:
        self._stages = stages
        self._shapes: OrderedDict[Hashable, _Shape] = OrderedDict()
        settings = stages.settings
        self._limit = settings.max_placement_results
        self._down_time = settings.service_down_time
        #: The weighers that run (a multiplier of 0 turns one off), in order.
        self._weighers: list[tuple[str, BaseWeigher[Any]]] = [
            (name, w) for name, w in stages.weighers if w.multiplier
        ]
        self._keys: dict[int, tuple[RequestSpec, Hashable]] = {}
        # Shapes seen once: kept from their second request on.
        self._seen: dict[Hashable, None] = {}
        #: Decisions :meth:`rank` answered from the cache (the uncached stages
        #: did not run).
        self.hits = 0
        #: Decisions :meth:`rank` left to the uncached stages (a shape's first
        #: sight, or no candidate left after the filters).
        self.misses = 0

    @staticmethod
    def cacheable(spec: RequestSpec, randomized: bool, all_hosts: bool) -> bool:
        """Whether a request may be decided from the cache (see the module doc)."""
        return not (
            randomized
            or all_hosts
            or sees_every_candidate(spec)
            or spec.force_hosts
            or spec.force_nodes
            or spec.requested_destination is not None
        )

    def key(self, spec: RequestSpec) -> Hashable:
        """:func:`shape_key` of ``spec``, remembered for the last specs seen."""
        held = self._keys.get(id(spec))
        if held is not None and held[0] is spec:
            return held[1]
        key = shape_key(spec)
        self._keys[id(spec)] = (spec, key)
        if len(self._keys) > MAX_SPECS:
            del self._keys[next(iter(self._keys))]
        return key

    def rank(
        self,
        spec: RequestSpec,
        ctx: PlacementContext,
        states: CycleState,
        rng: Any,
        trace: InstanceTrace,
    ) -> tuple[Placement, Ranking] | None:
        """The candidates (their placement) and their ranking, as the uncached
        stages give them, with ``trace`` filled as they fill it; None (and
        nothing drawn, prepared or traced) when no candidate is left after the
        filters, or the shape is seen for the first time (a shape is kept
        from its second request on, so a shape never repeated costs what it
        did without the cache): the uncached stages decide those."""
        view = self._stages.view
        key = self.key(spec)
        shape = self._shapes.get(key)
        if shape is not None and shape.epoch == view.epoch:
            changed = view.changed_since(shape.version)
            if changed is not None:
                self._shapes.move_to_end(key)
                self._update(shape, changed, ctx)
            else:
                shape = None
        else:
            shape = None
        if shape is None:
            if key not in self._seen:  # a first sight: decided uncached, at its cost
                self._seen[key] = None
                if len(self._seen) > MAX_SPECS:
                    del self._seen[next(iter(self._seen))]
                self.misses += 1
                return None
            shape = self._build(ctx)
            self._shapes[key] = shape
            if len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
        decided = self._decide(shape, ctx, states, rng, trace)
        if decided is None:
            self.misses += 1
        else:
            self.hits += 1
        return decided

    def stats(self) -> dict[str, int]:
        """Decisions answered from the cache (``hits``), left to the uncached
        stages (``misses``), and the shapes kept."""
        return {"hits": self.hits, "misses": self.misses, "shapes": len(self._shapes)}

    # --- the candidate step, host by host ---------------------------------------------

    def _build(self, ctx: PlacementContext) -> _Shape:
        view = self._stages.view
        assert ctx.request is not None
        slots = slot_resources(ctx.request)
        filters = self._stages.filters
        shape = _Shape(
            epoch=view.epoch,
            version=view.version,
            stop=0,
            code=np.zeros(0, dtype=np.int32),
            up=np.zeros(0, dtype=bool),
            who=[np.zeros(0, dtype=np.int64) for _ in slots],
            resources=slots,
            filtered=np.zeros(0, dtype=np.int32),
            raw=[np.zeros(0) for _ in self._weighers],
            weighed=np.zeros(0, dtype=bool),
            weigher_states=[None if w.LEARNS else w.prepare(ctx) for _name, w in self._weighers],
            filter_states=[f.prepare(ctx) for _name, f in filters],
            recheck_at=np.inf,
        )
        self._extend(shape, ctx)
        return shape

    def _ends(self, size: int) -> list[int]:
        return [rows.stop for rows in spans(size, 0, self._limit)]

    def _extend(self, shape: _Shape, ctx: PlacementContext) -> None:
        """Examine further ranges of rows until the scan would stop there."""
        view = self._stages.view
        size = view.size
        for end in self._ends(size):
            if end <= shape.stop:
                continue
            if np.count_nonzero(shape.code == PASSED) >= self._limit:
                break
            rows = np.arange(shape.stop, end)
            shape.append(*self._examine(shape, rows, ctx))
            shape.recheck_at = min(shape.recheck_at, self._turn(ctx.now, rows))

    def _examine(
        self, shape: _Shape, rows: np.ndarray, ctx: PlacementContext
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Per host of ``rows`` (ascending): its code, whether it is up, and its
        provider per slot, as the candidate step finds them."""
        view, request = self._stages.view, ctx.request
        assert request is not None
        causes = shape.causes

        def cause(stage: int, reason: str) -> int:
            try:
                return causes.index((stage, reason))
            except ValueError:
                causes.append((stage, reason))
                return len(causes) - 1

        n = len(rows)
        code = np.full(n, PASSED, dtype=np.int32)
        alive = np.ones(n, dtype=bool)
        constraints = request.host_constraints
        for k, constraint in enumerate(constraints):
            ok = host_constraint_mask(view, constraint, rows)
            code[alive & ~ok] = cause(k, constraint.reason)
            alive &= ok
        up = rules.is_up(ctx.now, view.last_seen[rows], self._down_time)
        code[alive & ~up] = cause(len(constraints), reasons.HOST_DOWN)
        alive &= up
        removed: list[tuple[str, np.ndarray]] = []
        part = place(view, request, rows, alive=alive, removed=removed.append)
        for reason, hosts in removed:
            if len(hosts):
                code[np.searchsorted(rows, hosts)] = cause(len(constraints) + 1, reason)
        who = [np.full(n, ROOT, dtype=np.int64) for _ in shape.resources]
        at = np.searchsorted(rows, part.hosts)
        for k, slot in enumerate(part.slots):
            who[k][at] = slot.who
        return code, up, who

    def _turn(self, now: float, rows: np.ndarray) -> float:
        """The earliest moment the liveness of a host of ``rows`` could turn."""
        if not len(rows):
            return np.inf
        seen = self._stages.view.last_seen[rows]
        d = self._down_time
        up = rules.is_up(now, seen, d)
        turn = np.where(up, seen + d, np.where(seen - d > now, seen - d, np.inf))
        return float(turn.min()) - _MARGIN

    def _update(self, shape: _Shape, changed: np.ndarray, ctx: PlacementContext) -> None:
        """Re-ask the hosts whose rows changed, or whose liveness turned."""
        view = self._stages.view
        changed = changed[changed < shape.stop]
        if ctx.now >= shape.recheck_at:
            everyone = np.arange(shape.stop)
            turned = np.flatnonzero(
                rules.is_up(ctx.now, view.last_seen[: shape.stop], self._down_time) != shape.up
            )
            changed = np.union1d(changed, turned)
            shape.recheck_at = self._turn(ctx.now, everyone)
        recoded = False
        if len(changed):
            code, up, who = self._examine(shape, changed, ctx)
            recoded = bool((shape.code[changed] != code).any())
            if recoded or any(
                (old[changed] != new).any() for old, new in zip(shape.who, who, strict=True)
            ):
                shape.outline = None
            shape.code[changed] = code
            shape.up[changed] = up
            for old, new in zip(shape.who, who, strict=True):
                old[changed] = new
            shape.stale = np.union1d(shape.stale, changed) if len(shape.stale) else changed
            shape.fresh = np.union1d(shape.fresh, changed) if len(shape.fresh) else changed
            shape.weighed[changed] = False
            shape.recheck_at = min(shape.recheck_at, self._turn(ctx.now, changed))
        shape.version = view.version
        if not recoded:
            return  # the scan stops where it did
        # Where the scan stops now: sooner, if hosts before the stop passed
        # since; later, if passed hosts left.
        passed = np.flatnonzero(shape.code == PASSED)
        if len(passed) >= self._limit:
            last = int(passed[self._limit - 1])
            stop = next(end for end in self._ends(view.size) if end > last)
            if stop < shape.stop:
                shape.truncate(stop)
        elif shape.stop < view.size:
            self._extend(shape, ctx)

    # --- the decision -----------------------------------------------------------------

    def _decide(
        self,
        shape: _Shape,
        ctx: PlacementContext,
        states: CycleState,
        rng: Any,
        trace: InstanceTrace,
    ) -> tuple[Placement, Ranking] | None:
        outline = shape.outline
        cut = (
            np.flatnonzero(shape.code == PASSED)[: self._limit] if outline is None else outline.cut
        )
        # Host filters on the hosts new to the cut, and on those of it that changed
        # (with an outline, the cut is the one every host of it was filtered in).
        todo = cut[shape.filtered[cut] == UNKNOWN] if outline is None else _NONE
        if len(shape.stale):
            stale, shape.stale = shape.stale, _NONE
            in_cut = _member(stale, cut)
            shape.filtered[stale[~in_cut]] = UNKNOWN
            todo = np.union1d(todo, stale[in_cut]) if len(todo) else stale[in_cut]
        if len(todo):
            before = shape.filtered[todo].copy()
            self._filter(shape, todo, ctx)
            if outline is not None and (shape.filtered[todo] != before).any():
                outline = None
        if outline is None:
            outline = shape.outline = self._outline(shape, ctx)
        if not len(outline.candidates):
            return None
        trace.stages.extend(outline.stages)
        trace.reasons.update(outline.reasons)
        return outline.placement, self._weigh(shape, outline.candidates, ctx, states, rng, trace)

    def _filter(self, shape: _Shape, todo: np.ndarray, ctx: PlacementContext) -> None:
        """The host filters, in order, on hosts ``todo`` (their verdicts into the shape)."""
        view = self._stages.view
        for f, (_name, host_filter) in enumerate(self._stages.filters):
            state = shape.filter_states[f]
            if not len(todo):
                break
            if state is None:
                continue
            keep = host_filter.passes(view, todo, ctx, state)
            shape.filtered[todo[~keep]] = f
            todo = todo[keep]
        shape.filtered[todo] = PASSED

    def _outline(self, shape: _Shape, ctx: PlacementContext) -> _Outline:
        """The cut, the candidates and the trace's counts, from the shape's codes."""
        view = self._stages.view
        limit = self._limit
        passed = np.flatnonzero(shape.code == PASSED)
        cut = passed[:limit]
        verdict = shape.filtered[cut]
        assert ctx.request is not None
        constraints = ctx.request.host_constraints
        stages: list[StageCount] = []
        tally: dict[str, int] = {}

        def reject(reason: str, count: int) -> None:
            if count:
                tally[reason] = tally.get(reason, 0) + count

        counts = np.bincount(shape.code[shape.code >= 0], minlength=len(shape.causes))
        removed_by_stage = np.zeros(len(constraints) + 1, dtype=np.int64)
        for c, (stage, reason) in enumerate(shape.causes):
            reject(reason, int(counts[c]))
            if stage <= len(constraints):
                removed_by_stage[stage] += counts[c]
        left = shape.stop
        for k, constraint in enumerate(constraints):
            left -= int(removed_by_stage[k])
            stages.append(StageCount(constraint.stage or constraint.reason, left))
        left -= int(removed_by_stage[len(constraints)])
        stages.append(StageCount(HOSTS_UP, left))
        reject(reasons.OVER_LIMIT, max(len(passed) - limit, 0) + view.size - shape.stop)
        stages.append(StageCount(CANDIDATES, len(cut)))
        out = np.bincount(verdict[verdict >= 0], minlength=len(self._stages.filters))
        left = len(cut)
        for f, (name, host_filter) in enumerate(self._stages.filters):
            if out[f]:
                reject(host_filter.REASON, int(out[f]))
                left -= int(out[f])
            stages.append(StageCount(name, left))
        placement = Placement(
            cut, tuple(Slot(r, w[cut]) for r, w in zip(shape.resources, shape.who, strict=True))
        )
        return _Outline(cut, cut[verdict == PASSED], placement, tuple(stages), tally)

    def _weigh(
        self,
        shape: _Shape,
        candidates: np.ndarray,
        ctx: PlacementContext,
        states: CycleState,
        rng: Any,
        trace: InstanceTrace,
    ) -> Ranking:
        """The candidates ranked as :meth:`~scheduler.engine.stages.Stages.weigh`
        ranks them: each weigher's share is its multiplier times its raw values
        scaled across the candidates. While the candidates stay the same (the
        shape's :class:`_Weights`), only the hosts whose rows changed are
        weighed again, and a weigher's shares are scaled afresh only when its
        bounds across the candidates moved."""
        view = self._stages.view
        n = len(candidates)
        if n < 2:  # one host left: nothing to weigh
            return self._stages.ranked(candidates, np.zeros(n), [], None, rng, trace)
        weights = shape.weights
        if weights is None or weights.candidates is not candidates:
            weights = shape.weights = _Weights(candidates, len(self._weighers))
            new = candidates[~shape.weighed[candidates]]
        else:
            new = shape.fresh[_member(shape.fresh, candidates)]
        shape.fresh = _NONE
        at = np.searchsorted(candidates, new)
        whole = False
        for w, (_name, weigher) in enumerate(self._weighers):
            raw = shape.raw[w]
            if weigher.LEARNS:
                state = states.of(weigher)
                if state != shape.weigher_states[w]:
                    shape.weigher_states[w] = state
                    known = np.flatnonzero(shape.weighed)
                    if len(known) and state is not None:
                        raw[known] = weigher.raw(view, known, ctx, state)
                    weights.share[w] = None
            else:
                state = shape.weigher_states[w]
            if state is not None and len(new):
                raw[new] = weigher.raw(view, new, ctx, state)
            mult = weigher.multipliers(view, candidates)
            if isinstance(mult, np.ndarray) or not isinstance(weights.mult[w], float):
                weights.share[w] = None  # overridden by aggregates: scaled afresh
            elif mult != weights.mult[w]:
                weights.share[w] = None
            weights.mult[w] = mult
            whole |= weights.rescale(w, weigher, state, raw, new, at)
        shape.weighed[new] = True
        shares: list[tuple[str, np.ndarray]] = []
        for w, (name, _weigher) in enumerate(self._weighers):
            share = weights.share[w]
            assert share is not None  # worked out above
            shares.append((name, share))
        if whole or weights.total is None:
            total = np.zeros(n)
            for _name, share in shares:
                total += share
            weights.total = total
        elif len(at):
            part = np.zeros(len(at))
            for _name, share in shares:
                part += share[at]
            weights.total[at] = part
        return self._stages.ranked(candidates, weights.total, shares, None, rng, trace)

    def clear(self) -> None:
        self._shapes.clear()
