"""CPUWeigher: prefers hosts with more free vCPUs.

The raw weight is the host's free VCPU capacity with the allocation ratio
applied (``(total - reserved) * ratio - used``), as Nova's CPU weigher uses
the ratio (Nova does not subtract reserved vCPUs; here the same capacity as
the claim is used, so a reserved vCPU is never counted as free).

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
    """Free vCPUs (allocation ratio applied)."""

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
        return view.free(VCPU, candidates)
