"""What filters and weighers know about the request being placed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.objects import RequestSpec
from scheduler.resource_request import ResourceRequest


@dataclass
class PlacementContext:
    """The per-request input of every filter and weigher.

    ``group_members`` counts, per host, the members of ``spec.group``: those
    the store knows of when the request started, plus the instances placed
    earlier in this same request (so anti-affinity spreads a multi-instance
    request). ``now`` is the request's clock reading, for liveness.
    ``request`` is the typed resource request after the request filters
    (None only in tests that build a context by hand); ``resources`` is the
    amount per resource class one instance takes across all its groups.
    """

    spec: RequestSpec
    resources: Mapping[str, int]
    now: float
    group_members: Counter[str] = field(default_factory=Counter)
    request: ResourceRequest | None = None
