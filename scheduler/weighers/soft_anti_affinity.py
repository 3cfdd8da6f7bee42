"""ServerGroupSoftAntiAffinityWeigher: pushes members of a soft-anti-affinity
group away from the hosts already running members of their group.

The raw weight is minus the number of the group's members on the host (the
store's record plus the instances placed earlier in the same request), so
a multi-instance request spreads; scaled between the candidates' minimum
and maximum. Unlike the strict policy nothing is rejected: when every host
holds members, the least crowded wins. Requests outside a
soft-anti-affinity group weigh nothing.

``soft_anti_affinity_weight_multiplier`` (default 1.0): larger values make
spreading the group win over the resource weighers; 0 disables it. **We
differ from Nova**, which warns about a negative value and uses it: here
the option refuses it (use a soft-affinity group to gather).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.objects import ServerGroup
from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class ServerGroupSoftAntiAffinityWeigher(BaseWeigher[ServerGroup]):
    """Members of the request's soft-anti-affinity group on the host (fewer is better)."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        soft_anti_affinity_weight_multiplier: float = multiplier(
            1.0,
            min=0.0,
            help="How strongly members of a soft-anti-affinity group are pushed away from "
            "the hosts already running members of their group.\n\nPossible values: 0 "
            "or more.",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> ServerGroup | None:
        return ctx.group_with("soft-anti-affinity")

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: ServerGroup
    ) -> np.ndarray:
        return -ctx.members_on(view, candidates)
