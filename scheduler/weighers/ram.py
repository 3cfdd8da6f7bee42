"""RAMWeigher: prefers hosts with more free RAM.

The raw weight is the host's physically free memory in MB (total - reserved -
used), ignoring the allocation ratio, as Nova weighs ``free_ram_mb``.

``ram_weight_multiplier`` (default 1.0): a positive multiplier **spreads**
instances across hosts (the emptiest host wins); a negative one **packs**
them (the fullest host that still fits wins); 0 disables the weigher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.objects import MEMORY_MB
from scheduler.weighers.base import BY_MAX, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class RAMWeigher(BaseWeigher[bool]):
    """Free RAM (allocation ratio ignored)."""

    SCALING = BY_MAX

    @dataclass(frozen=True)
    class Args(PluginArgs):
        ram_weight_multiplier: float = multiplier(
            1.0,
            help="Weight of free RAM. Positive spreads instances across hosts, negative "
            "packs them onto the fullest hosts.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.free_ignoring_ratio(MEMORY_MB, candidates)
