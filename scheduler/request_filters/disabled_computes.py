"""Disabled computes: keeps hosts whose compute service is disabled out of
the candidates, as the forbidden trait ``COMPUTE_STATUS_DISABLED``.

The store sets and clears that trait on a host's root provider in the same
atomic write that disables or enables its service
(:meth:`Store.set_service_disabled`), so the trait and the service record
never disagree. Because the hosts go before the ``max_placement_results``
cut, a cloud with many disabled hosts does not spend its candidate slots on
them (Nova's "disabled hosts trap"). On by default; Nova always runs it.
Turning it off leaves disabled hosts to the ComputeFilter, after the cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.engine import reasons
from scheduler.request_filters.base import RequestFilter
from scheduler.resource_request import COMPUTE_STATUS_DISABLED

if TYPE_CHECKING:
    from scheduler.objects import RequestSpec
    from scheduler.resource_request import ResourceRequest
    from scheduler.store.base import Aggregate


class DisabledComputesRequestFilter(RequestFilter):
    """Forbids the COMPUTE_STATUS_DISABLED trait on the compute node."""

    OPTION = "compute_status_filter"

    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        return request.with_constraint(
            self.constraint(
                reasons.DISABLED, forbidden_traits=frozenset({COMPUTE_STATUS_DISABLED})
            )
        )
