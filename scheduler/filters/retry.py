"""RetryFilter: rejects the hosts already tried for this request.

The request's ``ignore_hosts`` lists the hosts a previous attempt used (a
failed build, the source of a resize); they are matched case-insensitively,
as Nova matches ignored hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class RetryFilter(BaseFilter):
    """Keeps hosts not yet tried for this request."""

    REASON = "host already tried"

    def applies(self, ctx: PlacementContext) -> bool:
        return bool(ctx.spec.ignore_hosts)

    def passes(self, view: HostView, candidates: np.ndarray,
               ctx: PlacementContext) -> np.ndarray:
        tried = view.indices_of_ignoring_case(ctx.spec.ignore_hosts)
        return ~np.isin(candidates, tried)
