"""Server-group filters: strict affinity and strict anti-affinity.

Both read ``ctx.group_members``: members of the request's group per host, as
the store had them when the request started, plus the instances placed
earlier in the same multi-instance request (so those count as members, and
anti-affinity spreads them, as in Nova). The soft policies only weigh and
are not filtered here. The store re-checks the strict policy inside the
atomic claim, so racing workers cannot break it either.

* ServerGroupAffinityFilter rejects, once the group has members, every host
  that holds none: the group's instances all go to one host.
* ServerGroupAntiAffinityFilter rejects hosts that already hold
  ``max_server_per_host`` members (1 unless the group relaxes it).

Nova's anti-affinity also accepts the host already running the instance
being placed; here an instance that already holds allocations is reused by
the engine before any filter matters, so that case does not arise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class ServerGroupAffinityFilter(BaseFilter):
    """Keeps only the hosts holding members of an affinity group (once it has any)."""

    REASON = "server group affinity"

    def applies(self, ctx: PlacementContext) -> bool:
        group = ctx.spec.group
        return (group is not None and group.policy == "affinity"
                and any(n > 0 for n in ctx.group_members.values()))

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        holding = view.indices_of(h for h, n in ctx.group_members.items() if n > 0)
        return np.isin(candidates, holding)


class ServerGroupAntiAffinityFilter(BaseFilter):
    """Rejects hosts already holding ``max_server_per_host`` members of the group."""

    REASON = "server group anti-affinity"

    def applies(self, ctx: PlacementContext) -> bool:
        group = ctx.spec.group
        return (group is not None and group.policy == "anti-affinity"
                and any(n > 0 for n in ctx.group_members.values()))

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        assert ctx.spec.group is not None  # see applies()
        limit = ctx.spec.group.max_server_per_host
        full = view.indices_of(h for h, n in ctx.group_members.items() if n >= limit)
        return ~np.isin(candidates, full)
