"""MostAllocatedWeigher: prefers the host left with the smallest share free.

The raw weight is the weighted mean, over the resource classes of
``allocation_resource_weights``, of the share of the host's capacity in use
once the request is placed (kube-scheduler's MostAllocated). Packing by
fractions fills a host to the top before opening another, whatever its
size, and keeps the untouched hosts whole for the largest flavors; packing
by Nova's absolute free amounts prefers the smallest hosts, which are the
first to strand a class (RAM full with disk left, or the reverse).

``most_allocated_weight_multiplier`` (default 0.0, off): positive packs; the
``pack`` profile of ``weigher_profile`` turns it on.
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


class MostAllocatedWeigher(AllocationWeigher):
    """Share of capacity in use after placement (positive: fuller is better)."""

    @dataclass(frozen=True)
    class Args(AllocationArgs):
        most_allocated_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of the share of a host's capacity in use once the request is "
            "placed (weighted over allocation_resource_weights). Positive packs "
            "instances onto the fullest hosts; 0 (the default) turns the weigher off.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Demand
    ) -> np.ndarray:
        return self.weighted_mean(self.used_after(view, candidates, state), state)
