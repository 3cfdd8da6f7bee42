"""AggregateNumInstancesFilter: NumInstancesFilter with the limit per aggregate.

An aggregate whose metadata sets ``max_instances_per_host`` (an integer)
overrides the ``max_instances_per_host`` option on its hosts; a host in
several such aggregates takes the lowest. As in Nova, a host whose
aggregates set none keeps the option, and so does one whose aggregates give
a value that is not an integer (logged once per aggregate change, not per
request). The count and the comparison are NumInstancesFilter's: a host
passes with fewer instances than its limit.

Evaluated once per distinct aggregate set, and broadcast by the set code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.num_instances import NumInstancesFilter

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView

#: The aggregate metadata key, named as the option it overrides.
LIMIT_KEY = "max_instances_per_host"


class AggregateNumInstancesFilter(NumInstancesFilter):
    """Keeps hosts with fewer instances than their aggregates' (or the configured) limit."""

    def limits(self, view: HostView, candidates: np.ndarray) -> float | np.ndarray:
        limit = self.args.max_instances_per_host
        return view.aggregate_lowest(LIMIT_KEY, limit, candidates, int)
