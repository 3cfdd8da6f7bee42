"""Case 6: churn, the cloud held at a steady utilisation by deletes matching boots.

Modelled on kube-scheduler's scheduler_perf "MixedChurn": a cloud kept busy
at a fixed level while instances come and go, to show that the scheduler's
throughput, latency and memory depend on what is alive, not on how much has
happened. One deployment per size (its own vhost and key prefix, an empty
store): the conductor (``conductor_stub.cmd serve``), one compute simulator
for every host (``compute_sim.cmd``, hosts sized so that :data:`FLAVOR` fits
:data:`SLOTS_PER_HOST` times) and the worker. Capacity is counted from the
inventories the simulator wrote: how many :data:`FLAVOR` instances fit.

For each utilisation, in ascending order on the same cloud:

1. **Fill** to the target (utilisation x capacity) with boots only.
2. **Churn** ``operations`` steps. A step boots one instance and, when the
   live count (ACTIVE plus still building) is at the target, first deletes a
   random ACTIVE one, so the count is held. At most ``churn_window`` boots
   are in flight; a boot that ends in ERROR (NoValidHost, say) is deleted
   too (its record would stay otherwise) and the next step boots without a
   delete to restore the count.

The driver is this process, acting as the API: :class:`~conductor_stub.tasks.build.Booter`
creates the record and casts ``run_instance`` to the worker,
:class:`~conductor_stub.tasks.delete.Deleter` fences the instance and casts
``terminate_instance`` to its compute (the conductor daemon finishes the
delete when the compute answers). Per boot, latency is the record's
``updated_at`` when it was first seen ACTIVE less its ``created_at``.

At the start of the churn and after 25, 50, 75 and 100% of its steps (the
boots in flight drained first, the pause not counted in the rates), the
resident size of the worker, conductor and simulator processes and the size
of the store are read: the keys under the run's prefix, their bytes
(``MEMORY USAGE ... SAMPLES 0``), the lengths of the instance and consumer
hashes and of the change stream, and how many DELETED records wait out
their retention. A DELETED record is kept ``[conductor] deleted_retention``
seconds (:data:`RETENTION` here, short, so the store reflects the live
instances plus the last few seconds of deletes). The change stream is
bounded by the store's ``stream_maxlen`` (100,000 entries), not by what is
alive: it is reported apart.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from typing import Any

import redis

from bench.cases.memory import proc_status_mb
from bench.cluster import Cluster
from bench.runner import Bench
from bench.stats import summary
from conductor_stub.records import ConductorSettings
from conductor_stub.tasks.build import Booter
from conductor_stub.tasks.delete import Deleter
from scheduler import rpc
from scheduler.exceptions import NoValidHost
from scheduler.flavors import load_catalog
from scheduler.objects import ACTIVE, ERROR, FINAL_STATES, RequestSpec
from scheduler.service import ServiceResolver
from scheduler.store.keys import Keys

FLAVOR = "m1.small"  # 1 VCPU, 2048 MB, 20 GB
#: Host memory: 512 MB reserved plus room for this many FLAVOR instances.
SLOTS_PER_HOST = 2
HOST_MEMORY_MB = 512 + SLOTS_PER_HOST * 2048
#: Seconds a DELETED record is kept (``[conductor] deleted_retention``).
RETENTION = 5
#: Boots per request while filling (not measured).
FILL_PER_REQUEST = 10
#: When the resident sizes and the store are read, as fractions of the steps.
CHECKPOINTS = (0.0, 0.25, 0.5, 0.75, 1.0)
NAME_PREFIX = "churn"


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    rows = []
    for hosts in sizes.churn_hosts:
        cluster = bench.cluster(f"churn-{hosts}")
        try:
            rows += _deployment(bench, cluster, hosts)
        finally:
            _stop(cluster)
            cluster.close()
    return {
        "rows": rows,
        "operations": sizes.churn_operations,
        "window": sizes.churn_window,
        "retention_s": sizes.churn_retention,
        "flavor": FLAVOR,
        "slots_per_host": SLOTS_PER_HOST,
        "cores": bench.cores,
    }


def _stop(cluster: Cluster) -> None:
    for proc in cluster.processes:  # all at once: each takes a second to drain
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
    for proc in cluster.processes:
        proc.stop()
    cluster.processes.clear()


def _deployment(bench: Bench, cluster: Cluster, hosts: int) -> list[dict[str, Any]]:
    sizes = bench.sizes
    cluster.write_config(conductor={"deleted_retention": sizes.churn_retention})
    conductor = cluster.start("conductor", "conductor_stub.cmd", "serve")
    compute = cluster.start(
        "compute",
        "compute_sim.cmd",
        "--hosts",
        str(hosts),
        "--name-prefix",
        NAME_PREFIX,
        "--memory-mb",
        str(HOST_MEMORY_MB),
        "--seed",
        "7",
    )
    worker = cluster.start("worker", "scheduler.cmd.worker")
    conductor.wait_for("conductor_started", timeout=60)
    compute.wait_for("compute_sim_started", timeout=600)
    worker.wait_for("scheduler_started", timeout=60)
    pids = {
        "worker": worker.serving_pid(),
        "conductor": conductor.popen.pid,
        "compute": compute.popen.pid,
    }
    flavor = load_catalog()[FLAVOR]
    capacity = _capacity(
        cluster, RequestSpec(flavor=flavor, project_id="bench", user_id="bench").resources
    )
    bench.log(f"churn: {hosts} hosts, capacity {capacity} x {FLAVOR}")
    transport = bench.transport(cluster)
    driver = Driver(bench, cluster, transport, flavor, pids)
    rows = []
    try:
        for utilisation in sizes.churn_utilisations:
            target = round(utilisation * capacity)
            row = driver.phase(target, sizes.churn_operations)
            row.update(hosts=hosts, capacity=capacity, utilisation=utilisation)
            cluster.check_accounting()
            rows.append(row)
            start, end = row["checkpoints"][0], row["checkpoints"][-1]
            bench.log(
                f"  {utilisation:.0%} ({target} live): {row['decisions_per_s']:.0f} decisions/s, "
                f"p50 {row['median_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms, "
                f"NoValidHost {row['no_valid_host_rate']:.2%}, worker RSS "
                f"{start['rss_mb']['worker']:.0f} -> {end['rss_mb']['worker']:.0f} MB, store "
                f"{start['store_mb']:.1f} -> {end['store_mb']:.1f} MB (+ change stream "
                f"{end['stream_entries']} entries)"
            )
    finally:
        transport.cleanup()
    return rows


def _capacity(cluster: Cluster, resources: dict[str, int]) -> int:
    """How many instances of ``resources`` the simulator's hosts hold, empty."""
    total = 0
    for provider in cluster.store.list_providers():
        if not provider.name.startswith(NAME_PREFIX) or provider.parent_uuid:
            continue
        fits = [
            min(inv.capacity // amount, inv.effective_max_unit // amount)
            for rc, amount in resources.items()
            if amount and (inv := provider.inventories.get(rc)) is not None
        ]
        total += min(fits) if fits else 0
    return total


class Driver:
    """The API side of the churn: boots and deletes, the live set, the samples."""

    def __init__(
        self, bench: Bench, cluster: Cluster, transport: Any, flavor: Any, pids: dict[str, int]
    ) -> None:
        self.bench = bench
        self.cluster = cluster
        self.flavor = flavor
        self.pids = pids
        store = cluster.store
        resolver = ServiceResolver(store)
        compute = rpc.ComputeClient(transport, resolver)
        self.booter = Booter(store, rpc.SchedulerClient(transport), compute)
        self.deleter = Deleter(
            store, compute, ConductorSettings(deleted_retention=bench.sizes.churn_retention)
        )
        self.ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
        self.redis = redis.Redis.from_url(bench.redis_url)
        self.keys = Keys.for_prefix(cluster.prefix)
        self.rng = random.Random(11)
        self.active: list[str] = []  # live and ACTIVE, in no order
        self.inflight: set[str] = set()  # booting
        self.window = bench.sizes.churn_window
        self._reset_counts()

    @property
    def live(self) -> int:
        return len(self.active) + len(self.inflight)

    def _reset_counts(self) -> None:
        self.latencies: list[float] = []
        self.outcomes: Counter[str] = Counter()  # ACTIVE, NoValidHost, other faults
        self.deletes = 0
        self.error_deletes = 0

    # --- boots and deletes ------------------------------------------------------

    def boot(self, count: int, per_request: int = 1) -> None:
        uuids = self.booter.boot(
            self.ctxt,
            self.flavor,
            count,
            per_request=per_request,
            project_id="bench",
            user_id="bench",
        )
        self.inflight.update(uuids)

    def delete_one(self) -> None:
        k = self.rng.randrange(len(self.active))
        self.active[k], self.active[-1] = self.active[-1], self.active[k]
        self.deleter.delete(self.active.pop())
        self.deletes += 1

    def poll(self) -> int:
        """Read the boots in flight; take those that ended. How many ended."""
        ended = 0
        for record in self.cluster.store.list_instances(sorted(self.inflight)):
            if record.state not in FINAL_STATES:
                continue
            self.inflight.discard(record.uuid)
            ended += 1
            if record.state == ACTIVE:
                self.latencies.append(record.updated_at - record.created_at)
                self.active.append(record.uuid)
                self.outcomes[ACTIVE] += 1
            else:
                fault = record.fault or record.state
                self.outcomes["NoValidHost" if fault == NoValidHost.USER_MESSAGE else fault] += 1
                if record.state == ERROR:
                    self.deleter.delete(record.uuid)
                    self.error_deletes += 1
        return ended

    def wait_room(self, limit: int, timeout: float = 600.0) -> None:
        """Poll until at most ``limit`` boots are in flight."""
        deadline = time.monotonic() + timeout
        while len(self.inflight) > limit:
            if not self.poll():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"churn: {len(self.inflight)} boots did not end")
                time.sleep(0.01)

    # --- a phase -----------------------------------------------------------------

    def fill(self, target: int) -> float:
        started = time.perf_counter()
        while self.live < target or self.inflight:
            missing = target - self.live
            if missing > 0 and len(self.inflight) < 4 * self.window:
                self.boot(min(missing, FILL_PER_REQUEST), per_request=FILL_PER_REQUEST)
            else:
                self.wait_room(len(self.inflight) - 1)
        return time.perf_counter() - started

    def phase(self, target: int, operations: int) -> dict[str, Any]:
        fill_seconds = self.fill(target)
        self._reset_counts()
        marks = [round(f * operations) for f in CHECKPOINTS]
        checkpoints = [self.sample(0) | {"seconds": 0.0}]
        live_seen = [self.live, self.live]
        paused = 0.0
        started = time.perf_counter()
        for step in range(1, operations + 1):
            self.wait_room(self.window - 1)
            if self.live >= target:
                self.delete_one()
            self.boot(1)
            live_seen = [min(live_seen[0], self.live), max(live_seen[1], self.live)]
            if step in marks[1:]:
                t0 = time.perf_counter()
                self.wait_room(0)
                checkpoints.append(self.sample(step))
                checkpoints[-1]["seconds"] = t0 - started - paused
                paused += time.perf_counter() - t0
        self.wait_room(0)
        seconds = time.perf_counter() - started - paused
        boots = sum(self.outcomes.values())
        row = summary(self.latencies)
        row.update(
            target=target,
            operations=operations,
            fill_seconds=fill_seconds,
            seconds=seconds,
            boots=boots,
            deletes=self.deletes,
            error_deletes=self.error_deletes,
            outcomes=dict(self.outcomes),
            decisions_per_s=boots / seconds if seconds > 0 else None,
            operations_per_s=operations / seconds if seconds > 0 else None,
            no_valid_host_rate=self.outcomes["NoValidHost"] / boots if boots else None,
            live_min=live_seen[0],
            live_max=live_seen[1],
            live_at_end=self.live,
            checkpoints=checkpoints,
        )
        row["growth"] = growth(checkpoints)
        return row

    # --- samples -------------------------------------------------------------------

    def sample(self, step: int) -> dict[str, Any]:
        """Resident sizes and the store's size, now."""
        rss = {name: proc_status_mb(pid)["VmRSS"] for name, pid in self.pids.items()}
        fixed = [k for k in self.keys.all() if k != self.keys.deleted]
        pipe = self.redis.pipeline(transaction=False)
        for key in fixed:
            pipe.memory_usage(key, samples=0)
        pipe.xlen(self.keys.changes)
        pipe.hlen(self.keys.instances)
        pipe.hlen(self.keys.consumers)
        got = pipe.execute()
        per_key = {k.rsplit(":", 1)[1]: (v or 0) for k, v in zip(fixed, got, strict=False)}
        stream_entries, instances, consumers = got[len(fixed) :]
        deleted = list(self.redis.scan_iter(match=f"{self.keys.deleted}:*", count=1000))
        deleted_bytes = 0
        for start in range(0, len(deleted), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for key in deleted[start : start + 1000]:
                pipe.memory_usage(key, samples=0)
            deleted_bytes += sum(v or 0 for v in pipe.execute())
        keys = sum(1 for v in per_key.values() if v) + len(deleted)
        store_bytes = sum(v for k, v in per_key.items() if k != "changes") + deleted_bytes
        return {
            "step": step,
            "live": self.live,
            "rss_mb": rss,
            "store_keys": keys,
            "store_mb": store_bytes / 2**20,
            "stream_mb": per_key.get("changes", 0) / 2**20,
            "stream_entries": stream_entries,
            "instance_records": instances,
            "consumers": consumers,
            "deleted_records": len(deleted),
            "key_mb": {k: v / 2**20 for k, v in per_key.items()},
            "redis_used_memory_mb": self.redis.info("memory")["used_memory"] / 2**20,
            "load_average": os.getloadavg()[0],
        }


def growth(checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    """From the first sample to the last: what grew, per 1,000 steps."""
    first, last = checkpoints[0], checkpoints[-1]
    per = 1000 / last["step"] if last["step"] else 0.0
    return {
        "worker_rss_mb": last["rss_mb"]["worker"] - first["rss_mb"]["worker"],
        "worker_rss_mb_per_1k_ops": (last["rss_mb"]["worker"] - first["rss_mb"]["worker"]) * per,
        "conductor_rss_mb": last["rss_mb"]["conductor"] - first["rss_mb"]["conductor"],
        "compute_rss_mb": last["rss_mb"]["compute"] - first["rss_mb"]["compute"],
        "compute_rss_mb_per_1k_ops": (last["rss_mb"]["compute"] - first["rss_mb"]["compute"])
        * per,
        "store_mb": last["store_mb"] - first["store_mb"],
        "store_mb_per_1k_ops": (last["store_mb"] - first["store_mb"]) * per,
        "instance_records": last["instance_records"] - first["instance_records"],
        "consumers": last["consumers"] - first["consumers"],
        "stream_entries": last["stream_entries"] - first["stream_entries"],
    }
