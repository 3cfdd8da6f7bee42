"""What filters and weighers know about the request being placed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from scheduler.objects import RequestSpec, ServerGroup
from scheduler.resource_request import ResourceRequest

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView


@dataclass
class PlacementContext:
    """The per-request input of every filter and weigher.

    ``group_members`` counts, per host, the members of ``spec.group``: those
    the store knows of when the request started (read again after a claim
    refused for the group's policy), plus the instances placed
    earlier in this same request (so anti-affinity spreads a multi-instance
    request); it changes between the instances of a request, so a plugin
    reads it when it filters or weighs, never in its per-request state.
    ``now`` is the request's clock reading, for liveness. ``request`` is the
    typed resource request after the request filters (None only in tests
    that build a context by hand).

    A move (a resize) names its ``migration_uuid``: the consumer that holds
    the instance's source allocation, and with it the instance's own group
    membership, counted in ``group_members`` on ``own_host`` (None when it
    is no member of the request's group). The strict filters do not hold
    that membership against the instance (:func:`scheduler.rules.group_allows`),
    and every claim of the request names the migration, so the store's
    check does the same.
    """

    spec: RequestSpec
    now: float
    group_members: Counter[str] = field(default_factory=Counter)
    request: ResourceRequest | None = None
    migration_uuid: str | None = None
    own_host: str | None = None

    @property
    def resource_request(self) -> ResourceRequest:
        """``request``, or the spec's own resource request when none was set
        (a context built outside :meth:`Engine.select`, as tests do)."""
        return self.request if self.request is not None else self.spec.resource_request

    def group_with(self, policy: str) -> ServerGroup | None:
        """The request's group, when its policy is ``policy``."""
        group = self.spec.group
        return group if group is not None and group.policy == policy else None

    def has_members(self) -> bool:
        """Whether the request's group has a member on any host (in the view or not)."""
        return any(n > 0 for n in self.group_members.values())

    def own_on(self, view: HostView, candidates: np.ndarray) -> np.ndarray:
        """Of :meth:`members_on`, the instance's own membership: 1 on ``own_host``, else 0."""
        row = view.index_of(self.own_host) if self.own_host is not None else None
        return (candidates == (-1 if row is None else row)).astype(np.int64)

    def members_on(self, view: HostView, candidates: np.ndarray) -> np.ndarray:
        """Members of the request's group on each candidate host (0 where none)."""
        members = np.zeros(len(candidates))
        known = [
            (row, n)
            for host, n in self.group_members.items()
            if n > 0 and (row := view.index_of(host)) is not None
        ]
        if not known:
            return members
        known.sort()
        rows = np.array([row for row, _ in known], dtype=np.int64)
        counts = np.array([n for _, n in known], dtype=np.float64)
        at = np.searchsorted(rows, candidates).clip(max=len(rows) - 1)
        hit = rows[at] == candidates
        members[hit] = counts[at[hit]]
        return members


class Prepares(Protocol):
    """A filter or weigher, as :class:`CycleState` sees it: what it parses of a
    request once (its per-request state)."""

    def prepare(self, ctx: PlacementContext) -> Any: ...


class CycleState:
    """The per-request state of each filter and weigher (kube-scheduler's cycle
    state): what its ``prepare`` parsed of the request, asked once per request,
    when the plugin is first reached (a filter only once candidates reach it,
    so a later filter never parses a request that earlier ones left no host
    for), and shared by all the request's instances. What changes between
    the instances (``ctx.group_members``) is never in it: plugins read that
    from the context as they filter or weigh.
    """

    def __init__(self, ctx: PlacementContext) -> None:
        self._ctx = ctx
        self._states: dict[int, Any] = {}

    def of(self, plugin: Prepares) -> Any:
        key = id(plugin)  # plugins live as long as the engine, longer than this
        if key not in self._states:
            self._states[key] = plugin.prepare(self._ctx)
        return self._states[key]
