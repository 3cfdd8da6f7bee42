"""Preemption under churn, and what a preempting decision costs (issue 33).

**Churn.** In process, on the in-memory store, a seeded stream of arrivals
and departures at a fixed offered load on ``preempt_churn_hosts`` empty hosts
of the bench cloud's kinds (:mod:`bench.cloud`), on a simulated clock (the
engine's, the heartbeats' and the records' times). Each arrival is one
instance of a flavor drawn from the built-in catalog (``scheduler.flavors``),
a third of them of class ``spot`` (priority 10, preemptible), the rest
``on-demand`` (priority 100, may preempt); lifetimes are exponential. The
offered load is the arrivals' mean memory demand (rate x mean lifetime x mean
size) over the cloud's memory. The same stream runs twice, preemption on and
off:

* an arrival is a decision with its claim (``Engine.select``); found no host,
  an on-demand one (preemption on) searches for victims
  (``Engine.preemption``) and takes the claim and the eviction in one store
  step (``claim_preempting``), as the worker does; its victims are then
  deleted at once (the conductor ends them before the build);
* an on-demand request that still finds no host waits for capacity: it is
  indexed in the store's pending index (priority then age) and retried, in
  the index's order, the first ``RETRY_BATCH`` after each departure (the
  conductor's retry on a change that could make it fit), each retry a
  decision and, preemption on, a preemption search; it times out after
  ``MAX_WAIT`` (a refusal). A spot request that finds no host is refused;
* at every on-demand request that finds no host even with preemption (it
  waits or is refused), an oracle checks whether some host would fit it with
  every spot instance there gone (capacity only: the hosts are all alike in
  everything else): ``refused_with_room``, which must be 0 with preemption on.

Reported each way, over the run after a warm-up of ``WARMUP`` of it: the
on-demand acceptance (placed at arrival or after waiting), the spot
acceptance, the time-weighted utilisation of memory and vCPU, the
preemptions and victims per preemption, and the time-to-placement of the
requests that waited (simulated seconds).

**The headroom baseline.** Plain preemption off is not what an operator
without preemption runs: with spot instances admitted freely the cloud fills
just as much (preemption changes who holds the capacity, not how much) and
on-demand requests are refused or wait. To keep on-demand requests served,
such an operator keeps headroom free of spot instances: a spot request is
refused when the cloud's memory in use, with it, would pass ``1 - H`` of the
whole; the headroom stays empty until on-demand requests come. So the same
stream runs a third way, per offered load: preemption off, spot admitted
only within that rule, at the smallest headroom ``H`` tried whose on-demand
acceptance is at least that of the run with preemption on (halved
``HEADROOM_STEPS`` times within ``HEADROOM_RANGE``, else no spot at all:
:func:`baseline`). The ``preempt_utilisation`` target reads the memory
utilisation with preemption over that baseline's, the lowest over the
offered loads (``utilisation_ratios``); with preemption over plain
preemption off is kept beside it (``plain_utilisation_ratios``), and every
headroom tried in ``headroom_baseline``. (A fixed cap on the memory spot
instances hold, the other quota an operator could set, was tried too: it
needs more of the cloud empty for the same on-demand acceptance, and so is
the weaker baseline.)

**Decision cost.** At ``preempt_hosts`` (1k, 10k) a preempting decision
against a normal one, on a synthetic cloud full of spot instances
(:mod:`bench.preempting`): the ``engine_preempt_10k`` target reads the ratio
of their medians at 10k hosts, both measured in the same run.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import cloud, preempting
from bench.runner import Bench
from bench.stats import summary
from bench.targets import Target
from scheduler.engine import Engine, EngineSettings
from scheduler.exceptions import NoValidHost
from scheduler.flavors import load_catalog
from scheduler.objects import (
    ACTIVE,
    DISK_GB,
    MEMORY_MB,
    VCPU,
    Flavor,
    InstanceRecord,
    RequestSpec,
)
from scheduler.priority import CLASS_SPEC, PriorityClasses, record_fields
from scheduler.store import MemoryStore

CLASSES = PriorityClasses.parse(["spot:10:preemptible", "on-demand:100"])
#: The share of arrivals of class spot.
SPOT_SHARE = 1 / 3
#: Offered loads (each its own pair of runs): the arrivals' mean memory demand
#: over the cloud's memory.
OFFERED_LOADS = (1.0, 1.2)
#: Mean lifetime of an instance, simulated seconds.
LIFETIME = 3600.0
#: How long an on-demand request waits for capacity (simulated seconds).
MAX_WAIT = 600.0
#: Pending requests retried after each departure, first in the index's order.
RETRY_BATCH = 8
#: The part of the run before measuring starts (the cloud fills).
WARMUP = 0.3
#: Heartbeats are written this often (simulated seconds).
HEARTBEAT_EVERY = 10.0
SEED = 33
#: The headroom baseline's search: the share of the cloud's memory kept free
#: of spot instances, between these bounds, halved this many times.
HEADROOM_RANGE = (0.0, 0.48)
HEADROOM_STEPS = 4

TARGETS: tuple[Target, ...] = (
    Target(
        "preempt_room_refusals",
        "preemption churn: no on-demand request refused or left waiting while evicting "
        "spot instances could make room",
        0.0,
        "max",
    ),
    Target(
        "preempt_utilisation",
        "preemption churn: total memory utilisation with preemption > without (spot kept "
        "out of enough headroom to serve as many on-demand requests), same offered load "
        "(ratio)",
        1.0,
        "min",
    ),
    Target(
        "engine_preempt_10k",
        "a preempting decision (no host, then the preemption search) <= 10x a normal one "
        "at 10k hosts",
        10.0,
        "max",
    ),
)


def _disk(flavor: Flavor) -> int:
    return flavor.root_gb + flavor.ephemeral_gb + (flavor.swap_mb + 1023) // 1024


@dataclasses.dataclass(frozen=True)
class Arrival:
    at: float
    spot: bool
    flavor: str
    lifetime: float


def stream(hosts: int, operations: int, load: float, seed: int = SEED) -> list[Arrival]:
    """``operations`` arrivals at offered ``load`` on ``hosts`` empty hosts."""
    rng = np.random.default_rng(seed)
    catalog = load_catalog()
    names = sorted(catalog)
    memory = sum(h.inventories[MEMORY_MB].capacity for h in _hosts(hosts))
    mean_mb = float(np.mean([catalog[n].memory_mb for n in names]))
    rate = load * memory / (LIFETIME * mean_mb)
    gaps = rng.exponential(1 / rate, operations)
    spot = rng.random(operations) < SPOT_SHARE
    flavors = rng.integers(len(names), size=operations)
    lifetimes = rng.exponential(LIFETIME, operations)
    at = np.cumsum(gaps)
    return [
        Arrival(float(at[i]), bool(spot[i]), names[flavors[i]], float(lifetimes[i]))
        for i in range(operations)
    ]


@dataclasses.dataclass(frozen=True)
class _Host:
    name: str
    uuid: str
    inventories: dict[str, Any]


def _hosts(hosts: int) -> list[_Host]:
    return [_Host(h.name, h.uuid, cloud.KINDS[h.kind].inventories()) for h in _plan(hosts)]


def _plan(hosts: int) -> list[cloud.HostPlan]:
    """Empty, enabled and up hosts of the bench cloud's kinds."""
    return [
        dataclasses.replace(h, consumers=(), disabled=False, down=False)
        for h in cloud.plan(hosts, seed=SEED)
    ]


