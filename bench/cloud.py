"""A synthetic cloud for the benchmarks, written through the store's public API.

:func:`plan` draws, from one seed, what N hosts look like: three hardware
kinds, a realistic spread of free resources (each host already runs
instances: one to four pre-existing consumers of random sizes, a few hosts
empty, a few nearly full), traits (CPU features, SSD, GPU on some) and
aggregates (every host in one of four availability zones, some also in a
"fast storage" or a tenant aggregate), a few disabled services and a few
hosts that stopped heartbeating. :func:`populate` writes a plan into any
:class:`~scheduler.store.Store` with its ordinary methods: ``create_provider``,
``set_inventory``, ``set_traits``, ``set_aggregates``, ``claim`` (the
pre-existing usage), ``register_services``, ``heartbeat``,
``set_service_disabled``. Nothing writes a Redis key directly.

On Redis each of those is one round trip (~0.13 ms), about five per host, so
100,000 hosts are written by several processes side by side, each with its
own connection, on disjoint slices of the plan.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import time
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from scheduler.objects import (
    DISK_GB,
    MEMORY_MB,
    VCPU,
    AllocationRequest,
    Flavor,
    InstanceRecord,
    RequestSpec,
)
from scheduler.store import Aggregate, Inventory, RedisStore, Service, Store, open_store

NAMESPACE = uuidlib.UUID("0c6f1b0e-7a0d-4f43-9d1e-b3a7c2f0be11")
#: Fraction of hosts whose service is disabled, and that stopped heartbeating.
DISABLED_FRACTION = 0.02
DOWN_FRACTION = 0.01
CPU_RATIO = 4.0
RESERVED_MEMORY_MB = 512
#: oslo.messaging server name the synthetic hosts' services name (never cast to).
RPC_SERVER = "bench-nowhere"

ZONES = ("az1", "az2", "az3", "az4")
EXTRA_AGGREGATES = ("fast-storage", "tenant-a")


@dataclass(frozen=True)
class HostKind:
    vcpus: int
    memory_mb: int
    disk_gb: int
    share: float

    def inventories(self) -> dict[str, Inventory]:
        return {
            VCPU: Inventory(total=self.vcpus, allocation_ratio=CPU_RATIO),
            MEMORY_MB: Inventory(total=self.memory_mb, reserved=RESERVED_MEMORY_MB),
            DISK_GB: Inventory(total=self.disk_gb),
        }


KINDS = (
    HostKind(vcpus=32, memory_mb=262144, disk_gb=2000, share=0.5),
    HostKind(vcpus=64, memory_mb=524288, disk_gb=4000, share=0.3),
    HostKind(vcpus=16, memory_mb=131072, disk_gb=1000, share=0.2),
)

#: What the benchmark requests ask for (m1.medium-like).
FLAVOR = Flavor(name="bench.medium", vcpus=2, memory_mb=4096, root_gb=40)

_TRAITS = (
    "HW_CPU_X86_AVX2",
    "HW_CPU_X86_AVX512F",
    "STORAGE_DISK_SSD",
    "CUSTOM_GPU",
    "COMPUTE_NET_VIF_MODEL_VIRTIO",
)


def uuid_for(kind: str, name: str) -> str:
    return str(uuidlib.uuid5(NAMESPACE, f"{kind}:{name}"))


def aggregates() -> list[Aggregate]:
    aggs = [Aggregate(uuid_for("aggregate", z), z, {"availability_zone": z}) for z in ZONES]
    aggs += [
        Aggregate(uuid_for("aggregate", "fast-storage"), "fast-storage", {"storage": "ssd"}),
        Aggregate(uuid_for("aggregate", "tenant-a"), "tenant-a", {"filter_tenant_id": "tenant-a"}),
    ]
    return aggs


@dataclass(frozen=True)
class HostPlan:
    """One host: its provider, inventory, traits, aggregates and existing usage."""

    name: str
    uuid: str
    kind: int
    traits: tuple[str, ...]
    aggregates: tuple[str, ...]
    #: pre-existing consumers: (consumer uuid, {resource class: amount})
    consumers: tuple[tuple[str, dict[str, int]], ...]
    disabled: bool
    down: bool


def plan(hosts: int, seed: int = 5, consumers: int | None = None) -> list[HostPlan]:
    """What ``hosts`` hosts look like; the same seed gives the same cloud.

    ``consumers``: split the existing usage into about that many consumers
    in all, spread evenly over the hosts that have any (by default each host
    has the fewest that its max_unit allows: one to four)."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(KINDS), size=hosts, p=[k.share for k in KINDS])
    # Fill: most hosts part used (Beta around 45%), 8% empty, 4% nearly full.
    fill = rng.beta(2.0, 2.5, size=hosts)
    fill[rng.random(hosts) < 0.08] = 0.0
    fill[rng.random(hosts) < 0.04] = rng.uniform(0.95, 1.0)
    cpu_fill = np.clip(fill + rng.normal(0, 0.1, hosts), 0, 1)
    disk_fill = np.clip(fill + rng.normal(0, 0.15, hosts), 0, 1)
    zones = rng.integers(len(ZONES), size=hosts)
    extra = rng.random((hosts, len(EXTRA_AGGREGATES))) < (0.2, 0.05)
    trait_mask = rng.random((hosts, len(_TRAITS))) < (0.9, 0.4, 0.3, 0.03, 0.95)
    disabled = rng.random(hosts) < DISABLED_FRACTION
    down = rng.random(hosts) < DOWN_FRACTION
    agg_uuids = [a.uuid for a in aggregates()]
    usage = []
    for i in range(hosts):
        inv = KINDS[kinds[i]].inventories()
        used = {
            VCPU: int(cpu_fill[i] * inv[VCPU].capacity),
            MEMORY_MB: int(fill[i] * inv[MEMORY_MB].capacity),
            DISK_GB: int(disk_fill[i] * inv[DISK_GB].capacity),
        }
        usage.append((inv, used))
    in_use = sum(1 for _, used in usage if any(used.values()))
    each, extra_parts = divmod(consumers or 0, max(in_use, 1))
    out = []
    seen_in_use = 0
    for i, (inv, used) in enumerate(usage):
        parts = 1
        if consumers and any(used.values()):
            parts = each + (1 if seen_in_use < extra_parts else 0)
            seen_in_use += 1
        name = f"bench-{i:06d}"
        out.append(
            HostPlan(
                name=name,
                uuid=uuid_for("provider", name),
                kind=int(kinds[i]),
                traits=tuple(t for t, on in zip(_TRAITS, trait_mask[i], strict=True) if on),
                aggregates=(agg_uuids[zones[i]],)
                + tuple(agg_uuids[len(ZONES) + j] for j in np.flatnonzero(extra[i])),
                consumers=_split(name, used, inv, parts),
                disabled=bool(disabled[i]),
                down=bool(down[i]),
            )
        )
    return out


