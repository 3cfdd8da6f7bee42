"""CPUWeigher: prefers hosts with more free vCPUs.

The raw weight is Nova's count of free vCPUs, ``total * ratio - reserved -
used``: Nova's weigher takes ``vcpus_total * cpu_allocation_ratio -
vcpus_used``, and its resource tracker starts ``vcpus_used`` at the host's
reserved vCPUs, so the reserved ones are subtracted once, not scaled by the
ratio. This is not the claim's capacity (``(total - reserved) * ratio``, as
Placement has it, see :mod:`scheduler.rules`): with a ratio above 1 the
weigher counts a reserved vCPU as one, the claim as ``ratio``.

``cpu_weight_multiplier`` (default 1.0): a positive multiplier **spreads**
instances across hosts (the host with most free vCPUs wins); a negative one
**packs** them; 0 disables the weigher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.objects import VCPU
from scheduler.weighers.base import BY_MAX, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class CPUWeigher(BaseWeigher[bool]):
    """Free vCPUs (allocation ratio applied to the total, reserved subtracted once)."""

    SCALING = BY_MAX

    @dataclass(frozen=True)
    class Args(PluginArgs):
        cpu_weight_multiplier: float = multiplier(
            1.0,
            help="Weight of free vCPUs (allocation ratio included). Positive spreads, "
            "negative packs.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.free_of_overcommitted_total(VCPU, candidates)
