"""ComputeCapabilitiesFilter: rejects hosts whose reported capabilities do not
meet the flavor's extra specs.

A spec ``capabilities:<key> = <requirement>`` is matched, in the operator
language of :mod:`scheduler.extra_specs`, against what the host's compute
reported under ``<key>`` (nested attributes joined with ``:``, e.g.
``capabilities:cpu_info:vendor``), or else against its stat of that name. A
host that reports neither fails. A spec without a namespace (``ssd = true``)
is matched the same way, but only on hosts that report that key: the others
pass it, as in Nova (the key is taken to be meant for the aggregates).

A key naming one of Nova's numeric ``HostState`` attributes
(``free_ram_mb``, ``vcpus_total``, ``num_instances``, ...: see
:mod:`scheduler.filters.host_state` for the list and their definitions) is
matched on every host, namespaced or not, against the value computed from
the host view's inventory columns the way Nova computes it (reserved
amounts count as used; ``free_ram_mb`` is negative on a host overcommitted
past its memory), whatever the compute reports under that name: Nova reads
the attribute first. Nova's other attributes (``host_ip``, ``updated``,
``metrics``, ...) are refused at validation. Reported values
are compared as the compute reports them, as in Nova:
``capabilities:hypervisor_type=QEMU`` matches a host reporting ``QEMU``, and
``=qemu`` does not (only the image properties filter canonicalises).

Each requirement is evaluated once per distinct reported value and
broadcast over the candidates by category code.

**We differ from Nova** in what the operator language says (see
:mod:`scheduler.extra_specs`): unreadable requirements are refused when the
request is validated, and a list-valued capability matches if one of its
elements does (Nova compares the list's Python text). Nova's ``HostState``
attributes that cannot be computed here (:data:`~scheduler.filters.host_state.UNSUPPORTED`:
``host``, ``host_ip``, ``updated``, ``metrics``, ``limits``, ``stats``, the
Nova objects) are refused when the request is validated, where Nova would
compare them. The numeric ones are Nova's definitions over Placement's
inventory, which holds disk in whole GB: a reserved disk or a swap that is
not a whole number of GB counts up to one GB more than Nova's compute node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import numeric_mask
from scheduler.extra_specs import CAPABILITIES_SCOPE, Requirement, parse, scoped_key
from scheduler.filters.base import BaseFilter
from scheduler.filters.host_state import host_state_mask

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView


def capability_specs(ctx: PlacementContext) -> list[tuple[str, Requirement, bool]]:
    """(host attribute, requirement, namespaced?) for each spec this filter reads."""
    out = []
    for key, text in ctx.spec.flavor.extra_specs.items():
        attribute = scoped_key(key, CAPABILITIES_SCOPE)
        if attribute is not None:
            out.append((attribute, parse(text), attribute != key))
    return out


class ComputeCapabilitiesFilter(BaseFilter[list[tuple[str, Requirement, bool]]]):
    """Keeps hosts whose capabilities satisfy the flavor's capability specs."""

    REASON = "capabilities do not match the flavor"

    def prepare(self, ctx: PlacementContext) -> list[tuple[str, Requirement, bool]] | None:
        return capability_specs(ctx) or None

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: list[tuple[str, Requirement, bool]],
    ) -> np.ndarray:
        caps = view.capabilities
        keep = np.ones(len(candidates), dtype=bool)
        for attribute, requirement, namespaced in state:
            host_state = host_state_mask(attribute, requirement, view, candidates)
            if host_state is not None:  # every host has it, as in Nova
                keep &= host_state
                continue
            reports = caps.reports_attribute(attribute, candidates)
            has_stat = caps.reports_stat(attribute, candidates) & ~reports
            ok = caps.attribute_mask(attribute, requirement.matches, candidates) & reports
            if has_stat.any():
                ok |= has_stat & numeric_mask(
                    caps.stat(attribute, candidates), requirement.matches
                )
            if not namespaced:  # only hosts that report the key are asked
                ok |= ~(reports | has_stat)
            keep &= ok
        return keep