def _split(
    name: str, used: dict[str, int], inv: dict[str, Inventory], parts: int = 1
) -> tuple[tuple[str, dict[str, int]], ...]:
    """Existing usage as ``parts`` consumers or more, none asking more than a
    class's max_unit."""
    parts = max(
        parts, *(math.ceil(amount / inv[rc].effective_max_unit) for rc, amount in used.items())
    )
    consumers = []
    for k in range(parts):
        amounts = {
            rc: amount // parts + (1 if k < amount % parts else 0) for rc, amount in used.items()
        }
        amounts = {rc: a for rc, a in amounts.items() if a > 0}
        if amounts:
            consumers.append((uuid_for("consumer", f"{name}/{k}"), amounts))
    return tuple(consumers)


def instance_record(
    uuid: str,
    flavor: Flavor | None = None,
    project_id: str = "bench-project",
    user_id: str = "bench-user",
    **fields: Any,
) -> InstanceRecord:
    """A record the size the conductor writes (about 900 bytes, its request
    spec included); ``flavor`` defaults to an m1.small."""
    flavor = flavor or Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20, extra_specs={})
    spec = RequestSpec(flavor=flavor, project_id=project_id, user_id=user_id)
    now = time.time()
    return InstanceRecord(
        uuid=uuid,
        request_spec=spec.to_primitive(),
        request_id=f"req-{uuidlib.uuid4()}",
        created_at=now,
        updated_at=now,
        **fields,
    )


# --- writing a plan -----------------------------------------------------------------


def write_hosts(store: Store, hosts: Sequence[HostPlan]) -> None:
    """Providers, inventory, traits, aggregates and existing usage of ``hosts``."""
    for h in hosts:
        store.create_provider(h.uuid, h.name)
        generation = store.set_inventory(h.uuid, 0, KINDS[h.kind].inventories())
        if h.traits:
            generation = store.set_traits(h.uuid, generation, h.traits)
        generation = store.set_aggregates(h.uuid, generation, h.aggregates)
        for consumer, amounts in h.consumers:
            store.claim(consumer, AllocationRequest({h.uuid: amounts}, "existing", "existing"))


