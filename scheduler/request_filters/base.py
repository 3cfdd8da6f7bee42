"""The request filter interface.

A request filter answers, once per request, "what must the compute node be
for this request, given this policy?" and says it as a
:class:`~scheduler.resource_request.HostConstraint` on the root provider
(traits it must have or not have, aggregates it must or must not be in),
carrying the reason hosts failing it are counted under. It returns a new
request; it never changes the one it was given.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from scheduler.resource_request import HostConstraint

if TYPE_CHECKING:
    from scheduler.engine.settings import EngineSettings
    from scheduler.objects import RequestSpec
    from scheduler.resource_request import ResourceRequest
    from scheduler.store.base import Aggregate


class RequestFilter(abc.ABC):
    """One policy, turned into a constraint on the request."""

    #: The :class:`EngineSettings` field (and ``[scheduler]`` option) that turns it on.
    OPTION: ClassVar[str]

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def constraint(self, reason: str, **conditions: Any) -> HostConstraint:
        """A host constraint from this filter (its stage is the filter's name)."""
        return HostConstraint(reason=reason, stage=type(self).__name__, **conditions)

    @abc.abstractmethod
    def apply(
        self, request: ResourceRequest, spec: RequestSpec, aggregates: Mapping[str, Aggregate]
    ) -> ResourceRequest:
        """``request`` narrowed by this policy: a new request, or ``request``
        itself when the policy has nothing to say about ``spec``."""