class Churn:
    """One run of the stream on a fresh cloud, preemption on or off."""

    def __init__(self, hosts: int, preemption: bool, spot_headroom: float | None = None) -> None:
        self.plan = _plan(hosts)
        self.spot_headroom = spot_headroom
        self.store = MemoryStore()
        cloud.populate(self.store, self.plan)
        self.base = time.time()
        self.now = 0.0
        self.engine = Engine(
            self.store,
            EngineSettings(priority_classes=CLASSES),
            clock=lambda: self.base + self.now,
        )
        self.preemption = preemption
        catalog = load_catalog()
        self.specs = {
            (name, spot): RequestSpec(
                flavor=dataclasses.replace(
                    f, extra_specs={CLASS_SPEC: "spot" if spot else "on-demand"}
                ),
                project_id="bench",
                user_id="bench",
            )
            for name, f in catalog.items()
            for spot in (False, True)
        }
        self.needs = {
            name: {VCPU: f.vcpus, MEMORY_MB: f.memory_mb, DISK_GB: _disk(f)}
            for name, f in catalog.items()
        }
        self.capacity = {
            rc: sum(self.store.get_provider(h.uuid).inventories[rc].capacity for h in self.plan)
            for rc in (VCPU, MEMORY_MB)
        }
        self.used = dict.fromkeys(self.capacity, 0)
        self.area = dict.fromkeys(self.capacity, 0.0)
        self.live: dict[str, tuple[Arrival, str]] = {}  # uuid -> arrival, host
        self.waiting: dict[str, tuple[Arrival, float]] = {}  # uuid -> arrival, waited since
        self.departures: list[tuple[float, str]] = []
        self.last_heartbeat = -HEARTBEAT_EVERY
        self.measure_from = 0.0
        self.counts = dict.fromkeys(
            (
                "on_demand",
                "on_demand_placed",
                "on_demand_at_once",
                "on_demand_refused",
                "spot",
                "spot_placed",
                "preemptions",
                "victims",
                "refused_with_room",
                "waited",
                "timed_out",
            ),
            0,
        )
        self.victims: list[int] = []
        self.had_room: set[str] = set()  # requests counted in refused_with_room
        self.waits: list[float] = []
        self.preempt_seconds: list[float] = []

    # --- the clock -------------------------------------------------------------------

    def advance(self, to: float) -> None:
        if to > self.measure_from:
            start = max(self.now, self.measure_from)
            for rc in self.area:
                self.area[rc] += self.used[rc] * (to - start)
        self.now = to
        if self.now - self.last_heartbeat >= HEARTBEAT_EVERY:
            self.store.heartbeat([h.name for h in self.plan], self.base + self.now)
            self.last_heartbeat = self.now

    def _counted(self, arrival: Arrival) -> bool:
        return arrival.at >= self.measure_from

    # --- placing ---------------------------------------------------------------------

    def place(self, uuid: str, arrival: Arrival) -> bool:
        """Decide and claim one instance (preempting if on and allowed)."""
        spec = self.specs[arrival.flavor, arrival.spot]
        rid = f"req-{uuid}"
        if arrival.spot and not self._spot_admitted(arrival):
            return False
        try:
            chosen = self.engine.select(rid, spec, [uuid], return_alternates=False)[0][0]
            host = chosen.host
        except NoValidHost:
            host = self._preempt(rid, spec, uuid, arrival) if not arrival.spot else None
            if host is None:
                if (
                    not arrival.spot
                    and uuid not in self.had_room
                    and self._counted(arrival)
                    and self._room(arrival)
                ):
                    self.had_room.add(uuid)
                    self.counts["refused_with_room"] += 1
                return False
        self.store.update_instance(uuid, state=ACTIVE, task_state=None, host=host, node=host)
        self.live[uuid] = (arrival, host)
        for rc in self.used:
            self.used[rc] += self.needs[arrival.flavor][rc]
        heapq.heappush(self.departures, (self.now + arrival.lifetime, uuid))
        return True

    def _spot_admitted(self, arrival: Arrival) -> bool:
        """Whether the spot ``arrival`` leaves the baseline's headroom, if any,
        free: the cloud's memory in use, with it, at most ``1 - spot_headroom``
        of the whole."""
        if self.spot_headroom is None:
            return True
        need = self.needs[arrival.flavor][MEMORY_MB]
        limit = (1 - self.spot_headroom) * self.capacity[MEMORY_MB]
        return self.used[MEMORY_MB] + need <= limit

    def _preempt(self, rid: str, spec: RequestSpec, uuid: str, arrival: Arrival) -> str | None:
        if not self.preemption:
            return None
        chosen = CLASSES.classes["on-demand"]
        started = time.perf_counter()
        found = self.engine.preemption(rid, spec, uuid)
        self.preempt_seconds.append(time.perf_counter() - started)
        if found is None:
            return None
        self.store.claim_preempting(
            uuid,
            found.selection.allocation_request,
            found.victims_as_read(),
            chosen.priority,
            eviction=found.eviction(rid, self.base + self.now, chosen.name, chosen.priority),
        )
        for victim in found.victims:
            self._end(victim.record.uuid)
        if self._counted(arrival):
            self.counts["preemptions"] += 1
            self.counts["victims"] += len(found.victims)
            self.victims.append(len(found.victims))
        return found.host

    def _room(self, arrival: Arrival) -> bool:
        """Whether some host fits ``arrival`` with every spot instance there gone."""
        spot: dict[str, dict[str, int]] = {}
        for a, host in self.live.values():
            if a.spot:
                held = spot.setdefault(host, dict.fromkeys(self.needs[a.flavor], 0))
                for rc, amount in self.needs[a.flavor].items():
                    held[rc] += amount
        need = self.needs[arrival.flavor]
        for h in self.plan:
            provider = self.store.get_provider(h.uuid)
            gone = spot.get(h.name, {})
            if all(provider.free(rc) + gone.get(rc, 0) >= need[rc] for rc in need):
                return True
        return False

    def _end(self, uuid: str) -> None:
        arrival, host = self.live.pop(uuid)
        for rc in self.used:
            self.used[rc] -= self.needs[arrival.flavor][rc]
        now = self.base + self.now
        self.store.start_delete(uuid)
        self.store.finish_delete(uuid, host, 0.0, now, force=True)

    # --- the run ---------------------------------------------------------------------

    def arrive(self, index: int, arrival: Arrival) -> None:
        uuid = str(uuidlib.uuid5(cloud.NAMESPACE, f"churn/{index}"))
        fields = record_fields(CLASSES.classes["spot" if arrival.spot else "on-demand"])
        self.store.create_instances(
            [
                InstanceRecord(
                    uuid,
                    request_spec=self.specs[arrival.flavor, arrival.spot].to_primitive(),
                    created_at=self.base + arrival.at,
                    updated_at=self.base + arrival.at,
                    **fields,
                )
            ]
        )
        counted = self._counted(arrival)
        kind = "spot" if arrival.spot else "on_demand"
        if counted:
            self.counts[kind] += 1
        if self.place(uuid, arrival):
            if counted:
                self.counts[kind + "_placed"] += 1
                if not arrival.spot:
                    self.counts["on_demand_at_once"] += 1
            return
        if arrival.spot:
            self._drop(uuid)
            return
        self.store.add_pending(uuid, fields["priority"], self.base + arrival.at)
        self.waiting[uuid] = (arrival, self.now)
        if counted:
            self.counts["waited"] += 1

    def _drop(self, uuid: str) -> None:
        self.store.start_delete(uuid)
        self.store.finish_delete(uuid, None, 0.0, self.base + self.now, force=True)

    def retry(self) -> None:
        """The first ``RETRY_BATCH`` pending requests, in the index's order."""
        for uuid in self.store.list_pending(RETRY_BATCH):
            arrival, since = self.waiting[uuid]
            if self.now - since > MAX_WAIT:
                self._time_out(uuid)
            elif self.place(uuid, arrival):
                self.store.remove_pending(uuid)
                del self.waiting[uuid]
                if self._counted(arrival):
                    self.counts["on_demand_placed"] += 1
                    self.waits.append(self.now - since)

    def _time_out(self, uuid: str) -> None:
        arrival, _ = self.waiting.pop(uuid)
        self.store.remove_pending(uuid)
        self._drop(uuid)
        if self._counted(arrival):
            self.counts["timed_out"] += 1
            self.counts["on_demand_refused"] += 1

    def expire(self) -> None:
        for uuid, (_, since) in list(self.waiting.items()):
            if self.now - since > MAX_WAIT:
                self._time_out(uuid)

    def run(self, arrivals: list[Arrival]) -> dict[str, Any]:
        end = arrivals[-1].at
        self.measure_from = WARMUP * end
        started = time.perf_counter()
        for index, arrival in enumerate(arrivals):
            while self.departures and self.departures[0][0] <= arrival.at:
                at, uuid = heapq.heappop(self.departures)
                if uuid not in self.live:
                    continue  # preempted
                self.advance(at)
                self._end(uuid)
                self.retry()
            self.advance(arrival.at)
            if index % 64 == 0:
                self.expire()
            self.arrive(index, arrival)
        wall = time.perf_counter() - started
        c = self.counts
        span = end - self.measure_from
        row: dict[str, Any] = {
            "preemption": self.preemption,
            "spot_headroom": self.spot_headroom,
            **c,
            "on_demand_acceptance": c["on_demand_placed"] / max(c["on_demand"], 1),
            "on_demand_at_once_share": c["on_demand_at_once"] / max(c["on_demand"], 1),
            "spot_acceptance": c["spot_placed"] / max(c["spot"], 1),
            "memory_utilisation": self.area[MEMORY_MB] / (self.capacity[MEMORY_MB] * span),
            "vcpu_utilisation": self.area[VCPU] / (self.capacity[VCPU] * span),
            "victims_per_preemption": c["victims"] / c["preemptions"]
            if c["preemptions"]
            else None,
            "max_victims": max(self.victims, default=0),
            "wait_s": _wait_summary(self.waits),
            "preemption_search": summary(self.preempt_seconds),
            "still_waiting": len(self.waiting),
            "wall_s": wall,
        }
        return row


