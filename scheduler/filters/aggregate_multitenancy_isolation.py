"""AggregateMultiTenancyIsolation: rejects hosts in aggregates reserved for
other projects.

An aggregate whose metadata has ``filter_tenant_id`` (or any key starting
with it: ``filter_tenant_id_2``, ...; values comma-separated) takes only
instances of the projects it lists. A host passes when none of its
aggregates lists projects, or the request's project is among those they
list (pooled over all its aggregates), as in Nova. Hosts outside such
aggregates still take every project: to keep a project *inside* its
aggregates, use the tenant-isolation request filter as well.

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

#: Aggregate metadata keys starting with this list the projects it takes.
TENANT_KEY = "filter_tenant_id"


class AggregateMultiTenancyIsolation(BaseFilter[bool]):
    """Keeps hosts whose aggregates admit the request's project."""

    REASON = "aggregate reserved for other projects"

    def passes(
        self, view: HostView, candidates: np.ndarray, ctx: PlacementContext, state: bool
    ) -> np.ndarray:
        project = ctx.spec.project_id

        def admits(metadata: Mapping[str, frozenset[str]]) -> bool:
            projects = {
                listed
                for key, values in metadata.items()
                if key.startswith(TENANT_KEY)
                for listed in values
            }
            return not projects or project in projects

        return view.metadata_mask(admits, candidates)
