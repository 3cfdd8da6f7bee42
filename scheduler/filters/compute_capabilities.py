"""ComputeCapabilitiesFilter: rejects hosts whose reported capabilities do not
meet the flavor's extra specs.

A spec ``capabilities:<key> = <requirement>`` is matched, in the operator
language of :mod:`scheduler.extra_specs`, against what the host's compute
reported under ``<key>`` (nested attributes joined with ``:``, e.g.
``capabilities:cpu_info:vendor``), or else against its stat of that name, or
the live counts ``num_instances`` and ``num_io_ops``. A host that reports
none of them fails. A spec without a namespace (``ssd = true``) is matched
the same way, but only on hosts that report that key: the others pass it, as
in Nova (the key is taken to be meant for the aggregates). Reported values
are compared as the compute reports them, as in Nova:
``capabilities:hypervisor_type=QEMU`` matches a host reporting ``QEMU``, and
``=qemu`` does not (only the image properties filter canonicalises).

Each requirement is evaluated once per distinct reported value and
broadcast over the candidates by category code.

**We differ from Nova** in what the operator language says (see
:mod:`scheduler.extra_specs`): unreadable requirements are refused when the
request is validated, and a list-valued capability matches if one of its
elements does (Nova compares the list's Python text). Host attributes are
what the compute reports, not Nova's ``HostState`` fields: free RAM or disk
are asked of placement (resources), not of this filter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import numeric_mask
from scheduler.extra_specs import CAPABILITIES_SCOPE, Requirement, parse, scoped_key
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView

#: Live per-host counts a capability spec may name.
NUM_INSTANCES, NUM_IO_OPS = "num_instances", "num_io_ops"


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
            if attribute == NUM_INSTANCES:
                keep &= numeric_mask(view.consumers[candidates], requirement.matches)
                continue
            if attribute == NUM_IO_OPS:
                keep &= numeric_mask(caps.io_ops(candidates), requirement.matches)
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
