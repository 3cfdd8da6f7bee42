"""RetryFilter: nothing left to do; kept so that configs naming it still load.

Hosts already tried for a request (its ``ignore_hosts``: a failed build's or
resize's earlier attempts, a resize's source host) are the request's own
field, so :class:`~scheduler.request_filters.DestinationRequestFilter`, which
is always on, removes them before the candidate step, counted under "host
already tried", whatever host filters are enabled (as Nova's host manager
strips ignored hosts; Nova has no RetryFilter any more). This filter is no
longer among the defaults; listed in ``enabled_filters`` it keeps every host
and is skipped on every request, and the engine warns at start-up that it is
not needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class RetryFilter(BaseFilter[None]):
    """Keeps every host: hosts already tried are gone before the host filters."""

    NOT_NEEDED = "hosts already tried are removed before the candidate step"

    def prepare(self, ctx: PlacementContext) -> None:
        return None

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: None
    ) -> np.ndarray:
        return np.ones(len(candidates), dtype=bool)
