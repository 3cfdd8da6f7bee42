"""Request filters: policy turned into constraints before the candidate step.

Each module holds one filter that reads the request spec (and the
aggregates the host view knows) and returns a NEW
:class:`~scheduler.resource_request.ResourceRequest` with a
:class:`~scheduler.resource_request.HostConstraint` added; none changes the
request it was given. Each is turned on by its own ``[scheduler]`` option
(off or on as Nova's defaults are), except the destination filter, which
reads only the request's own fields and is always on; the pipeline
(:meth:`scheduler.engine.pipeline.Engine.__init__`) wires the enabled ones in
one fixed order, so the hosts they remove are counted before any capacity
question, and before the ``max_placement_results`` cut.

The names below are imported when first used (:mod:`scheduler.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler import lazy

if TYPE_CHECKING:
    from scheduler.request_filters.availability_zone import AvailabilityZoneRequestFilter
    from scheduler.request_filters.base import RequestFilter
    from scheduler.request_filters.destination import DestinationRequestFilter
    from scheduler.request_filters.disabled_computes import DisabledComputesRequestFilter
    from scheduler.request_filters.image_type import ImageTypeRequestFilter
    from scheduler.request_filters.isolated_aggregates import IsolatedAggregatesRequestFilter
    from scheduler.request_filters.tenant_aggregates import TenantAggregatesRequestFilter

__all__ = [
    "AvailabilityZoneRequestFilter",
    "DestinationRequestFilter",
    "DisabledComputesRequestFilter",
    "ImageTypeRequestFilter",
    "IsolatedAggregatesRequestFilter",
    "RequestFilter",
    "TenantAggregatesRequestFilter",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "AvailabilityZoneRequestFilter": "scheduler.request_filters.availability_zone",
            "DestinationRequestFilter": "scheduler.request_filters.destination",
            "DisabledComputesRequestFilter": "scheduler.request_filters.disabled_computes",
            "ImageTypeRequestFilter": "scheduler.request_filters.image_type",
            "IsolatedAggregatesRequestFilter": "scheduler.request_filters.isolated_aggregates",
            "RequestFilter": "scheduler.request_filters.base",
            "TenantAggregatesRequestFilter": "scheduler.request_filters.tenant_aggregates",
        },
    )
