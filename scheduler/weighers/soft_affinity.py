"""ServerGroupSoftAffinityWeigher: draws members of a soft-affinity group to the
hosts already running members of their group.

The raw weight is the number of the group's members on the host: those the
store records (soft groups' claims record their members, unchecked) plus
the instances placed earlier in the same request. Scaled between the
candidates' minimum and maximum. Requests outside a soft-affinity group
weigh nothing.

``soft_affinity_weight_multiplier`` (default 1.0): larger values make
affinity win over the resource weighers; 0 disables it. **We differ from
Nova**, which warns about a negative value and uses it: here the option
refuses it (use a soft-anti-affinity group to spread).
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


class ServerGroupSoftAffinityWeigher(BaseWeigher[ServerGroup]):
    """Members of the request's soft-affinity group on the host (more is better)."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        soft_affinity_weight_multiplier: float = multiplier(
            1.0,
            min=0.0,
            help="How strongly members of a soft-affinity group are drawn to the hosts "
            "already running members of their group.\n\nPossible values: 0 or more "
            "(a negative value would mean anti-affinity: use a soft-anti-affinity group "
            "instead).",
        )

    args: Args

    def prepare(self, ctx: PlacementContext) -> ServerGroup | None:
        return ctx.group_with("soft-affinity")

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: ServerGroup
    ) -> np.ndarray:
        return ctx.members_on(view, candidates)