def _row(rows: list[dict[str, Any]], load: float, on: bool) -> dict[str, Any]:
    return next(r for r in rows if r["offered_load"] == load and r["preemption"] is on)


def _wait_summary(waits: list[float]) -> dict[str, Any]:
    if not waits:
        return {"n": 0, "median_s": None, "p90_s": None, "max_s": None}
    a = np.array(waits)
    return {
        "n": len(waits),
        "median_s": float(np.median(a)),
        "p90_s": float(np.percentile(a, 90)),
        "max_s": float(a.max()),
    }


def _line(row: dict[str, Any]) -> str:
    wait = row["wait_s"]
    vpp = row["victims_per_preemption"]
    headroom = row["spot_headroom"]
    return (
        f"  preemption {'on ' if row['preemption'] else 'off'}"
        f"{'' if headroom is None else f', spot headroom {headroom:.0%} of memory'}: "
        "on-demand accepted "
        f"{row['on_demand_acceptance']:.2%} ({row['on_demand_at_once_share']:.1%} at once), "
        f"spot {row['spot_acceptance']:.1%}, memory used {row['memory_utilisation']:.1%}, "
        f"vCPU {row['vcpu_utilisation']:.1%}, {row['preemptions']} preemptions "
        f"({'-' if vpp is None else f'{vpp:.2f}'} victims each), "
        f"refused with room {row['refused_with_room']}, waited {row['waited']} "
        f"(median {wait['median_s'] or 0:.0f} s), {row['wall_s']:.1f} s"
    )


