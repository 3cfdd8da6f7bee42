"""Tenant-isolated aggregates: sends a project's requests only to the
aggregates reserved for it.

An aggregate is reserved for a project when one of its metadata keys starts
with ``filter_tenant_id`` (``filter_tenant_id``, ``filter_tenant_id2`` ...)
and names the project. When some aggregates are reserved for the request's
project, the request must land in one of them. When none are, the request
is not narrowed, unless ``placement_aggregate_required_for_tenants`` is set:
then it finds no host ("no aggregate for the project").

This keeps a project inside its aggregates; it does not keep other projects
out of them (the AggregateMultiTenancyIsolation host filter does that).
**We differ from Nova** in one detail: a value may list several projects,
comma-separated, as the host filter reads it; Nova's request filter compares
the whole value. Off by default, as Nova's
``limit_tenants_to_placement_aggregate``.
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

TENANT_KEY_PREFIX = "filter_tenant_id"


def reserved_for(aggregate: Aggregate, project_id: str) -> bool:
    """Does ``aggregate`` reserve itself for ``project_id``?"""
    return any(
        key.startswith(TENANT_KEY_PREFIX) and project_id in (p.strip() for p in value.split(","))
        for key, value in aggregate.metadata.items()
    )


class TenantAggregatesRequestFilter(RequestFilter):
    """Requires membership of an aggregate reserved for the request's project."""

    OPTION = "limit_tenants_to_placement_aggregate"

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        mine = frozenset(a.uuid for a in aggregates.values() if reserved_for(a, spec.project_id))
        if mine:
            return request.with_constraint(
                self.constraint(reasons.NOT_IN_TENANT_AGGREGATE, member_of=mine)
            )
        if self.settings.placement_aggregate_required_for_tenants:
            return request.with_constraint(
                self.constraint(reasons.NO_TENANT_AGGREGATE, member_of=frozenset())
            )
        return request
