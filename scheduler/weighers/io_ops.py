"""IoOpsWeigher: prefers hosts with fewer builds in progress.

The raw weight is the host's builds in progress (its reported ``num_io_ops``
plus what this worker placed there since; see
:mod:`scheduler.engine.capabilities`), scaled by the candidates' maximum as
Nova scales it.

``io_ops_weight_multiplier`` (default -1.0): a negative multiplier **spreads**
the I/O of builds (the quietest host wins); a positive one prefers busy
hosts; 0 disables the weigher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.weighers.base import BY_MAX, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class IoOpsWeigher(BaseWeigher[bool]):
    """Builds in progress (negative multiplier: fewer is better)."""

    SCALING = BY_MAX

    @dataclass(frozen=True)
    class Args(PluginArgs):
        io_ops_weight_multiplier: float = multiplier(
            -1.0,
            help="Weight of the builds in progress on a host. Negative (the default) "
            "prefers quieter hosts, spreading the I/O of builds; positive prefers busy "
            "ones.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.capabilities.io_ops(candidates)
