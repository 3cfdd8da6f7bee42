"""Availability zone: narrows a request for a zone to the hosts in the
aggregates whose ``availability_zone`` metadata names it.

A request for the default zone (``default_availability_zone``) that no
aggregate names goes to the hosts in no zone aggregate at all (a host in
none belongs to the default zone). A request without a zone is not narrowed.

When an aggregate does name the default zone, a request for it goes to that
aggregate's hosts only, as in Nova's request filter; AvailabilityZoneFilter
(a host filter, Nova's too) would also keep the hosts in no zone aggregate.

**We differ from Nova**: there a zone that no aggregate names restricts
nothing at the scheduler (its API checked zones earlier, and a request for
the default zone may land in any zone); here a request for an unknown zone
finds no host, every host counted under "unknown availability zone", and one
for the default zone stays out of the named zones. Nova's zone request
filter always runs; here it is on by default, behind
``query_placement_for_availability_zone``, so an operator who wants
AvailabilityZoneFilter's answer can turn it off.
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

AZ_KEY = "availability_zone"


class AvailabilityZoneRequestFilter(RequestFilter):
    """Requires membership of the requested zone's aggregates."""

    OPTION = "query_placement_for_availability_zone"

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        zone = spec.availability_zone
        if zone is None:
            return request
        zoned = {a.uuid: a.metadata[AZ_KEY] for a in aggregates.values() if a.metadata.get(AZ_KEY)}
        named = frozenset(uuid for uuid, z in zoned.items() if z == zone)
        if named:
            return request.with_constraint(self.constraint(reasons.NOT_IN_ZONE, member_of=named))
        if zone == self.settings.default_availability_zone:
            if not zoned:
                return request
            return request.with_constraint(
                self.constraint(reasons.NOT_IN_ZONE, forbidden_aggregates=frozenset(zoned))
            )
        return request.with_constraint(
            self.constraint(reasons.UNKNOWN_ZONE, member_of=frozenset())
        )
