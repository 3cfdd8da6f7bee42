"""AlignmentWeigher: prefers the host whose free resources have the request's shape.

The raw weight is the cosine between the request's demand and the host's
free resources, each class taken as a share of the host's capacity and
scaled by its weight in ``allocation_resource_weights`` (the alignment score
of the Tetris packer, normalised so that it does not grow with the free
amount). A request heavy in RAM goes where RAM is relatively plentiful, a
disk-heavy one where disk is: what is left stays in proportion, and a host
is not left with one class used up and the others stranded. It says nothing
about how full a host is, so it goes with a packing or spreading weigher.

``alignment_weight_multiplier`` (default 0.0, off): positive prefers aligned
hosts.
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


class AlignmentWeigher(AllocationWeigher):
    """Cosine of demand and free resources, as shares of capacity (positive: aligned is better)."""

    @dataclass(frozen=True)
    class Args(AllocationArgs):
        alignment_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of how well a host's free resources (shares of its capacity, "
            "over allocation_resource_weights) line up with the request's demand. "
            "Positive sends each request where what it needs is relatively plentiful, "
            "so no class is stranded; 0 (the default) turns the weigher off.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Demand
    ) -> np.ndarray:
        used = view.used_fractions(state.classes, candidates)
        after = self.used_after(view, candidates, state)
        scale = np.sqrt(state.column)
        free = (1.0 - used) * scale
        want = (after - used) * scale
        if np.isnan(used).any():  # a class a host has none of counts for nothing
            free, want = np.nan_to_num(free), np.nan_to_num(want)
        norms = np.sqrt((free * free).sum(axis=0)) * np.sqrt((want * want).sum(axis=0))
        cosine = np.zeros(len(candidates))
        np.divide((free * want).sum(axis=0), norms, out=cosine, where=norms > 0)
        return cosine
