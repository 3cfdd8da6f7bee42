"""HeadroomWeigher: keeps hosts able to take the largest flavor.

The largest flavor is ``headroom_flavor`` (``VCPU=16,MEMORY_MB=65536,DISK_GB=320``)
or, left empty (the default), the largest amount of each of VCPU, MEMORY_MB
and DISK_GB asked by the last ``headroom_window`` requests this weigher has
seen. The raw weight is 1 on a host where the request leaves as many of the
largest flavor fitting as before (it still fits as often, or never fitted),
0 where the request takes one such place away.

Why: spreading fills every host to the same level, and a cloud whose hosts
are all 60% full has no host with room for a flavor that needs 40%, although
40% of it is free; the first such request meets NoValidHost long before the
cloud is full. Small requests go to the hosts that cannot take the largest
flavor anyway, or where they cost no place for it; a host's last place for
the largest flavor is taken only when no other host will do (weighed, not
filtered: the weigher never refuses a host).

``headroom_weight_multiplier`` (default 0.0, off): positive keeps headroom.
The learned largest flavor depends on the requests seen, so two workers (or
a restarted one) may weigh a request slightly differently until their
windows fill; set ``headroom_flavor`` for decisions that depend on the view
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.plugins import PluginArgs, multiplier, number_pairs, option
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.weighers.base import AS_IS, BaseWeigher

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

#: The classes the learned largest flavor is made of.
LEARNED = (VCPU, MEMORY_MB, DISK_GB)


def amounts(pairs: list[str]) -> dict[str, int]:
    """``["VCPU=16", "MEMORY_MB=65536"]`` as a mapping.

    :raises ValueError: a pair is not ``RESOURCE_CLASS=amount`` with an amount > 0.
    """
    return number_pairs(
        pairs, int, lambda amount: amount >= 1, "RESOURCE_CLASS=amount (an amount > 0)"
    )


@dataclass(frozen=True)
class Headroom:
    """The largest flavor (classes and amounts) and the request's amounts of them."""

    classes: tuple[str, ...]
    largest: tuple[int, ...]
    demand: tuple[int, ...]


class HeadroomWeigher(BaseWeigher[Headroom]):
    """Places of the largest flavor kept (positive: a request that costs none is better)."""

    SCALING = AS_IS
    LEARNS = True  # the largest flavor, from the requests seen

    @dataclass(frozen=True)
    class Args(PluginArgs):
        headroom_weight_multiplier: float = multiplier(
            0.0,
            help="Weight of keeping room for the largest flavor: a host where the "
            "request leaves as many of it fitting as before scores 1, one where it "
            "takes such a place away 0. Positive keeps hosts able to take the largest "
            "flavor until nothing else fits; 0 (the default) turns the weigher off."
            "\n\nRelated options: headroom_flavor, headroom_window.",
        )
        headroom_flavor: Mapping[str, int] = option(
            {},
            parse=amounts,
            help="The largest flavor to keep room for, as RESOURCE_CLASS=amount pairs "
            "(e.g. VCPU=16,MEMORY_MB=65536,DISK_GB=320). Empty: the largest VCPU, "
            "MEMORY_MB and DISK_GB asked by the last headroom_window requests.",
        )
        headroom_window: int = option(
            1000,
            min=1,
            help="How many recent requests the learned largest flavor is taken from "
            "(when headroom_flavor is empty).",
        )

    args: Args

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._seen = np.zeros((self.args.headroom_window, len(LEARNED)), dtype=np.int64)
        self._next = 0
        # The window's largest amount per class, kept as rows come and go.
        self._peak = [0] * len(LEARNED)

    def prepare(self, ctx: PlacementContext) -> Headroom | None:
        """The largest flavor (remembering this request, when it is learned) and
        the request's share of it; None when there is no largest flavor yet."""
        resources = ctx.resource_request.resources
        if self.args.headroom_flavor:
            classes = tuple(self.args.headroom_flavor)
            largest = tuple(self.args.headroom_flavor.values())
        else:
            peak = self._learn([resources.get(rc, 0) for rc in LEARNED])
            classes = tuple(rc for rc, amount in zip(LEARNED, peak, strict=True) if amount > 0)
            largest = tuple(amount for amount in peak if amount > 0)
        if not classes:
            return None
        return Headroom(classes, largest, tuple(resources.get(rc, 0) for rc in classes))

    def _learn(self, amounts: list[int]) -> list[int]:
        """Put one request's amounts in the window (over its oldest row, once
        full) and return the window's largest per class: rescanned only when
        the row pushed out held a largest amount the new one does not match."""
        row = self._next % len(self._seen)
        self._next += 1
        gone = self._seen[row].tolist()
        self._seen[row] = amounts
        peak = self._peak
        if any(old == top > new for old, top, new in zip(gone, peak, amounts, strict=True)):
            self._peak = self._seen.max(axis=0).tolist()
        else:
            self._peak = [max(top, new) for top, new in zip(peak, amounts, strict=True)]
        return self._peak

    def raw(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: Headroom
    ) -> np.ndarray:
        # How many of the largest flavor fit (whole amounts: floor division),
        # the host's count being its classes' lowest. The request leaves as
        # many fitting where every class still has room for that many once it
        # is placed: (free - demand) // largest >= fits, that is free - demand
        # >= fits * largest (whole numbers), with no second division. A row
        # per class: the candidates are few enough that the number of array
        # operations is the cost.
        free = [view.free(rc, candidates) for rc in state.classes]
        fits = free[0] // state.largest[0]  # prepare gives one class at least
        for left, largest in zip(free[1:], state.largest[1:], strict=True):
            np.minimum(fits, left // largest, out=fits)
        keeps = np.ones(len(candidates), dtype=bool)
        for left, largest, demand in zip(free, state.largest, state.demand, strict=True):
            keeps &= left - demand >= fits * largest
        return keeps.astype(np.float64)