def write_hosts_pipelined(store: RedisStore, hosts: Sequence[HostPlan], chunk: int = 100) -> None:
    """What :func:`write_hosts` writes, ``chunk`` hosts per round trip: the
    scripts the store's ``create_provider``, ``set_inventory``/``set_traits``/
    ``set_aggregates`` and ``claim`` run, with the same keys and arguments,
    queued on one pipeline (each host's generations follow from its own
    writes: 0 once created, one more per update); every reply is checked as
    those methods check it. For a cell of 300k hosts, where one round trip
    per write takes most of an hour on a shared machine."""
    k, scripts = store.keys, store._scripts
    for start in range(0, len(hosts), chunk):
        pipe = store._pipeline(transaction=False)
        claims = 0
        for h in hosts[start : start + chunk]:
            scripts.create_provider(
                keys=(k.changes, k.providers, k.provider_names),
                args=(store._maxlen, h.uuid, h.name, ""),
                client=pipe,
            )
            inventories = {rc: asdict(inv) for rc, inv in KINDS[h.kind].inventories().items()}
            updates = [("inventories", inventories), ("traits", sorted(h.traits))]
            updates = [u for u in updates if u[1]] + [("aggregates", sorted(h.aggregates))]
            for generation, (name, value) in enumerate(updates):
                scripts.update_provider(
                    keys=(k.changes, k.providers),
                    args=(store._maxlen, h.uuid, generation, name, json.dumps(value)),
                    client=pipe,
                )
            for consumer, amounts in h.consumers:
                request = AllocationRequest({h.uuid: amounts}, "existing", "existing")
                keys, args = store._allocation_call(consumer, request, None)
                scripts.claim(keys=keys, args=args, client=pipe)
                claims += 1
        replies = pipe.execute()  # raises the first refused write
        if claims and not all(replies[-claims:]):
            raise RuntimeError("a claim of the existing usage was refused")


def _write_slice(url: str, prefix: str, hosts: Sequence[HostPlan], pipelined: bool) -> None:
    store = open_store(url, prefix)
    try:
        if pipelined:
            assert isinstance(store, RedisStore), "only a Redis store pipelines"
            write_hosts_pipelined(store, hosts)
        else:
            write_hosts(store, hosts)
    finally:
        store.close()


def write_services(store: Store, hosts: Sequence[HostPlan], now: float, batch: int = 5000) -> None:
    """Service records, heartbeats (old ones for the "down" hosts), disabled flags."""
    for start in range(0, len(hosts), batch):
        chunk = hosts[start : start + batch]
        store.register_services(Service(host=h.name, rpc_server=RPC_SERVER) for h in chunk)
        store.heartbeat([h.name for h in chunk if not h.down], now)
        store.heartbeat([h.name for h in chunk if h.down], now - 86400)
    for h in hosts:
        if h.disabled:
            store.set_service_disabled(h.name, True, "benchmark: disabled on purpose")


def refresh_heartbeats(store: Store, hosts: Sequence[HostPlan], batch: int = 20000) -> None:
    """Heartbeat the live hosts now (a long run outlasts ``service_down_time``)."""
    now = time.time()
    names = [h.name for h in hosts if not h.down]
    for start in range(0, len(names), batch):
        store.heartbeat(names[start : start + batch], now)


def populate(
    store: Store,
    hosts: Sequence[HostPlan],
    *,
    url: str | None = None,
    prefix: str | None = None,
    processes: int = 1,
    now: float | None = None,
    pipelined: bool = False,
) -> float:
    """Write ``hosts`` into ``store``; return the seconds it took.

    With ``url``/``prefix`` and ``processes`` > 1, the providers are written
    by that many processes (each opening the same store), on disjoint slices;
    ``pipelined`` (a Redis store) writes them by :func:`write_hosts_pipelined`.
    """
    started = time.perf_counter()
    for agg in aggregates():
        store.put_aggregate(agg)
    if processes > 1 and url is not None and prefix is not None and len(hosts) > 1000:
        ctx = multiprocessing.get_context("spawn")  # no inherited threads or sockets
        step = math.ceil(len(hosts) / processes)
        workers = [
            ctx.Process(
                target=_write_slice,
                args=(url, prefix, hosts[k * step : (k + 1) * step], pipelined),
            )
            for k in range(processes)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        failed = [w.exitcode for w in workers if w.exitcode]
        if failed:
            raise RuntimeError(f"populating the store failed in {len(failed)} process(es)")
    elif pipelined:
        assert isinstance(store, RedisStore), "only a Redis store pipelines"
        write_hosts_pipelined(store, hosts)
    else:
        write_hosts(store, hosts)
    write_services(store, hosts, time.time() if now is None else now)
    return time.perf_counter() - started
