"""Checks of a request spec for what the host filters will read, run at validation.

:func:`validate_request` refuses, with :class:`InvalidRequest` naming the
offending spec or property, what Nova would only discover inside a filter
(raising there and failing the request obscurely): operator-language
requirements no host can be checked against, Nova host attributes a
capability spec cannot name here (``capabilities:host_ip``), unknown architectures,
hypervisor types and VM modes, unreadable version requirements, NUMA
topologies no split can give, malformed or unconfigured PCI aliases, priority classes that are not
defined.

The manager calls it after :meth:`RequestSpec.from_primitive`, before
anything is selected or claimed.
"""

from __future__ import annotations

from scheduler.engine.settings import EngineSettings
from scheduler.extra_specs import validate_extra_specs
from scheduler.filters.host_state import refuse_unsupported_attributes
from scheduler.filters.numa_topology import requested_cells
from scheduler.filters.pci_passthrough import requested_aliases, requested_devices
from scheduler.image_meta import validate_image_properties
from scheduler.objects import RequestSpec


def validate_request(spec: RequestSpec, settings: EngineSettings | None = None) -> None:
    """:raises InvalidRequest: see the module docstring. With ``settings``,
    PCI aliases are also checked against the configured ones, and the
    priority class against the defined ones."""
    validate_extra_specs(spec.flavor.extra_specs)
    refuse_unsupported_attributes(spec.flavor.extra_specs)
    if spec.image is not None:
        validate_image_properties(spec.image.properties)
    requested_cells(spec)
    if settings is None:
        requested_aliases(spec)
    else:
        requested_devices(spec, settings.pci_aliases)
        settings.priority_classes.of(spec.flavor.extra_specs)
