"""The candidate step: which hosts' provider trees can take a resource request,
and where in each tree every part of it lands.

Asked of many hosts at once (every host, a range of rows, or given hosts),
with array operations over the host (root provider) table and the
child-provider table of the :class:`~scheduler.engine.hostview.HostView`;
no Python loop over hosts or providers, only over request groups, resource
classes and traits. Each host's answer depends on its own tree alone, so
asking a range of rows gives, for those hosts, what asking every host gives.

Semantics (Placement's, and where we differ):

* **Host constraints** (from request filters: disabled, zone, tenant, image
  type ...) are asked of the root provider, each counted under its own reason.
* **The unsuffixed group** may be split across the tree: each resource class
  comes from one provider, the root or a child. Its forbidden traits and
  aggregate conditions are asked of the root (the compute node) and of every
  provider that gives it resources; its required and any-of traits must be
  found among the providers that give it resources, together (Placement's
  rule). Per class the provider is chosen to carry the most of the wanted
  traits, the root first on a tie, then the first child. **We differ**:
  Placement tries every combination of providers; we choose one per class,
  so a tree where only a different combination carries the traits is missed
  (put such a trait in a numbered group, which ties it to one provider).
  Placement also does not ask forbidden traits of a root that gives nothing.
* **Each numbered group** lands whole on one provider with all its
  resources, traits and aggregates. ``group_policy=isolate`` puts numbered
  groups on distinct providers; ``none`` lets them share, their amounts
  added up (and added to the unsuffixed group's on a shared provider).
* A provider's aggregates include its root's.
* **One allocation per host**: the unsuffixed group first, then the
  numbered groups, those with the most conditions (traits, aggregates)
  first, each on the first fitting provider (the root, then children in the
  order the view met them). **We differ**: Placement enumerates every allocation of every tree
  (and pays ~0.2 ms per matching provider for it); a tree that fits only
  under another assignment of groups to providers is not found here, and
  is counted under :data:`~scheduler.engine.reasons.GROUPS_DO_NOT_FIT`.

Each host that cannot take the request is counted once, under the first
reason that removed it, in the order: host constraints, then per group
forbidden traits and aggregates, required and any-of traits, capacity per
class, then the groups together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.engine import reasons
from scheduler.engine.hostview import HostView
from scheduler.objects import RequestSpec
from scheduler.resource_request import HostConstraint, RequestGroup, ResourceRequest

#: ``reject(reason, count)``: where the step counts the hosts it removes.
Reject = Callable[[str, int], None]
#: ``removed((reason, hosts))``: where a dry run asked for all hosts lists them
#: (view indices).
Removed = Callable[[tuple[str, np.ndarray]], None]

#: A question asked of providers: (rows, kid) -> mask (e.g. ``HostView.has_trait`` bound
#: to one trait).
_ProviderTest = Callable[[np.ndarray | slice, bool], np.ndarray]

#: Trace stage names of the candidate step (request filters add their own).
HOSTS_UP = "hosts up"
CANDIDATES = "candidates"

ROOT = -1  # a slot's provider: the host's root
NONE = -2  # no provider (the host is out)


def _negated(test: _ProviderTest) -> _ProviderTest:
    return lambda rows, kid: ~test(rows, kid)


def _ignore(reason: str, count: int) -> None:
    """A :data:`Reject` that counts nothing (re-checks, alternates)."""


@dataclass(frozen=True)
class Slot:
    """Part of the request that lands on one provider per host.

    ``who`` aligns with :attr:`Placement.hosts`: :data:`ROOT`, or the row of a
    child provider in the view's kid table.
    """

    resources: Mapping[str, int]
    who: np.ndarray


@dataclass(frozen=True)
class Placement:
    """The hosts that can take the request (ascending view indices, unless
    asked for in another order) and, per slot, the provider of each."""

    hosts: np.ndarray
    slots: tuple[Slot, ...]

    def __len__(self) -> int:
        return len(self.hosts)

    def take(self, positions: np.ndarray | slice) -> Placement:
        """The hosts at ``positions`` (a mask, indices or a range), with their slots."""
        return Placement(
            self.hosts[positions], tuple(Slot(s.resources, s.who[positions]) for s in self.slots)
        )

    @staticmethod
    def joined(parts: Sequence[Placement]) -> Placement:
        """``parts`` (placements of one request on disjoint hosts) end to end."""
        if len(parts) == 1:
            return parts[0]
        slots = tuple(
            Slot(first.resources, np.concatenate([part.slots[k].who for part in parts]))
            for k, first in enumerate(parts[0].slots)
        )
        return Placement(np.concatenate([part.hosts for part in parts]), slots)

    def allocations(self, view: HostView, position: int) -> dict[str, dict[str, int]]:
        """What a claim on the host at ``position`` writes: amounts per provider uuid."""
        out: dict[str, dict[str, int]] = {}
        root = view.uuids[int(self.hosts[position])]
        for slot in self.slots:
            who = int(slot.who[position])
            uuid = root if who == ROOT else view.kid_uuids[who]
            amounts = out.setdefault(uuid, {})
            for rc, amount in slot.resources.items():
                amounts[rc] = amounts.get(rc, 0) + amount
        return out


def host_constraint_mask(
    view: HostView, constraint: HostConstraint, rows: np.ndarray | slice
) -> np.ndarray:
    """Mask of the hosts in ``rows`` (indices, or a range of rows) whose root
    provider meets ``constraint``."""
    count = len(range(view.size)[rows]) if isinstance(rows, slice) else len(rows)
    ok = np.ones(count, dtype=bool)
    for trait in sorted(constraint.required_traits):
        ok &= view.has_trait(trait, rows)
    for trait in sorted(constraint.forbidden_traits):
        ok &= ~view.has_trait(trait, rows)
    if constraint.member_of is not None:
        ok &= view.in_any(constraint.member_of, rows)
    if constraint.forbidden_aggregates:
        ok &= ~view.in_any(constraint.forbidden_aggregates, rows)
    if constraint.hosts is not None:
        ok &= _named(view, constraint.hosts, constraint.ignore_case, rows)
    if constraint.forbidden_hosts:
        ok &= ~_named(view, constraint.forbidden_hosts, constraint.ignore_case, rows)
    return ok


def _named(
    view: HostView, names: frozenset[str], ignore_case: bool, rows: np.ndarray | slice
) -> np.ndarray:
    """Mask of the hosts in ``rows`` named in ``names`` (a few: no mask over every host)."""
    find = view.indices_of_ignoring_case if ignore_case else view.indices_of
    named = find(sorted(names))
    if not isinstance(rows, slice):
        return np.isin(rows, named)
    start, stop, _ = rows.indices(view.size)
    mask = np.zeros(stop - start, dtype=bool)
    mask[named[(named >= start) & (named < stop)] - start] = True
    return mask


class _Step:
    """One run of :func:`place`: the hosts still in, and how to count the others."""

    def __init__(
        self,
        view: HostView,
        hosts: np.ndarray | slice | None,
        alive: np.ndarray | None,
        reject: Reject,
        removed: Removed | None = None,
    ) -> None:
        self.view = view
        # rows to ask the host table with: a range of rows is a slice (no copy)
        self.rows: np.ndarray | slice = slice(0, view.size) if hosts is None else hosts
        if isinstance(self.rows, slice):
            self.hosts = np.arange(*self.rows.indices(view.size))
        else:
            self.hosts = self.rows
        self.n = len(self.hosts)
        self.kids, self.kpos = view.kids_of(hosts)
        # rows to ask the kid table with: a slice (no copy) when it is all of it
        self.krows: np.ndarray | slice = (
            slice(0, view.kid_size) if len(self.kids) == view.kid_size else self.kids
        )
        self.alive = np.ones(self.n, dtype=bool) if alive is None else alive.copy()
        self._reject = reject
        self._removed = removed
        # what earlier groups of this request already take, per class, per provider
        self.extra_root: dict[str, np.ndarray] = {}
        self.extra_kid: dict[str, np.ndarray] = {}
        self.numbered_root = np.zeros(self.n, dtype=bool)  # isolate: providers taken
        self.numbered_kid = np.zeros(len(self.kids), dtype=bool)

    def drop(self, keep: np.ndarray, reason: str) -> None:
        """Remove the hosts not in ``keep``, counting those still in under ``reason``."""
        self._reject(reason, int(np.count_nonzero(self.alive & ~keep)))
        if self._removed is not None:
            self._removed((reason, self.hosts[self.alive & ~keep]))
        self.alive &= keep

    def any_kid(self, kid_mask: np.ndarray) -> np.ndarray:
        """Per host: does any of its children pass ``kid_mask``?"""
        out = np.zeros(self.n, dtype=bool)
        out[self.kpos[kid_mask]] = True
        return out

    def can_give(self, rc: str, amount: int, shared: bool) -> tuple[np.ndarray, np.ndarray]:
        """Root and child masks of providers with room for ``amount`` of ``rc``;
        ``shared`` takes off what earlier groups of the request already take."""
        v = self.view
        root = v.can_give(rc, amount, self.rows, extra=self.extra_root.get(rc) if shared else None)
        kid = (
            v.can_give(
                rc, amount, self.krows, kid=True, extra=self.extra_kid.get(rc) if shared else None
            )
            if len(self.kids) and v.kids_offer(rc)
            else np.zeros(len(self.kids), dtype=bool)
        )
        return root, kid

    def take(self, rc: str, amount: int, who: np.ndarray) -> None:
        """Record ``amount`` of ``rc`` as taken on each host's chosen provider."""
        extra = self.extra_root.setdefault(rc, np.zeros(self.n, dtype=np.int64))
        extra[who == ROOT] += amount
        if len(self.kids):
            kid_extra = self.extra_kid.setdefault(rc, np.zeros(len(self.kids), dtype=np.int64))
            kid_extra[who[who >= 0]] += amount

    def choose(
        self,
        root_ok: np.ndarray,
        kid_ok: np.ndarray,
        root_score: np.ndarray | None = None,
        kid_score: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per host, the provider to use: the highest score, the root first on a
        tie, then the first child; :data:`NONE` when none is ok. Child choices
        are positions in ``self.kids``."""
        who = np.where(root_ok, ROOT, NONE)
        cand = np.flatnonzero(kid_ok)
        if not len(cand):
            return who
        if kid_score is None:  # first child per host: a stable sort keeps row order
            score = np.zeros(len(cand), np.int64)
            order = np.argsort(self.kpos[cand], kind="stable")
        else:
            score = kid_score[cand]
            order = np.lexsort((cand, -score, self.kpos[cand]))
        cand, score = cand[order], score[order]
        pos = self.kpos[cand]
        first = np.ones(len(cand), dtype=bool)
        first[1:] = pos[1:] != pos[:-1]
        best_kid = np.full(self.n, NONE, dtype=np.int64)
        best_kid[pos[first]] = cand[first]
        best_score = np.full(self.n, -1, dtype=np.int64)
        best_score[pos[first]] = score[first]
        rscore = root_score if root_score is not None else np.zeros(self.n, np.int64)
        use_kid = (best_kid != NONE) & (~root_ok | (best_score > rscore))
        return np.where(use_kid, best_kid, who)

    # --- per group ---------------------------------------------------------------------

    def conditions(self, group: RequestGroup, on_kids: bool) -> tuple[np.ndarray, np.ndarray]:
        """Forbidden traits and aggregates: root and child masks, hosts dropped
        when no provider of the group may be used (the unsuffixed group: the root)."""
        v, s = self.view, group.suffix
        root = np.ones(self.n, dtype=bool)
        kid = np.ones(len(self.kids), dtype=bool)
        checks: list[tuple[_ProviderTest, str]] = [
            (_negated(functools.partial(v.has_trait, t)), reasons.forbidden_trait(t, s))
            for t in sorted(group.forbidden_traits)
        ]
        checks += [
            (functools.partial(v.in_any, c), reasons.aggregate(reasons.NOT_IN_AGGREGATE, s))
            for c in group.member_of
        ]
        if group.forbidden_aggregates:
            checks.append(
                (
                    _negated(functools.partial(v.in_any, group.forbidden_aggregates)),
                    reasons.aggregate(reasons.IN_FORBIDDEN_AGGREGATE, s),
                )
            )
        for test, reason in checks:
            root &= test(self.rows, False)
            if len(self.kids):
                kid &= test(self.krows, True)
            self.drop(root if not on_kids else root | self.any_kid(kid), reason)
        return root, kid

    def unsuffixed(self, group: RequestGroup, shared: bool) -> list[Slot]:
        v = self.view
        _root, kid_usable = self.conditions(group, on_kids=False)
        if not group.resources:  # nothing to split: its traits are the root's
            kid_usable = np.zeros(len(self.kids), dtype=bool)
        wanted = set(group.required_traits).union(*group.any_traits)
        for trait in sorted(group.required_traits):  # somewhere usable in the tree
            kid_has = (
                v.has_trait(trait, self.krows, kid=True) & kid_usable
                if len(self.kids)
                else kid_usable
            )
            self.drop(
                v.has_trait(trait, self.rows) | self.any_kid(kid_has), reasons.missing_trait(trait)
            )
        for clause in group.any_traits:
            kid_has = (
                v.in_any_trait(clause, self.krows, kid=True) & kid_usable
                if len(self.kids)
                else kid_usable
            )
            self.drop(
                v.in_any_trait(clause, self.rows) | self.any_kid(kid_has),
                reasons.none_of_traits(clause),
            )
        root_score = kid_score = None
        if wanted and len(self.kids):
            root_score = v.trait_count(wanted, self.rows)
            kid_score = v.trait_count(wanted, self.krows, kid=True)
        slots: list[Slot] = []
        for rc, amount in group.resources.items():
            root, kid = self.can_give(rc, amount, shared=False)
            kid &= kid_usable
            self.drop(root | self.any_kid(kid), reasons.insufficient(rc))
            who = self.choose(root, kid, root_score, kid_score)
            if shared:  # numbered groups follow: they must see what this takes
                self.take(rc, amount, who)
            slots.append(Slot({rc: amount}, who))
        if wanted and len(self.kids) and slots:
            self._check_union(group, slots)
        return slots

    def _check_union(self, group: RequestGroup, slots: list[Slot]) -> None:
        """The unsuffixed group's traits, among the providers chosen for it."""
        v = self.view

        def chosen_have(test: _ProviderTest) -> np.ndarray:
            on_root, on_kid = test(self.rows, False), test(self.krows, True)
            found = np.zeros(self.n, dtype=bool)
            for slot in slots:
                found |= np.where(
                    slot.who == ROOT, on_root, on_kid[np.maximum(slot.who, 0)] & (slot.who >= 0)
                )
            return found

        for trait in sorted(group.required_traits):
            self.drop(
                chosen_have(functools.partial(v.has_trait, trait)), reasons.missing_trait(trait)
            )
        for clause in group.any_traits:
            self.drop(
                chosen_have(functools.partial(v.in_any_trait, clause)),
                reasons.none_of_traits(clause),
            )

    def numbered(self, group: RequestGroup, isolate: bool) -> Slot:
        v, s = self.view, group.suffix
        root, kid = self.conditions(group, on_kids=True)
        for trait in sorted(group.required_traits):
            root &= v.has_trait(trait, self.rows)
            if len(self.kids):
                kid &= v.has_trait(trait, self.krows, kid=True)
            self.drop(root | self.any_kid(kid), reasons.missing_trait(trait, s))
        for clause in group.any_traits:
            root &= v.in_any_trait(clause, self.rows)
            if len(self.kids):
                kid &= v.in_any_trait(clause, self.krows, kid=True)
            self.drop(root | self.any_kid(kid), reasons.none_of_traits(clause, s))
        for rc, amount in group.resources.items():
            r, k = self.can_give(rc, amount, shared=False)
            root &= r
            kid &= k
            self.drop(root | self.any_kid(kid), reasons.insufficient(rc, s))
        # Together with the groups before it: shared amounts, distinct providers.
        for rc, amount in group.resources.items():
            if rc in self.extra_root:
                r, k = self.can_give(rc, amount, shared=True)
                root &= r
                kid &= k
        if isolate:
            root &= ~self.numbered_root
            kid &= ~self.numbered_kid
        self.drop(root | self.any_kid(kid), reasons.GROUPS_DO_NOT_FIT)
        who = self.choose(root, kid)
        for rc, amount in group.resources.items():
            self.take(rc, amount, who)
        self.numbered_root |= who == ROOT
        self.numbered_kid[who[who >= 0]] = True
        return Slot(dict(group.resources), who)

    def result(self, slots: list[Slot]) -> Placement:
        keep = self.alive
        hosts = self.hosts[keep]
        out = []
        for slot in slots:
            if not len(self.kids):
                # Trees of one provider: a host no root could take a slot on
                # was dropped before the slot was chosen, so every host kept
                # has each slot on its root.
                out.append(Slot(slot.resources, np.full(len(hosts), ROOT)))
                continue
            who = slot.who[keep]
            if (who >= 0).any():  # kid positions -> kid table rows
                who = np.where(who >= 0, self.kids[np.maximum(who, 0)], who)
            out.append(Slot(slot.resources, who))
        return Placement(hosts, tuple(out))


def place(
    view: HostView,
    request: ResourceRequest,
    hosts: np.ndarray | slice | None = None,
    alive: np.ndarray | None = None,
    reject: Reject = _ignore,
    removed: Removed | None = None,
) -> Placement:
    """Where ``request``'s groups land on each of ``hosts`` (view indices, a
    range of rows, or None: every host) whose ``alive`` entry is True (None:
    all of them), in the view as it is now.
    Hosts that cannot take it are left out, counted by ``reject`` (and, given
    ``removed``, listed there by reason); the order of ``hosts`` is kept.
    Host constraints are not asked here (see :func:`host_constraint_mask`)."""
    step = _Step(view, hosts, alive, reject, removed)
    slots = step.unsuffixed(request.unsuffixed, shared=bool(request.numbered))
    for group in _numbered_in_order(request):
        slots.append(step.numbered(group, request.isolate))
    return step.result(slots)


def slot_resources(request: ResourceRequest) -> tuple[Mapping[str, int], ...]:
    """The resources of each slot of :func:`place`'s placements of ``request``,
    in its order: one slot per class of the unsuffixed group, then one per
    numbered group, the most particular first."""
    return (
        *({rc: amount} for rc, amount in request.unsuffixed.resources.items()),
        *(dict(group.resources) for group in _numbered_in_order(request)),
    )


def _numbered_in_order(request: ResourceRequest) -> list[RequestGroup]:
    """The numbered groups in the order they choose their providers."""
    return sorted(request.numbered, key=_most_particular_first)


def _most_particular_first(group: RequestGroup) -> tuple[int, str]:
    """Numbered groups with more conditions choose their provider first, so a
    plain group does not take the one provider a particular group needs."""
    conditions = (
        len(group.required_traits)
        + len(group.forbidden_traits)
        + len(group.any_traits)
        + len(group.member_of)
        + len(group.forbidden_aggregates)
    )
    return -conditions, group.suffix


# --- the scan: which hosts, in which ranges of rows -----------------------------------


#: Scheduler hints whose filters must see every candidate (see sees_every_candidate).
_HOST_HINTS = ("group", "same_host", "different_host")


def sees_every_candidate(spec: RequestSpec) -> bool:
    """Whether a request is exempt from the ``max_placement_results`` cut, as in
    Nova: one in a server group or with a ``same_host`` / ``different_host``
    hint. Its filters keep only a few hosts of the cloud (the group's, or those
    away from it), and a cut made before them could keep none of those."""
    return spec.group is not None or any(hint in spec.scheduler_hints for hint in _HOST_HINTS)


#: How many hosts the candidate step examines first when the cut may stop it
#: early (at least, and at least 4x ``max_placement_results``); each further
#: range of rows is 4 times the last, so a request few hosts can take costs a
#: handful of ranges, and one most hosts can take a single one, whatever the
#: size of the cloud.
FIRST_SPAN = 4096


def spans(size: int, start: int, limit: int | None) -> Iterator[slice]:
    """Ranges of rows that cover every host once: with a ``limit`` (the scan may
    stop once it has that many candidates), from row ``start`` to the end and
    then from the first row, in growing ranges; without, all rows at once."""
    if limit is None or not size:
        yield slice(0, size)
        return
    span = max(FIRST_SPAN, 4 * limit)
    for lo, hi in ((start, size), (0, start)):
        while lo < hi:
            yield slice(lo, min(lo + span, hi))
            lo += span
            span *= 4
