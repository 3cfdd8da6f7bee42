"""NumInstancesFilter: rejects hosts already running ``max_instances_per_host``
instances.

The count is the host's consumers in the store (instances and in-flight
migrations holding allocations there), kept current within a request as
this worker places instances. As in Nova, a host passes with fewer than the
limit, so a limit of 0 rejects every host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, option
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class NumInstancesFilter(BaseFilter[bool]):
    """Keeps hosts with fewer than ``max_instances_per_host`` instances."""

    REASON = "too many instances"

    @dataclass(frozen=True)
    class Args(PluginArgs):
        max_instances_per_host: int = option(
            50,
            min=0,
            help="NumInstancesFilter rejects hosts holding at least this many instances "
            "(0 rejects every host); AggregateNumInstancesFilter too, on hosts whose "
            "aggregates set no max_instances_per_host metadata (or one that is not an "
            "integer).",
        )

    args: Args

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.consumers[candidates] < self.limits(view, candidates)

    def limits(self, view: HostView, candidates: np.ndarray) -> float | np.ndarray:
        """The limit per candidate: ``max_instances_per_host`` for all (an aggregate
        variant reads it per host)."""
        return self.args.max_instances_per_host
