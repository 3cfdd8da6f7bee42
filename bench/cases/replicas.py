"""Case 9: what ``[redis] min_replicas = 1`` costs a claim.

A private master and its replica (``redis-server --replicaof``, each
append-only with ``everysec``, as the fault tier runs them) hold a cloud of
``replicas_hosts`` hosts. Two stores open the master side by side: one with
``min_replicas = 0`` (a claim is done when the master has run it) and one
with ``min_replicas = 1`` (each write waits, in the same round trip, for
``WAIT 1``: the replica has it). Claims of a small allocation on a random
host, back to back, one caller, in alternating rounds of each (so a change
in the shared machine's load falls on both): claims/s and per-claim latency
(median, p99) of each, and the ratio of ``min_replicas = 1`` to ``0``
measured in the same run. Every claim is released afterwards (not timed).
"""

from __future__ import annotations

import itertools
import random
import time
import uuid as uuidlib
from typing import Any

import redis

from bench import cloud
from bench.nodes import PrivateRedis, wait_until
from bench.runner import Bench
from bench.stats import summary
from scheduler.objects import AllocationRequest
from scheduler.store import RedisStore

PREFIX = "bench-replicas"
AMOUNTS = {"VCPU": 1, "MEMORY_MB": 256}
ROUNDS = 6  # per setting, alternating


def _replica_in_sync(master: redis.Redis) -> bool:
    info = master.info("replication")
    return info.get("connected_slaves") == 1 and info.get("slave0", {}).get("state") == "online"


def _roomy(plan: list[cloud.HostPlan], claims: int) -> list[str]:
    """The hosts with room for their even share of ``claims`` claims."""
    room = []
    for h in plan:
        inventories = cloud.KINDS[h.kind].inventories()
        free = {rc: inv.capacity for rc, inv in inventories.items()}
        for _, amounts in h.consumers:
            for rc, amount in amounts.items():
                free[rc] -= amount
        room.append((h.uuid, min(free[rc] // n for rc, n in AMOUNTS.items())))
    for share in range(claims, 0, -1):
        fits = [uuid for uuid, n in room if n >= share]
        if len(fits) * share >= claims:
            return fits
    raise ValueError(f"no room for {claims} claims")


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    master = PrivateRedis()
    master.start()
    replica = PrivateRedis("--replicaof", "127.0.0.1", str(master.port))
    replica.start()
    stores = {
        0: RedisStore(master.url(), PREFIX),
        1: RedisStore(master.url(), PREFIX, min_replicas=1, min_replicas_timeout=1.0),
    }
    client = redis.Redis.from_url(master.url())
    try:
        wait_until(lambda: _replica_in_sync(client), 60, "the replica in sync")
        plan = cloud.plan(sizes.replicas_hosts)
        cloud.populate(stores[0], plan)
        hosts = _roomy(plan, sizes.replicas_claims * 2)
        random.Random(13).shuffle(hosts)
        targets = itertools.cycle(hosts)  # evenly: no claim is refused for room
        timings: dict[int, list[float]] = {0: [], 1: []}
        elapsed = {0: 0.0, 1: 0.0}
        claimed = []
        per_round = max(sizes.replicas_claims // ROUNDS, 1)
        bench.log(f"replicas: {per_round * ROUNDS} claims per setting, {ROUNDS} rounds each")
        for _ in range(ROUNDS):
            for setting, store in stores.items():
                started_round = time.perf_counter()
                for _ in range(per_round):
                    consumer = str(uuidlib.uuid4())
                    request = AllocationRequest({next(targets): AMOUNTS}, "bench", "bench")
                    started = time.perf_counter()
                    store.claim(consumer, request)
                    timings[setting].append(time.perf_counter() - started)
                    claimed.append(consumer)
                elapsed[setting] += time.perf_counter() - started_round
        for consumer in claimed:
            stores[0].release(consumer)
        rows = []
        for setting in stores:
            rows.append(
                {
                    "min_replicas": setting,
                    "claims": len(timings[setting]),
                    "claims_per_s": len(timings[setting]) / elapsed[setting],
                    **summary(timings[setting]),
                }
            )
        base, durable = rows
        result = {
            "rows": rows,
            "hosts": sizes.replicas_hosts,
            "rounds": ROUNDS,
            "rate_ratio": durable["claims_per_s"] / base["claims_per_s"],
            "median_ratio": durable["median_ms"] / base["median_ms"],
        }
        for r in rows:
            bench.log(
                f"  min_replicas={r['min_replicas']}: {r['claims_per_s']:.0f} claims/s, "
                f"median {r['median_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms"
            )
        bench.log(f"  ratio (1 to 0): {result['rate_ratio']:.2f}x the claims/s")
        return result
    finally:
        client.close()
        for store in stores.values():
            store.close()
        replica.destroy()
        master.destroy()
