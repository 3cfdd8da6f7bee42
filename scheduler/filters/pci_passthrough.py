"""PciPassthroughFilter (simplified): rejects hosts without the free PCI
devices the flavor asks for.

A flavor asks with ``pci_passthrough:alias = <alias>[:<count>][, ...]``
(count 1 by default); each alias names a vendor and product (``[pci]
alias``). A host passes when, for every kind of device asked for, the free
devices it reports of that vendor and product number at least the count
asked (several aliases of one kind add up). A request that names no alias
is not filtered; one that names an alias the configuration does not define
is refused as invalid (Nova refuses it at its API).

**We differ from Nova** (simplified): free devices are what the compute
last reported, not counted down by this worker as it places instances, and
devices are not claimed (model them as nested providers with a custom
resource class for that); NUMA affinity, device types and physical
networks are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.settings import PciAlias
from scheduler.exceptions import InvalidRequest
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.objects import RequestSpec

ALIAS_SPEC = "pci_passthrough:alias"


def requested_aliases(spec: RequestSpec) -> dict[str, int]:
    """Devices asked for, per alias name.

    :raises InvalidRequest: the spec is not ``alias[:count][, ...]``.
    """
    text = spec.flavor.extra_specs.get(ALIAS_SPEC)
    if text is None:
        return {}
    wanted: dict[str, int] = {}
    for part in text.split(","):
        name, sep, count_text = part.strip().partition(":")
        try:
            count = int(count_text) if sep else 1
        except ValueError:
            count = 0
        if not name or count < 1:
            raise InvalidRequest(
                reason=f"flavor.extra_specs {ALIAS_SPEC!r} = {text!r}: each "
                "entry must be alias or alias:count with a positive count"
            )
        wanted[name] = wanted.get(name, 0) + count
    return wanted


def requested_devices(
    spec: RequestSpec, aliases: Mapping[str, PciAlias]
) -> dict[tuple[str, str | None], int]:
    """Devices asked for, per (vendor, product) (product None: any).

    :raises InvalidRequest: an alias the configuration does not define.
    """
    devices: dict[tuple[str, str | None], int] = {}
    for name, count in requested_aliases(spec).items():
        alias = aliases.get(name)
        if alias is None:
            # The message names the request's own alias only: the configured
            # ones are the cloud's, and a user reads this message.
            raise InvalidRequest(
                reason=f"flavor.extra_specs {ALIAS_SPEC!r} names PCI alias "
                f"{name!r}, which is not configured"
            )
        key = (alias.vendor_id, alias.product_id)
        devices[key] = devices.get(key, 0) + count
    return devices


class PciPassthroughFilter(BaseFilter[dict[tuple[str, str | None], int]]):
    """Keeps hosts reporting enough free devices of each kind asked for."""

    REASON = "PCI devices unavailable"

    def prepare(self, ctx: PlacementContext) -> dict[tuple[str, str | None], int] | None:
        if ALIAS_SPEC not in ctx.spec.flavor.extra_specs:
            return None
        return requested_devices(ctx.spec, self.settings.pci_aliases)

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: dict[tuple[str, str | None], int],
    ) -> np.ndarray:
        keep = np.ones(len(candidates), dtype=bool)
        for (vendor, product), count in state.items():
            keep &= view.capabilities.pci_free(vendor, product, candidates) >= count
        return keep
