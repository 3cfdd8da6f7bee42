"""The engine's settings: every option the pipeline reads, passed in.

Options are declared and read elsewhere (oslo.config, in one place) and handed
to :class:`~scheduler.engine.pipeline.Engine` as one frozen
:class:`EngineSettings`. Nothing in the engine, the filters or the weighers
imports the global config, so a test builds exactly the settings it means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: Every filter this project ships, in the order they run by default
#: (cheapest and most selective first).
DEFAULT_FILTERS: tuple[str, ...] = (
    "ComputeFilter",
    "AvailabilityZoneFilter",
    "RetryFilter",
    "ServerGroupAffinityFilter",
    "ServerGroupAntiAffinityFilter",
)
#: Every weigher this project ships.
DEFAULT_WEIGHERS: tuple[str, ...] = ("RAMWeigher", "CPUWeigher", "DiskWeigher",
                                     "BuildFailureWeigher")


@dataclass(frozen=True)
class EngineSettings:
    """What the pipeline needs to know, fixed at construction.

    ``weight_multipliers`` is keyed by option name (``ram_weight_multiplier``);
    a weigher whose option is absent uses its own default. ``claim_attempts``
    bounds how many hosts one instance tries when claims conflict with other
    workers. ``services_refresh_interval`` bounds how often heartbeats (which
    are not in the change feed) are re-read. The request-filter switches
    are the ``[scheduler]`` options of the same names (see
    :mod:`scheduler.request_filters`).
    """

    enabled_filters: tuple[str, ...] = DEFAULT_FILTERS
    weighers: tuple[str, ...] = DEFAULT_WEIGHERS
    weight_multipliers: Mapping[str, float] = field(default_factory=dict)
    host_subset_size: int = 1
    max_attempts: int = 3
    max_placement_results: int = 1000
    randomize_candidates: bool = False
    service_down_time: float = 60.0
    claim_attempts: int = 5
    default_availability_zone: str = "nova"
    services_refresh_interval: float = 2.0
    # request filters (scheduler.request_filters), on or off as Nova's defaults
    compute_status_filter: bool = True
    query_placement_for_availability_zone: bool = True
    limit_tenants_to_placement_aggregate: bool = False
    placement_aggregate_required_for_tenants: bool = False
    enable_isolated_aggregate_filtering: bool = False
    query_placement_for_image_type_support: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled_filters", tuple(self.enabled_filters))
        object.__setattr__(self, "weighers", tuple(self.weighers))
        object.__setattr__(self, "weight_multipliers",
                           MappingProxyType({k: float(v)
                                             for k, v in self.weight_multipliers.items()}))
        for name in ("host_subset_size", "max_attempts", "max_placement_results",
                     "claim_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("service_down_time", "services_refresh_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if not self.default_availability_zone:
            raise ValueError("default_availability_zone must not be empty")

    def multiplier(self, option: str, default: float) -> float:
        """The configured multiplier for ``option``, else ``default``."""
        return self.weight_multipliers.get(option, default)
