"""LeastAllocatedWeigher: prefers the host left with the largest share free.

The raw weight is the weighted mean, over the resource classes of
``allocation_resource_weights``, of the share of the host's capacity that
would still be free once the request is placed (kube-scheduler's
LeastAllocated). Fractions rather than Nova's absolute amounts: a spread by
absolute free RAM fills the largest hosts first and leaves the small ones
empty; a spread by fractions fills every host to the same level, so the
load (and the blast radius of a host failing) is even across the cloud.

``least_allocated_weight_multiplier`` (default 0.0, off): positive spreads;
the ``spread`` profile of ``weigher_profile`` turns it on.
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


class LeastAllocatedWeigher(AllocationWeigher):
    """Share of capacity left free after placement (positive: more free is better)."""

    @dataclass(frozen=True)
    class Args(AllocationArgs):
        least_allocated_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of the share of a host's capacity left free once the request "
            "is placed (weighted over allocation_resource_weights). Positive spreads "
            "instances so that every host fills to the same level; 0 (the default) "
            "turns the weigher off.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Demand
    ) -> np.ndarray:
        return 1.0 - self.weighted_mean(self.used_after(view, candidates, state), state)
