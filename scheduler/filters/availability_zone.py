"""AvailabilityZoneFilter: rejects hosts outside the requested availability zone.

A host belongs to the zones named by its aggregates' ``availability_zone``
metadata; a host in none belongs to ``default_availability_zone``. A request
without a zone is not restricted.

Not among the default filters: the availability-zone request filter
(``[scheduler] query_placement_for_availability_zone``, on by default) narrows
the request to the zone before the candidate step, as Nova does since it
removed this filter; with that on, this filter removes nothing. Enable it
when the request filter is off, or requests for a zone go anywhere. Its
reason is the request filter's, so the counts read the same.

As Nova's filter, it keeps no host for a zone that no aggregate names (other
than the default zone), and for the default zone keeps the hosts in no zone
aggregate and those whose aggregates name it. Where zones differ from Nova is
in the request filter (:mod:`scheduler.request_filters.availability_zone`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine import reasons
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class AvailabilityZoneFilter(BaseFilter[str]):
    """Keeps hosts in the requested availability zone."""

    REASON = reasons.NOT_IN_ZONE

    def prepare(self, ctx: PlacementContext) -> str | None:
        return ctx.spec.availability_zone

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: str
    ) -> np.ndarray:
        return view.zone_mask(state, candidates)
