"""AggregateInstanceExtraSpecsFilter: rejects hosts whose aggregates' metadata
does not meet the flavor's extra specs.

A spec ``aggregate_instance_extra_specs:<key> = <requirement>``, or a spec
without a namespace (``ssd = true``), needs the host's aggregates to carry
metadata ``<key>`` with a value that matches the requirement (operator
language of :mod:`scheduler.extra_specs`). As in Nova, the metadata of all a
host's aggregates is pooled and split on commas, one matching value
suffices, and a host in no aggregate (or in aggregates without that key)
fails. Specs in other namespaces (``hw:``, ``trait:``, ``capabilities:``)
are not this filter's.

Hosts share a handful of aggregate sets, so each spec is evaluated once per
distinct set among the candidates and broadcast by the set code.

**We differ from Nova**: unreadable requirements are refused when the
request is validated; and ``group_policy``, ``required[N]`` and
``member_of[N]``, which the candidate step reads (granular request groups,
traits, aggregates), are not taken for aggregate keys (Nova would reject
every host for them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from scheduler.extra_specs import AGGREGATE_SCOPE, Requirement, parse, scoped_key
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


def aggregate_specs(ctx: PlacementContext) -> list[tuple[str, Requirement]]:
    """(metadata key, requirement) for each spec this filter reads."""
    out = []
    for key, text in ctx.spec.flavor.extra_specs.items():
        metadata_key = scoped_key(key, AGGREGATE_SCOPE)
        if metadata_key is not None:
            out.append((metadata_key, parse(text)))
    return out


class AggregateInstanceExtraSpecsFilter(BaseFilter[list[tuple[str, Requirement]]]):
    """Keeps hosts whose aggregate metadata satisfies the flavor's specs."""

    REASON = "aggregate metadata does not match the flavor"

    def prepare(self, ctx: PlacementContext) -> list[tuple[str, Requirement]] | None:
        return aggregate_specs(ctx) or None

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: list[tuple[str, Requirement]],
    ) -> np.ndarray:
        def meets(metadata: Mapping[str, frozenset[str]]) -> bool:
            return all(
                any(req.matches(value) for value in metadata.get(key, ())) for key, req in state
            )

        return view.metadata_mask(meets, candidates)
