"""DiskWeigher: prefers hosts with more free disk.

The raw weight is the host's physically free disk in GB (total - reserved -
used), ignoring the allocation ratio, as Nova weighs ``free_disk_mb``.

``disk_weight_multiplier`` (default 1.0): a positive multiplier **spreads**
instances across hosts (the emptiest disk wins); a negative one **packs**
them; 0 disables the weigher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.objects import DISK_GB
from scheduler.weighers.base import BY_MAX, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class DiskWeigher(BaseWeigher[bool]):
    """Free disk (allocation ratio ignored)."""

    SCALING = BY_MAX

    @dataclass(frozen=True)
    class Args(PluginArgs):
        disk_weight_multiplier: float = multiplier(
            1.0, help="Weight of free disk. Positive spreads, negative packs."
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.free_ignoring_ratio(DISK_GB, candidates)
