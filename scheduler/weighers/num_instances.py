"""NumInstancesWeigher: weighs hosts by how many instances they run.

The raw weight is the host's consumers in the store (instances and
in-flight migrations), kept current within a request, scaled between the
candidates' minimum and maximum.

``num_instances_weight_multiplier`` (default 0.0, off): a positive multiplier
**packs** (hosts with more instances win); a negative one **spreads** by
instance count rather than by free resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class NumInstancesWeigher(BaseWeigher[bool]):
    """Instance count (positive multiplier: more is better)."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        num_instances_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of the instance count of a host. Positive prefers hosts with "
            "more instances (packs), negative fewer (spreads); 0 (the default) turns the "
            "weigher off.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.consumers[candidates]
