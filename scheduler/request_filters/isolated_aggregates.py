"""Aggregates isolated by traits: keeps requests that do not ask for a trait
out of the aggregates that reserve themselves for it.

An aggregate with metadata ``trait:<TRAIT>=required`` takes only requests
that require ``<TRAIT>`` (in any request group, from the flavor or the
image); with several such keys, only requests requiring all of them. Every
other request is kept out of it (a forbidden aggregate). This is how an
operator keeps, say, GPU hosts for GPU flavors. Off by default, as Nova's
``enable_isolated_aggregate_filtering``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.engine import reasons
from scheduler.request_filters.base import RequestFilter

if TYPE_CHECKING:
    from scheduler.objects import RequestSpec
    from scheduler.resource_request import ResourceRequest
    from scheduler.store.base import Aggregate

TRAIT_KEY_PREFIX = "trait:"


def isolating_traits(aggregate: Aggregate) -> frozenset[str]:
    """The traits an aggregate reserves itself for."""
    return frozenset(
        key[len(TRAIT_KEY_PREFIX) :]
        for key, value in aggregate.metadata.items()
        if key.startswith(TRAIT_KEY_PREFIX) and value == "required"
    )


class IsolatedAggregatesRequestFilter(RequestFilter):
    """Forbids the aggregates reserved for traits the request does not require."""

    OPTION = "enable_isolated_aggregate_filtering"

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        wanted = request.required_traits
        closed = frozenset(
            a.uuid
            for a in aggregates.values()
            if (traits := isolating_traits(a)) and not traits <= wanted
        )
        if not closed:
            return request
        return request.with_constraint(
            self.constraint(reasons.TRAIT_ISOLATED_AGGREGATE, forbidden_aggregates=closed)
        )
