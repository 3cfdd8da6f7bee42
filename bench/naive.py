"""The baseline: a deliberately naive, Nova-style scheduler, in-process.

One Python object per host (like Nova's ``HostState``) and one Python loop
over the hosts per filter and per weigher (like Nova's ``BaseFilterHandler``
and ``BaseWeightHandler``), applying the same default stages as
:class:`scheduler.engine.Engine`, with the same semantics:

* candidates: hosts with room for the request (free capacity, max_unit,
  min_unit, step size per resource class), the first ``max_placement_results``;
* filters: compute service up and enabled, availability zone, hosts already
  tried, strict server-group affinity and anti-affinity;
* weighers: free RAM and disk (ratio ignored), free vCPU (ratio applied to
  the total, reserved subtracted once),
  build failures; each normalised across the candidates and multiplied;
* pick the best, consume it in the host object, then alternates (best first,
  each with room).

It never claims in a store: it is the cost of the decision alone, measured in
the same run as the engine so results are ratios. It is not Nova (no
placement round trip, no objects layer, no per-filter logging); the issue's
figures for Nova itself (about 0.4 s per decision at 1,000 hosts and 3.9 s
at 10,000) were measured separately and are quoted, not re-measured.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scheduler.objects import DISK_GB, MEMORY_MB, VCPU, RequestSpec
from scheduler.store import Aggregate, Provider, Service

ZONE_KEY = "availability_zone"


@dataclass
class HostState:
    """What the naive scheduler knows about one host (Nova's HostState, cut down)."""

    name: str
    uuid: str
    total: dict[str, int]
    reserved: dict[str, int]
    ratio: dict[str, float]
    max_unit: dict[str, int]
    min_unit: dict[str, int]
    step: dict[str, int]
    used: dict[str, int]
    zones: frozenset[str]
    last_seen: float
    disabled: bool
    failed_builds: int
    instances: int = 0
    group_members: Counter[str] = field(default_factory=Counter)

    def capacity(self, rc: str) -> int:
        return int((self.total[rc] - self.reserved[rc]) * self.ratio[rc])

    def free(self, rc: str) -> int:
        return self.capacity(rc) - self.used.get(rc, 0)

    def free_ignoring_ratio(self, rc: str) -> int:
        return self.total.get(rc, 0) - self.reserved.get(rc, 0) - self.used.get(rc, 0)

    def consume(self, resources: dict[str, int]) -> None:
        for rc, amount in resources.items():
            self.used[rc] = self.used.get(rc, 0) + amount
        self.instances += 1


def host_states(
    providers: Iterable[Provider],
    aggregates: Iterable[Aggregate],
    services: Iterable[Service],
    default_zone: str = "nova",
) -> list[HostState]:
    """One object per root provider, from what the store lists."""
    aggs = {a.uuid: a for a in aggregates}
    by_host = {s.host: s for s in services}
    out = []
    for p in providers:
        if p.parent_uuid is not None:
            continue
        zones = frozenset(
            aggs[a].metadata[ZONE_KEY]
            for a in p.aggregates
            if a in aggs and aggs[a].metadata.get(ZONE_KEY)
        )
        svc = by_host.get(p.name)
        out.append(
            HostState(
                name=p.name,
                uuid=p.uuid,
                total={rc: inv.total for rc, inv in p.inventories.items()},
                reserved={rc: inv.reserved for rc, inv in p.inventories.items()},
                ratio={rc: inv.allocation_ratio for rc, inv in p.inventories.items()},
                max_unit={rc: inv.effective_max_unit for rc, inv in p.inventories.items()},
                min_unit={rc: inv.min_unit for rc, inv in p.inventories.items()},
                step={rc: inv.step_size for rc, inv in p.inventories.items()},
                used=dict(p.usages),
                zones=zones or frozenset({default_zone}),
                last_seen=svc.last_seen if svc else -math.inf,
                disabled=svc.disabled if svc else False,
                failed_builds=svc.failed_builds if svc else 0,
            )
        )
    return out


@dataclass
class Request:
    """What the filters see of the request (Nova passes its RequestSpec around)."""

    spec: RequestSpec
    now: float
    group_size: int = 0  # members the request's group has so far


# --- filters: one object per filter, one host at a time -----------------------------


class ComputeFilter:
    def __init__(self, service_down_time: float) -> None:
        self.service_down_time = service_down_time

    def host_passes(self, host: HostState, req: Request) -> bool:
        return abs(req.now - host.last_seen) <= self.service_down_time and not host.disabled


class AvailabilityZoneFilter:
    def host_passes(self, host: HostState, req: Request) -> bool:
        zone = req.spec.availability_zone
        return zone is None or zone in host.zones


class RetryFilter:
    def host_passes(self, host: HostState, req: Request) -> bool:
        return host.name.casefold() not in {h.casefold() for h in req.spec.ignore_hosts}


class ServerGroupAffinityFilter:
    def host_passes(self, host: HostState, req: Request) -> bool:
        group = req.spec.group
        if group is None or group.policy != "affinity" or not req.group_size:
            return True
        return host.group_members[group.uuid] > 0


class ServerGroupAntiAffinityFilter:
    def host_passes(self, host: HostState, req: Request) -> bool:
        group = req.spec.group
        if group is None or group.policy != "anti-affinity":
            return True
        return host.group_members[group.uuid] < group.max_server_per_host


# --- weighers: a raw number per host, normalised by the handler ---------------------


class RAMWeigher:
    minval_by_max = True

    def weigh(self, host: HostState) -> float:
        return host.free_ignoring_ratio(MEMORY_MB)


class CPUWeigher:
    minval_by_max = True

    def weigh(self, host: HostState) -> float:
        if VCPU not in host.total:
            return 0
        scaled = host.total[VCPU] * host.ratio[VCPU]
        return scaled - host.reserved[VCPU] - host.used.get(VCPU, 0)


class DiskWeigher:
    minval_by_max = True

    def weigh(self, host: HostState) -> float:
        return host.free_ignoring_ratio(DISK_GB)


class BuildFailureWeigher:
    minval_by_max = False
    multiplier = 1_000_000.0

    def weigh(self, host: HostState) -> float:
        return -host.failed_builds


def _normalise(values: list[float], by_max: bool) -> list[float]:
    if by_max:
        values = [max(v, 0.0) for v in values]
        top = max(values, default=0.0)
        return [v / top if top > 0 else 0.0 for v in values]
    low, high = min(values, default=0.0), max(values, default=0.0)
    if not high > low:
        return [0.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


class NaiveScheduler:
    """Filter, weigh, pick and consume, with a loop over host objects at every stage."""

    def __init__(
        self,
        hosts: list[HostState],
        *,
        max_placement_results: int = 1000,
        max_attempts: int = 3,
        service_down_time: float = 60.0,
        seed: int = 0,
    ) -> None:
        self.hosts = hosts
        self.max_placement_results = max_placement_results
        self.max_attempts = max_attempts
        self.filters = [
            ComputeFilter(service_down_time),
            AvailabilityZoneFilter(),
            RetryFilter(),
            ServerGroupAffinityFilter(),
            ServerGroupAntiAffinityFilter(),
        ]
        self.weighers = [RAMWeigher(), CPUWeigher(), DiskWeigher(), BuildFailureWeigher()]
        self._random = random.Random(seed)

    def _fits(self, host: HostState, resources: dict[str, int]) -> bool:
        for rc, amount in resources.items():
            if rc not in host.total:
                return False
            if (
                host.free(rc) < amount
                or host.max_unit[rc] < amount
                or host.min_unit[rc] > amount
                or amount % host.step[rc]
            ):
                return False
        return True

    def select(
        self, spec: RequestSpec, instance_uuids: Sequence[str], now: float
    ) -> list[list[tuple[str, float]]]:
        """Per instance, the chosen host then its alternates, each with its weight."""
        resources = spec.resources
        group = spec.group
        req = Request(
            spec,
            now,
            sum(h.group_members[group.uuid] for h in self.hosts) if group is not None else 0,
        )
        out = []
        for _uuid in instance_uuids:
            candidates = [h for h in self.hosts if self._fits(h, resources)]
            candidates = candidates[: self.max_placement_results]
            for host_filter in self.filters:
                candidates = [h for h in candidates if host_filter.host_passes(h, req)]
            if not candidates:
                raise LookupError("no valid host")
            self._random.shuffle(candidates)
            totals = [0.0] * len(candidates)
            if len(candidates) > 1:
                for weigher in self.weighers:
                    raw = [weigher.weigh(h) for h in candidates]
                    scaled = _normalise(raw, weigher.minval_by_max)
                    multiplier = getattr(weigher, "multiplier", 1.0)
                    totals = [t + multiplier * s for t, s in zip(totals, scaled, strict=True)]
            ranked = sorted(zip(totals, candidates, strict=True), key=lambda pair: -pair[0])
            weight, chosen = ranked[0]
            chosen.consume(resources)
            if group is not None:
                chosen.group_members[group.uuid] += 1
                req.group_size += 1
            alternates = [(h.name, w) for w, h in ranked[1:] if self._fits(h, resources)]
            out.append([(chosen.name, weight), *alternates[: self.max_attempts - 1]])
        return out
