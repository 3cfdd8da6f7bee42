"""Request filters: policy turned into constraints before the candidate step.

Each module holds one filter that reads the request spec (and the
aggregates the host view knows) and returns a NEW
:class:`~scheduler.resource_request.ResourceRequest` with a
:class:`~scheduler.resource_request.HostConstraint` added; none changes the
request it was given. Each is turned on by its own ``[scheduler]`` option
(off or on as Nova's defaults are) and the pipeline runs the enabled ones in
one fixed order (:func:`enabled_request_filters`), so the hosts they remove
are counted before any capacity question, and before the
``max_placement_results`` cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.request_filters.availability_zone import AvailabilityZoneRequestFilter
from scheduler.request_filters.base import RequestFilter
from scheduler.request_filters.disabled_computes import DisabledComputesRequestFilter
from scheduler.request_filters.image_type import ImageTypeRequestFilter
from scheduler.request_filters.isolated_aggregates import IsolatedAggregatesRequestFilter
from scheduler.request_filters.tenant_aggregates import TenantAggregatesRequestFilter

if TYPE_CHECKING:
    from scheduler.engine.settings import EngineSettings

#: Every request filter, in the order the pipeline runs them: disabled
#: computes first (the most common reason a host is out, and the one the
#: cut must never be spent on), then the zone, the project's aggregates,
#: aggregates isolated by traits, and the image's disk format.
ORDER: tuple[type[RequestFilter], ...] = (
    DisabledComputesRequestFilter,
    AvailabilityZoneRequestFilter,
    TenantAggregatesRequestFilter,
    IsolatedAggregatesRequestFilter,
    ImageTypeRequestFilter,
)


def enabled_request_filters(settings: EngineSettings) -> list[RequestFilter]:
    """The request filters whose option is on, built, in :data:`ORDER`."""
    return [cls(settings) for cls in ORDER if getattr(settings, cls.OPTION)]


__all__ = ["ORDER", "AvailabilityZoneRequestFilter", "DisabledComputesRequestFilter",
           "ImageTypeRequestFilter", "IsolatedAggregatesRequestFilter", "RequestFilter",
           "TenantAggregatesRequestFilter", "enabled_request_filters"]
