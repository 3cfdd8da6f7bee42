"""ComputeFilter: rejects hosts whose compute service is down or disabled.

A host is up when its service heartbeated within ``service_down_time``
seconds of the request (``|now - last_seen| <= service_down_time``, as Nova's
service group driver measures it); a host with no service record has never
heartbeated and is down. A disabled service takes no new instances.

The candidate step already removes down hosts, and disabled ones through the
disabled-computes request filter (the forbidden trait
COMPUTE_STATUS_DISABLED), both before ``max_placement_results`` cuts the
candidates. With both on, this filter removes nothing; it is what removes
disabled hosts when ``[scheduler] compute_status_filter`` is off (then after
the cut, as in Nova before its status trait).

In the engine a down host never reaches this filter (the candidate step
removes it first, with the same clock and window, as "host down"), so what
it removes there is disabled hosts, counted as "disabled": the same reason
the disabled-computes request filter counts them under, so NoValidHost and
``explain`` read the same whichever stage removed them. Run alone on every
host (``explain --only-filter``) it meets down hosts too, and says so:
"host down".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler import rules
from scheduler.engine import reasons
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class ComputeFilter(BaseFilter[bool]):
    """Keeps hosts whose service is up and enabled."""

    REASON = reasons.DISABLED

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return self._up(view, candidates, ctx) & ~view.disabled.take(candidates)

    def reasons(
        self, view: HostView, removed: np.ndarray, ctx: PlacementContext
    ) -> list[tuple[str, np.ndarray]]:
        """A host down is "host down" (as the candidate step says), not "disabled"."""
        up = self._up(view, removed, ctx)
        return [(reasons.HOST_DOWN, removed[~up]), (reasons.DISABLED, removed[up])]

    def _up(self, view: HostView, hosts: np.ndarray, ctx: PlacementContext) -> np.ndarray:
        return rules.is_up(ctx.now, view.last_seen.take(hosts), self.settings.service_down_time)
