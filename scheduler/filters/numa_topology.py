"""NUMATopologyFilter (simplified): rejects hosts whose NUMA cells cannot hold
the guest's NUMA nodes.

A request asks for a guest NUMA topology with ``hw:numa_nodes = N`` (or the
image's ``hw_numa_nodes``), or implicitly (one node) with
``hw:cpu_policy = dedicated``. Its vCPUs and memory are split evenly over
the nodes, or as ``hw:numa_cpus.<n>`` (CPU ids, ``0-3,^2,5``) and
``hw:numa_mem.<n>`` (MB) say for every node. A host passes when each guest
node fits a *different* host cell with at least its CPUs and memory (a
matching, checked by Hall's condition over the few guest nodes); a host
that reports no cells fails a request with a topology; a request without
one is not filtered.

The question is array operations over the candidates' cells (padded to the
widest host), a loop only over subsets of the guest's nodes (at most
:data:`MAX_NODES`).

**We differ from Nova** (simplified): cells are checked against their size,
not their free CPUs and memory; usage is accounted per host by the claim
in the store, not per cell (model cells as nested providers for that); CPU
pinning, huge pages, emulator threads and PCI-NUMA affinity are not
modelled. As in Nova, a guest node never spans two host cells.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.exceptions import InvalidRequest
from scheduler.filters.base import BaseFilter

if TYPE_CHECKING:
    from scheduler.engine.context import PlacementContext
    from scheduler.engine.hostview import HostView
    from scheduler.objects import RequestSpec

#: The most guest NUMA nodes a request may ask for.
MAX_NODES = 8


def _spec(spec: RequestSpec, flavor_key: str, image_key: str) -> str | None:
    value = spec.flavor.extra_specs.get(flavor_key)
    if value is None and spec.image is not None:
        value = spec.image.properties.get(image_key)
    return value


def _cpu_ids(text: str, what: str) -> set[int]:
    """``0-3,^2,5`` -> {0, 1, 3, 5}."""
    ids: set[int] = set()
    excluded: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        target = excluded if part.startswith("^") else ids
        part = part.lstrip("^")
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise InvalidRequest(
                reason=f"{what} = {text!r} is not a CPU list such as '0-3,^2,5'"
            ) from None
        if first < 0 or last < first:
            raise InvalidRequest(reason=f"{what} = {text!r} has an empty or negative range")
        target.update(range(first, last + 1))
    return ids - excluded


def requested_cells(spec: RequestSpec) -> tuple[tuple[int, int], ...]:
    """Per guest NUMA node, (vCPUs, memory MB); () when no topology is asked for.

    :raises InvalidRequest: naming the spec that cannot be met by any split.
    """
    nodes_text = _spec(spec, "hw:numa_nodes", "hw_numa_nodes")
    policy = _spec(spec, "hw:cpu_policy", "hw_cpu_policy")
    if nodes_text is None and policy != "dedicated":
        return ()
    vcpus, memory = spec.flavor.vcpus, spec.flavor.memory_mb
    nodes = 1
    if nodes_text is not None:
        try:
            nodes = int(nodes_text)
        except ValueError:
            nodes = 0
        if not 1 <= nodes <= min(MAX_NODES, vcpus):
            raise InvalidRequest(
                reason=f"hw:numa_nodes = {nodes_text!r} must be a whole number "
                f"from 1 to {min(MAX_NODES, vcpus)} (at most one per vCPU)"
            )
    cpus = {n: _spec(spec, f"hw:numa_cpus.{n}", f"hw_numa_cpus.{n}") for n in range(nodes)}
    mems = {n: _spec(spec, f"hw:numa_mem.{n}", f"hw_numa_mem.{n}") for n in range(nodes)}
    if not any(v is not None for v in (*cpus.values(), *mems.values())):
        if vcpus % nodes or memory % nodes:
            raise InvalidRequest(
                reason=f"hw:numa_nodes = {nodes} does not divide the flavor's "
                f"{vcpus} vCPUs and {memory} MB evenly: give hw:numa_cpus.N "
                "and hw:numa_mem.N for every node"
            )
        return tuple((vcpus // nodes, memory // nodes) for _ in range(nodes))
    missing = [n for n in range(nodes) if cpus[n] is None or mems[n] is None]
    if missing:
        raise InvalidRequest(
            reason=f"hw:numa_cpus.N and hw:numa_mem.N must be given for every "
            f"node; node {missing[0]} lacks one"
        )
    seen: set[int] = set()
    cells = []
    for n in range(nodes):
        ids = _cpu_ids(cpus[n] or "", f"hw:numa_cpus.{n}")
        if not ids or ids & seen or max(ids) >= vcpus:
            raise InvalidRequest(
                reason=f"hw:numa_cpus.{n} = {cpus[n]!r} must name vCPUs "
                f"below {vcpus} that no other node names"
            )
        seen |= ids
        try:
            mem = int(mems[n] or "")
        except ValueError:
            mem = 0
        if mem < 1:
            raise InvalidRequest(
                reason=f"hw:numa_mem.{n} = {mems[n]!r} must be a positive number of MB"
            )
        cells.append((len(ids), mem))
    if len(seen) != vcpus or sum(m for _, m in cells) != memory:
        raise InvalidRequest(
            reason=f"the NUMA nodes must hold exactly the flavor's {vcpus} vCPUs and {memory} MB"
        )
    return tuple(cells)


def cells_fit(
    cell_cpus: np.ndarray, cell_mem: np.ndarray, wanted: tuple[tuple[int, int], ...]
) -> np.ndarray:
    """Per host (row), whether each wanted (cpus, memory) fits a distinct cell."""
    hosts = cell_cpus.shape[0]
    if not wanted:
        return np.ones(hosts, dtype=bool)
    fit = [(cell_cpus >= cpus) & (cell_mem >= mem) for cpus, mem in wanted]
    if len(set(wanted)) == 1:  # identical nodes: enough fitting cells is enough
        return fit[0].sum(axis=1) >= len(wanted)
    # Hall's condition: every subset of guest nodes fits at least as many cells.
    ok = np.ones(hosts, dtype=bool)
    unions: list[np.ndarray] = [np.zeros_like(fit[0])]
    for subset in range(1, 1 << len(wanted)):
        low = (subset & -subset).bit_length() - 1
        unions.append(unions[subset & (subset - 1)] | fit[low])
        ok &= unions[subset].sum(axis=1) >= subset.bit_count()
    return ok


class NUMATopologyFilter(BaseFilter[tuple[tuple[int, int], ...]]):
    """Keeps hosts whose NUMA cells can each hold one of the guest's nodes."""

    REASON = "NUMA topology does not fit"

    def prepare(self, ctx: PlacementContext) -> tuple[tuple[int, int], ...] | None:
        return requested_cells(ctx.spec) or None

    def passes(
        self,
        view: HostView,
        candidates: np.ndarray,
        ctx: PlacementContext,
        state: tuple[tuple[int, int], ...],
    ) -> np.ndarray:
        cell_cpus, cell_mem = view.capabilities.numa_cells(candidates)
        return cells_fit(cell_cpus, cell_mem, state)
