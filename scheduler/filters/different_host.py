"""DifferentHostFilter: with the ``different_host`` scheduler hint, rejects the
hosts running any of the instances it lists.

Where the listed instances are is read from the store once per request (an
allocation on a nested provider counts for its root host); an instance the
store does not know rules out no host, as in Nova.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter
from scheduler.filters.same_host import HintedInstances

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

HINT = "different_host"


class DifferentHostFilter(BaseFilter[HintedInstances]):
    """Rejects the hosts running an instance named by the ``different_host`` hint."""

    REASON = "on the same host as a hinted instance"

    def prepare(self, ctx: PlacementContext) -> HintedInstances | None:
        return HintedInstances.of(ctx, HINT)

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: HintedInstances
    ) -> np.ndarray:
        return ~np.isin(candidates, state.rows(view))
