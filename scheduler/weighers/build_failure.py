"""BuildFailureWeigher: sinks hosts whose recent builds failed.

The raw weight is the host's count of consecutive failed builds (a success
resets it), scaled between the candidates' minimum and maximum, and the
configured ``build_failure_weight_multiplier`` is applied **negated**, as in
Nova: with the default of 1,000,000 the hosts with the fewest failures score
0 and the one with the most -1,000,000, so a host with failures sinks below
every host without, whatever the other weighers say. A per-aggregate value of
the option is negated the same way (the lowest value wins before negation).

A positive multiplier **avoids** failing hosts (the larger, the more it
dominates the other weighers); a negative one would prefer them and makes
no sense; 0 disables the weigher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier
from scheduler.weighers.base import BY_RANGE, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


class BuildFailureWeigher(BaseWeigher[bool]):
    """Fewer recent build failures is better."""

    SCALING = BY_RANGE
    SIGN = -1.0

    @dataclass(frozen=True)
    class Args(PluginArgs):
        build_failure_weight_multiplier: float = multiplier(
            1_000_000.0,
            help="How strongly hosts with recent build failures are avoided. Each "
            "candidate's count of failed builds (reset by a success) is scaled to 0..1 "
            "between the fewest and the most failures among the candidates, multiplied "
            "by this and subtracted: the host with the most failures loses this much; 0 "
            "ignores failures.",
        )

    args: Args

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        return view.failed_builds.take(candidates)
