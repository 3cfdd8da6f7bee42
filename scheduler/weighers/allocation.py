"""What the fraction-based weighers share: the request's demand, and the share of
each host's capacity in use once the request is placed there.

Nova's RAM, CPU and disk weighers score absolute free amounts, so a large host
always looks emptier than a small one at the same fill: "spread" fills the
largest hosts first and "pack" the smallest. The weighers built on this
module score *fractions* of each host's capacity (allocation ratio applied),
as kube-scheduler's resource scoring does, so a 16-core host half full and a
64-core host half full look alike.

Their raw values already lie in [0, 1] and are comparable across requests,
so they are not rescaled across the candidates (:data:`~scheduler.weighers.base.AS_IS`):
a difference of 0.01 in fill stays 0.01 whatever the other candidates are,
and the multipliers of several such weighers mean what they say.

``allocation_resource_weights`` (default ``VCPU=1,MEMORY_MB=1,DISK_GB=1``),
shared by every weigher of this kind: which resource classes count, and how
much, in the weighted means and spreads. A host without capacity of a class
is weighed on the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, number_pairs, option
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.weighers.base import AS_IS, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

DEFAULT_WEIGHTS: Mapping[str, float] = {VCPU: 1.0, MEMORY_MB: 1.0, DISK_GB: 1.0}


def resource_weights(pairs: list[str]) -> dict[str, float]:
    """``["VCPU=1", "MEMORY_MB=2"]`` as a mapping; a weight of 0 leaves the class out.

    :raises ValueError: a pair is not ``RESOURCE_CLASS=number`` with a number >= 0.
    """
    return number_pairs(
        pairs, float, lambda weight: weight >= 0, "RESOURCE_CLASS=weight (a weight >= 0)"
    )


@dataclass(frozen=True)
class AllocationArgs(PluginArgs):
    """The option every fraction-based weigher shares (each adds its multiplier)."""

    allocation_resource_weights: Mapping[str, float] = option(
        DEFAULT_WEIGHTS,
        parse=resource_weights,
        help="Resource classes the fraction-based weighers (LeastAllocatedWeigher, "
        "MostAllocatedWeigher, BalancedAllocationWeigher, AlignmentWeigher) count, as "
        "RESOURCE_CLASS=weight pairs; a class left out (or weighted 0) does not count.",
    )


@dataclass(frozen=True)
class Demand:
    """What one instance of the request takes of each weighed class, and the
    classes' weights (summing to 1; ``column``: as a column, ``total``: their sum)."""

    classes: tuple[str, ...]
    amounts: tuple[int, ...]
    weights: np.ndarray
    column: np.ndarray
    total: float


class AllocationWeigher(BaseWeigher[Demand]):
    """A weigher of fractions of capacity (see the module docstring)."""

    SCALING = AS_IS

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # The classes and weights are the options': the same for every request.
        weights = {rc: w for rc, w in self.args.allocation_resource_weights.items() if w > 0}
        self._classes = tuple(weights)
        total = sum(weights.values())
        self._weights = np.array([weights[rc] / total for rc in self._classes])

    def prepare(self, ctx: PlacementContext) -> Demand | None:
        """The classes weighed and the request's amount of each; None when no
        class has a weight."""
        if not self._classes:
            return None
        resources = ctx.resource_request.resources
        weights = self._weights
        return Demand(
            self._classes,
            tuple(resources.get(rc, 0) for rc in self._classes),
            weights,
            weights[:, None],
            float(weights.sum()),
        )

    @staticmethod
    def weighted_mean(values: np.ndarray, demand: Demand) -> np.ndarray:
        """Per host (column), the mean of ``values`` (classes x hosts) with the
        classes' weights, NaN cells left out (0 where every cell is NaN)."""
        if not np.isnan(values).any():  # every host has every class: one weighted sum
            return (values * demand.column).sum(axis=0) / demand.total
        present = ~np.isnan(values)
        weights = demand.weights[:, None] * present
        total = weights.sum(axis=0)
        summed = np.where(present, values, 0.0) * weights
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, summed.sum(axis=0) / total, 0.0)

    @staticmethod
    def used_after(view: HostView, candidates: np.ndarray, demand: Demand) -> np.ndarray:
        """Share of each class in use once the request is placed (classes x hosts)."""
        return view.used_fractions(demand.classes, candidates, demand.amounts)