def baseline(
    hosts: int, arrivals: list[Arrival], wanted: float, log: Callable[[str], None]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The headroom baseline on ``arrivals``: preemption off, a spot instance
    admitted only while it leaves the headroom free, at the smallest headroom
    tried whose on-demand acceptance is at least ``wanted``; and every run
    tried. The headroom is halved towards that one ``HEADROOM_STEPS`` times
    within ``HEADROOM_RANGE``, assuming acceptance rises with it (the stream
    is the same each time); if none of them does, the baseline admits no
    spot instance at all (headroom 1)."""
    tried: list[dict[str, Any]] = []

    def trial(headroom: float) -> dict[str, Any]:
        row = Churn(hosts, False, headroom).run(arrivals)
        tried.append(row)
        log(_line(row))
        return row

    lo, hi = HEADROOM_RANGE
    best = None
    for _ in range(HEADROOM_STEPS):
        headroom = round((lo + hi) / 2, 4)
        row = trial(headroom)
        if row["on_demand_acceptance"] >= wanted:
            best, hi = row, headroom
        else:
            lo = headroom
    return best if best is not None else trial(1.0), tried


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    hosts, operations = sizes.preempt_churn_hosts, sizes.preempt_churn_operations
    churn = []
    baselines = []
    for load in OFFERED_LOADS:
        arrivals = stream(hosts, operations, load)
        bench.log(f"preempt: churn on {hosts} hosts, {operations} arrivals, offered load {load}")
        for on in (True, False):
            row = Churn(hosts, on).run(arrivals)
            row.update(hosts=hosts, offered_load=load)
            churn.append(row)
            bench.log(_line(row))
        wanted = _row(churn, load, True)["on_demand_acceptance"]
        bench.log(
            f"preempt: the headroom baseline at load {load}: preemption off, the smallest "
            f"headroom kept from spot with on-demand accepted >= {wanted:.2%}"
        )
        chosen, tried = baseline(hosts, arrivals, wanted, bench.log)
        baselines.append(
            {
                **chosen,
                "hosts": hosts,
                "offered_load": load,
                "wanted_on_demand_acceptance": wanted,
                "reached": chosen["on_demand_acceptance"] >= wanted,
                "tried": [
                    {
                        "spot_headroom": r["spot_headroom"],
                        "on_demand_acceptance": r["on_demand_acceptance"],
                        "memory_utilisation": r["memory_utilisation"],
                    }
                    for r in tried
                ],
            }
        )
    decision = []
    for hosts in sizes.preempt_hosts:
        bench.log(f"preempt: decision cost, {hosts} hosts")
        plan = bench.plan(hosts)
        store = MemoryStore()
        cloud.populate(store, plan)
        cloud.refresh_heartbeats(store, plan)
        count, budget = sizes.engine_multi
        row = preempting.measure(store, plan, count, budget)
        decision.append({"hosts": hosts, **row})
        bench.log(
            f"  normal median {row['normal']['median_ms']:.3f} ms, preempting median "
            f"{row['preempting']['median_ms']:.3f} ms ({row['ratio']:.1f}x; "
            f"{row['preempting_changed']['median_ms']:.3f} ms, {row['ratio_changed']:.1f}x, "
            "with one host changed before each)"
        )
        del store
    on = {load: _row(churn, load, True)["memory_utilisation"] for load in OFFERED_LOADS}
    return {
        "churn": churn,
        "headroom_baseline": baselines,
        # The target's reading: with preemption / the headroom baseline.
        "utilisation_ratios": {
            str(r["offered_load"]): on[r["offered_load"]] / r["memory_utilisation"]
            for r in baselines
        },
        # Context: with preemption / plain preemption off (spot admitted freely).
        "plain_utilisation_ratios": {
            str(load): on[load] / _row(churn, load, False)["memory_utilisation"]
            for load in OFFERED_LOADS
        },
        "spot_share": SPOT_SHARE,
        "lifetime_s": LIFETIME,
        "max_wait_s": MAX_WAIT,
        "decision": decision,
    }
