"""AggregateTypeAffinityFilter: rejects hosts in aggregates kept for other flavors.

An aggregate whose metadata has ``instance_type`` (flavor names,
comma-separated) takes only those flavors. A host passes when none of its
aggregates has the key, or the request's flavor name is among the names
they list (pooled over all its aggregates, spaces around names ignored), as
in Nova. Hosts outside such aggregates still take every flavor.

Evaluated once per distinct aggregate set among the candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

#: Aggregate metadata key listing the flavor names the aggregate takes.
TYPE_KEY = "instance_type"


class AggregateTypeAffinityFilter(BaseFilter[str]):
    """Keeps hosts whose aggregates admit the request's flavor."""

    REASON = "aggregate reserved for other flavors"

    def prepare(self, ctx: PlacementContext) -> str | None:
        return ctx.spec.flavor.name

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: str
    ) -> np.ndarray:
        def admits(metadata: Mapping[str, frozenset[str]]) -> bool:
            names = metadata.get(TYPE_KEY)
            return names is None or state in names

        return view.metadata_mask(admits, candidates)
