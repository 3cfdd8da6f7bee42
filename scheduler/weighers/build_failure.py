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

from typing import TYPE_CHECKING

import numpy as np

from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class BuildFailureWeigher(BaseWeigher):
    """Fewer recent build failures is better."""

    MULTIPLIER_OPTION = "build_failure_weight_multiplier"
    DEFAULT_MULTIPLIER = 1_000_000.0
    SCALING = BY_RANGE

    def raw(self, view: HostView, candidates: np.ndarray,
            ctx: PlacementContext) -> np.ndarray:
        return -view.failed_builds[candidates]
