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


class RetryFilter(BaseFilter[tuple[str, ...]]):
    """Keeps hosts not yet tried for this request."""

    REASON = "host already tried"

    def prepare(self, ctx: PlacementContext) -> tuple[str, ...] | None:
        return tuple(ctx.spec.ignore_hosts) or None

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: tuple[str, ...]
    ) -> np.ndarray:
        tried = view.indices_of_ignoring_case(state)
        return ~np.isin(candidates, tried)
