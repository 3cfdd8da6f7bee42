"""What filters and weighers know about the request being placed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from scheduler.objects import RequestSpec, ServerGroup
from scheduler.resource_request import ResourceRequest

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView


@dataclass
class PlacementContext:
    """The per-request input of every filter and weigher.

    ``group_members`` counts, per host, the members of ``spec.group``: those
    the store knows of when the request started, plus the instances placed
    earlier in this same request (so anti-affinity spreads a multi-instance
    request); it changes between the instances of a request, so a plugin
    reads it when it filters or weighs, never in its per-request state.
    ``now`` is the request's clock reading, for liveness. ``request`` is the
    typed resource request after the request filters (None only in tests
    that build a context by hand).
    """

    spec: RequestSpec
    now: float
    group_members: Counter[str] = field(default_factory=Counter)
    request: ResourceRequest | None = None

    def group_with(self, policy: str) -> ServerGroup | None:
        """The request's group, when its policy is ``policy``."""
        group = self.spec.group
        return group if group is not None and group.policy == policy else None

    def has_members(self) -> bool:
        """Whether the request's group has a member on any host (in the view or not)."""
        return any(n > 0 for n in self.group_members.values())

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
