"""HypervisorVersionWeigher: prefers hosts with newer hypervisors.

The raw weight is the hypervisor version the host's compute reports (an
integer, ``major * 1,000,000 + minor * 1,000 + patch``; 0 when unknown),
scaled between the candidates' minimum and maximum. Versions of different
hypervisor types do not compare: keep such hosts in separate aggregates
(per-aggregate multipliers can then differ).

``hypervisor_version_weight_multiplier`` (default 1.0): positive prefers
**newer** hypervisors (hosts already upgraded), negative older ones; 0
disables the weigher.
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


class HypervisorVersionWeigher(BaseWeigher[bool]):
    """Reported hypervisor version (positive multiplier: newer is better)."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        hypervisor_version_weight_multiplier: float = multiplier(
            1.0,
            help="Weight of the reported hypervisor version. Positive prefers newer "
            "hypervisors, negative older ones. Versions of different hypervisor types "
            "do not compare: keep such hosts in separate aggregates.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.capabilities.hypervisor_version(candidates)
