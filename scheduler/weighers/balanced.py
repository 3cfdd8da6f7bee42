"""BalancedAllocationWeigher: prefers the host whose classes fill alike.

The raw weight is 1 less the (weighted) standard deviation, across the
resource classes of ``allocation_resource_weights``, of the shares of the
host's capacity in use once the request is placed (kube-scheduler's
BalancedAllocation). A host whose RAM is 90% used while its disk is 30% used
has disk nobody can use: keeping the classes level on every host keeps what
is free usable, for spread and pack alike.

``balanced_allocation_weight_multiplier`` (default 0.0, off): positive
prefers balanced hosts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import multiplier
from scheduler.weighers.allocation import AllocationArgs, AllocationWeigher, Demand

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class BalancedAllocationWeigher(AllocationWeigher):
    """Evenness of the classes' fill after placement (positive: more even is better)."""

    @dataclass(frozen=True)
    class Args(AllocationArgs):
        balanced_allocation_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of how evenly a host's resource classes (those of "
            "allocation_resource_weights) are used once the request is placed. Positive "
            "prefers hosts that stay balanced, so no class is stranded; 0 (the default) "
            "turns the weigher off.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Demand
    ) -> np.ndarray:
        used = self.used_after(view, candidates, state)
        mean = self.weighted_mean(used, state)
        variance = self.weighted_mean((used - mean) ** 2, state)
        return 1.0 - np.sqrt(variance)
