"""The engine's settings: every option the pipeline reads, passed in.

Options are declared and read elsewhere (oslo.config, in one place; the host
filters' and weighers' own options in their modules, see
:mod:`scheduler.engine.plugins`) and handed to
:class:`~scheduler.engine.pipeline.Engine` as one frozen
:class:`EngineSettings`. Nothing in the engine, the filters or the weighers
imports the global config, so a test builds exactly the settings it means.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler.priority import PriorityClasses

#: The host filters that run by default, in order (cheapest and most
#: selective first), the one list every default derives from: Nova 34's
#: defaults (ComputeFilter, ComputeCapabilitiesFilter, ImagePropertiesFilter,
#: ServerGroupAntiAffinityFilter, ServerGroupAffinityFilter), plus the PCI and
#: NUMA filters. Hosts already tried (and a resize's source), like forced
#: hosts, are the request's own, removed by the always-on destination request
#: filter whatever filters are enabled (the RetryFilter that did it is not
#: needed any more). Availability zones, like disabled hosts, are the
#: request filters' (before the candidate step, on by default), as in Nova;
#: the AvailabilityZoneFilter stays available for a cloud that turns
#: ``query_placement_for_availability_zone`` off, and ComputeFilter removes
#: disabled hosts when ``compute_status_filter`` is off.
DEFAULT_FILTERS: tuple[str, ...] = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    # A request for PCI devices or a NUMA layout that no filter checks would be
    # placed anywhere; both filters cost nothing for requests without them.
    "PciPassthroughFilter",
    "NUMATopologyFilter",
)
#: Every weigher this project ships (Nova's default is all of its weighers);
#: those whose multiplier defaults to 0 cost nothing until an operator sets it.
DEFAULT_WEIGHERS: tuple[str, ...] = (
    "RAMWeigher",
    "CPUWeigher",
    "DiskWeigher",
    "IoOpsWeigher",
    "NumInstancesWeigher",
    "BuildFailureWeigher",
    "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher",
    "ImagePropertiesWeigher",
    "HypervisorVersionWeigher",
)

#: The weigher profiles (``[filter_scheduler] weigher_profile``), defined in
#: :mod:`scheduler.weighers.profiles`; ``nova`` is Nova-identical, ``spread``
#: the default (it fills the cloud further than Nova's weighers, and evenly).
WEIGHER_PROFILES: tuple[str, ...] = ("nova", "pack", "spread")
DEFAULT_WEIGHER_PROFILE = "spread"


@dataclass(frozen=True)
class PciAlias:
    """A name a flavor asks for PCI devices by (``pci_passthrough:alias = name:count``).

    ``product_id`` None matches any product of the vendor.
    """

    name: str
    vendor_id: str
    product_id: str | None = None

    @classmethod
    def from_json(cls, text: str) -> PciAlias:
        """Nova's ``[pci] alias`` form: ``{"name": "a1", "vendor_id": "8086",
        "product_id": "154d"}``; other keys (device_type, numa_policy) are ignored.

        :raises ValueError: naming what is wrong.
        """
        try:
            data: Any = json.loads(text)
        except ValueError:
            raise ValueError(f"PCI alias is not JSON: {text!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"PCI alias must be a JSON object: {text!r}")
        name, vendor, product = data.get("name"), data.get("vendor_id"), data.get("product_id")
        if not isinstance(name, str) or not name or not isinstance(vendor, str) or not vendor:
            raise ValueError(f"PCI alias needs a name and a vendor_id: {text!r}")
        if product is not None and not isinstance(product, str):
            raise ValueError(f"PCI alias product_id must be a string: {text!r}")
        return cls(name, vendor.lower(), product.lower() if product else None)


@dataclass(frozen=True)
class EngineSettings:
    """What the pipeline needs to know, fixed at construction.

    ``claim_attempts`` bounds how many hosts one instance tries when claims
    conflict with other workers. ``services_refresh_interval`` bounds how
    often heartbeats (which are not in the change feed) are re-read. The
    request-filter switches are the ``[scheduler]`` options of the same names
    (see :mod:`scheduler.request_filters`).

    ``plugin_options`` holds the host filters' and weighers' own options
    (the weighers' multipliers among them) by option name, as their ``Args``
    take them: each plugin declares its options in its own module and is
    built with its own arguments (:mod:`scheduler.engine.plugins`); an
    option absent here takes its declared default. Two plugin options stay
    here because more than the plugin reads them: ``default_availability_zone``
    (the availability-zone request filter and the host view as well as the
    AvailabilityZoneFilter) and ``pci_aliases`` (request validation as well
    as the PciPassthroughFilter; a ``[pci]`` option), which maps alias names
    to the devices they stand for. ``priority_classes`` are the ``[priority]``
    classes a request's flavor chooses from (request validation refuses an
    unknown one; explain and the notifications name the one chosen).
    """

    enabled_filters: tuple[str, ...] = DEFAULT_FILTERS
    weighers: tuple[str, ...] = DEFAULT_WEIGHERS
    weigher_profile: str = DEFAULT_WEIGHER_PROFILE
    plugin_options: Mapping[str, Any] = field(default_factory=dict)
    host_subset_size: int = 1
    max_attempts: int = 3
    max_placement_results: int = 1000
    randomize_candidates: bool = False
    #: Decide repeated request shapes from what their last decision found
    #: (scheduler.engine.shapecache): the same decisions.
    shape_cache: bool = False
    service_down_time: float = 60.0
    claim_attempts: int = 5
    default_availability_zone: str = "nova"
    services_refresh_interval: float = 2.0
    pci_aliases: Mapping[str, PciAlias] = field(default_factory=dict)
    priority_classes: PriorityClasses = field(default_factory=PriorityClasses)
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
        object.__setattr__(self, "plugin_options", MappingProxyType(dict(self.plugin_options)))
        object.__setattr__(self, "pci_aliases", MappingProxyType(dict(self.pci_aliases)))
        for name in (
            "host_subset_size",
            "max_attempts",
            "max_placement_results",
            "claim_attempts",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("service_down_time", "services_refresh_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.weigher_profile not in WEIGHER_PROFILES:
            raise ValueError(
                f"weigher_profile must be one of {', '.join(WEIGHER_PROFILES)}, "
                f"got {self.weigher_profile!r}"
            )
        if not self.default_availability_zone:
            raise ValueError("default_availability_zone must not be empty")
