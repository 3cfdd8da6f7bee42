"""SameHostFilter: with the ``same_host`` scheduler hint, keeps only the hosts
running one of the instances it lists.

A host matches if any listed instance holds allocations on it (an
allocation on a nested provider counts for its root host); the store is
asked where each listed instance is, once per request (the per-request
state holds the answer). An instance the store does not know is on no
host, so a hint naming only unknown instances leaves no host, as in Nova.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

HINT = "same_host"


class HintedInstances:
    """A request's state for a hint: the instances it names and, read from the
    store when first asked (once per request), the rows of the hosts running them."""

    def __init__(self, uuids: tuple[str, ...]) -> None:
        self.uuids = uuids
        self._rows: np.ndarray | None = None

    @classmethod
    def of(cls, ctx: PlacementContext, hint: str) -> HintedInstances | None:
        """The instances the request's ``hint`` names; None when it names none."""
        uuids = tuple(ctx.spec.scheduler_hints.get(hint, ()))
        return cls(uuids) if uuids else None

    def rows(self, view: HostView) -> np.ndarray:
        if self._rows is None:
            self._rows = view.capabilities.instance_rows(self.uuids, view.index_of_uuid)
        return self._rows


class SameHostFilter(BaseFilter[HintedInstances]):
    """Keeps the hosts running an instance named by the ``same_host`` hint."""

    REASON = "not on the same host as the hinted instances"

    def prepare(self, ctx: PlacementContext) -> HintedInstances | None:
        return HintedInstances.of(ctx, HINT)

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: HintedInstances
    ) -> np.ndarray:
        return np.isin(candidates, state.rows(view))
