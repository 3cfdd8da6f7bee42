"""BuildFailureWeigher: sinks hosts whose recent builds failed.

The raw weight is minus the host's count of consecutive failed builds (a
success resets it), scaled between the candidates' minimum and maximum, as
in Nova. With the default ``build_failure_weight_multiplier`` of 1,000,000 a
host with failures sinks below every host without, whatever the other
weighers say: one recent failure weighs -1,000,000 relative to a clean host.

A positive multiplier **avoids** failing hosts (the larger, the more it
dominates the other weighers); a negative one would prefer them and makes
no sense; 0 disables the weigher.
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


class BuildFailureWeigher(BaseWeigher[bool]):
    """Fewer recent build failures is better."""

    SCALING = BY_RANGE

    @dataclass(frozen=True)
    class Args(PluginArgs):
        build_failure_weight_multiplier: float = multiplier(
            1_000_000.0,
            help="How strongly hosts with recent build failures are avoided. The host's "
            "count of failed builds (reset by a success) is multiplied by this and "
            "subtracted; 0 ignores failures.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return -view.failed_builds[candidates]
