"""NumInstancesFilter: rejects hosts already running ``max_instances_per_host``
instances.

The count is the host's consumers in the store (instances and in-flight
migrations holding allocations there), kept current within a request as
this worker places instances. As in Nova, a host passes with fewer than the
limit, so a limit of 0 rejects every host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class NumInstancesFilter(BaseFilter):
    """Keeps hosts with fewer than ``max_instances_per_host`` instances."""

    REASON = "too many instances"

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        return view.consumers[candidates] < self.settings.max_instances_per_host
