"""Running one request filter on a request spec, for the request-filter tests."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.objects import RequestSpec
from scheduler.request_filters import RequestFilter
from scheduler.resource_request import HostConstraint
from scheduler.store.base import Aggregate
from tests.unit.factories import settings


def added(
    cls: type[RequestFilter],
    request: RequestSpec,
    aggregates: Sequence[Aggregate] = (),
    **options: object,
) -> HostConstraint | None:
    """The constraint the filter adds (None: it returns the request unchanged),
    checking that it leaves the request it was given as it was and names
    itself as the constraint's stage."""
    before = request.resource_request
    after = cls(settings(**options)).apply(before, request, {a.uuid: a for a in aggregates})
    assert before.host_constraints == ()
    if after == before:
        return None
    assert after.groups == before.groups
    [constraint] = after.host_constraints
    assert constraint.stage == cls.__name__  # the trace's stage after it
    return constraint
