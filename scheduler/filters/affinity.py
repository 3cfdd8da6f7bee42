"""Server-group filters: strict affinity and strict anti-affinity.

Both take the request's group as their per-request state (when its policy
is theirs) and read ``ctx.group_members`` when they filter: members of the
request's group per host, as the store had them when the request started
(or when a claim the store refused for the group read them again: see
:mod:`scheduler.engine.pipeline`), plus the instances placed earlier in the
same multi-instance request (so
those count as members, and anti-affinity spreads them, as in Nova). The
soft policies only weigh and are not filtered here. The rule is
:func:`scheduler.rules.group_allows`, the one the store's atomic claim
re-checks, so racing workers cannot break it either.

* ServerGroupAffinityFilter rejects, once the group has members, every host
  that holds none: the group's instances all go to one host.
* ServerGroupAntiAffinityFilter rejects hosts that already hold
  ``max_server_per_host`` members (1 unless the group relaxes it).

Like Nova's, anti-affinity accepts the host already running the instance
being placed: during a resize the instance's membership on its source is
held by the migration consumer (``ctx.own_host``), and that one is not
counted against the instance, so with ``allow_resize_to_same_host`` it can
resize in place. Affinity counts it like any member (it ties the instance
to its host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from scheduler import rules
from scheduler.filters.base import BaseFilter
from scheduler.objects import ServerGroup

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class _StrictGroupFilter(BaseFilter[ServerGroup]):
    """The strict policy ``POLICY`` of the request's group, by :func:`rules.group_allows`."""

    POLICY: ClassVar[str]

    def prepare(self, ctx: PlacementContext) -> ServerGroup | None:
        return ctx.group_with(self.POLICY)

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: ServerGroup
    ) -> np.ndarray:
        # The members change as the request's instances are placed: read them now.
        return rules.group_allows(
            self.POLICY,
            ctx.members_on(view, candidates),
            ctx.has_members(),
            state.max_server_per_host,
            ctx.own_on(view, candidates),
        )


class ServerGroupAffinityFilter(_StrictGroupFilter):
    """Keeps only the hosts holding members of an affinity group (once it has any)."""

    REASON = "server group affinity"
    POLICY = rules.AFFINITY


class ServerGroupAntiAffinityFilter(_StrictGroupFilter):
    """Rejects hosts already holding ``max_server_per_host`` members of the group."""

    REASON = "server group anti-affinity"
    POLICY = rules.ANTI_AFFINITY
