"""IoOpsFilter: rejects hosts with ``max_io_ops_per_host`` builds in progress.

Builds are I/O heavy (image download, disk creation); a host busy with many
builds is a poor place for one more. The count is what the compute last
reported (its ``num_io_ops`` stat) plus the instances this worker placed
there since (see :mod:`scheduler.engine.capabilities`); a host that reports
no count passes. As in Nova, a host passes with fewer than the limit.
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


class IoOpsFilter(BaseFilter[bool]):
    """Keeps hosts with fewer than ``max_io_ops_per_host`` builds in progress."""

    REASON = "too many builds in progress"

    @dataclass(frozen=True)
    class Args(PluginArgs):
        max_io_ops_per_host: int = option(
            8,
            min=0,
            help="IoOpsFilter rejects hosts with at least this many builds in progress; "
            "AggregateIoOpsFilter too, on hosts whose aggregates set no "
            "max_io_ops_per_host metadata (or one that is not an integer).",
        )

    args: Args

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.capabilities.io_ops(candidates) < self.limits(view, candidates)

    def limits(self, view: HostView, candidates: np.ndarray) -> float | np.ndarray:
        """The limit per candidate: ``max_io_ops_per_host`` for all (an aggregate
        variant reads it per host)."""
        return self.args.max_io_ops_per_host
