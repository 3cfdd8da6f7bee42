"""What every case shares: sizes (full or quick), the clouds, the deployments.

A :class:`Bench` hands cases the synthetic clouds they run on, built once per
size and reused across cases: an in-memory store (rebuilt per case, since a
case's claims change it) and a Redis store inside a :class:`Cluster` (the
functional tier's harness: its own RabbitMQ vhost, key prefix and config
file, so a real worker can be started against it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import cloud
from bench.cluster import REDIS_URL, Cluster
from scheduler.store import MemoryStore, Store

#: Processes that write a large cloud into Redis side by side.
POPULATE_PROCESSES = 3
#: Clouds larger than this are written pipelined (the same writes, a hundred
#: hosts per round trip): 300,000 hosts one round trip at a time take most of
#: an hour on a shared machine.
PIPELINED_ABOVE = 100000


@dataclass(frozen=True)
class Sizes:
    """How big each case runs; :data:`FULL` for the record, :data:`QUICK` for the test."""

    engine_hosts: tuple[int, ...] = (1000, 10000, 100000, 300000)
    naive_hosts: tuple[int, ...] = (1000, 10000)
    #: the cost-flat-in-hosts target: the median at the second against the first
    flat_hosts: tuple[int, int] = (10000, 300000)
    #: where a request is also timed with no max_placement_results cut (memory store)
    uncapped_hosts: int = 100000
    #: where a stream of requests drawn from the five-flavor catalog is timed
    stream_hosts: tuple[int, ...] = (10000, 100000)
    #: (decisions, seconds) per engine measurement, per request kind
    engine_single: tuple[int, float] = (1000, 6.0)
    engine_multi: tuple[int, float] = (150, 6.0)
    naive_decisions: tuple[int, float] = (50, 6.0)
    profile_decisions: int = 300
    hostview_hosts: tuple[int, ...] = (10000, 100000)
    cold_loads: int = 3
    writer_rate: int = 1000
    catchup_seconds: float = 6.0
    catchup_pace: float = 50.0  # decisions per second while catching up
    #: the catch-up runs: with the default services re-read, and with it deferred
    catchup_deferred: tuple[bool, ...] = (False, True)
    memory_hosts: tuple[int, ...] = (10000, 100000)
    rabbit_hosts: int = 1000
    rabbit_seconds: float = 4.0
    rabbit_rounds: int = 2
    rabbit_callers: tuple[int, ...] = (1, 16)
    storm_instances: int = 2000
    storm_hosts: int = 500
    storm_fail_rate: float = 0.1
    storm_workers: tuple[int, ...] = (1, 2)
    storm_modes: tuple[str, ...] = ("streamed", "backlog")
    storm_timeout: float = 600.0
    #: workers: the cloud, the callers, seconds per round and rounds per request
    workers_hosts: int = 1000
    workers_callers: int = 16
    workers_seconds: float = 8.0
    workers_rounds: int = 2
    #: e2e: casts of the bare kombu loop, and seconds of the echo call per count of callers
    e2e_casts: int = 10000
    e2e_echo_seconds: float = 3.0
    #: e2e: also the demo on its in-process transport and store
    e2e_in_process: bool = True
    churn_hosts: tuple[int, ...] = (1000, 10000)
    churn_utilisations: tuple[float, ...] = (0.5, 0.8, 0.95)
    #: steps per utilisation, each a boot and (at the target) a delete
    churn_operations: int = 20000
    churn_window: int = 16  # boots in flight at most
    churn_retention: float = 5.0  # [conductor] deleted_retention, seconds
    sweep_records: tuple[int, ...] = (1000, 10000, 100000, 200000)  # finished ones
    sweep_due: int = 100
    sweep_runs: int = 21  # sweeps per size, through the index
    sweep_baseline_runs: int = 5  # sweeps per size, by the full scan
    fill_seeds: int = 8
    fill_hosts_per_shape: int = 20
    fill_decision_hosts: int = 10000
    lifetimes_seeds: int = 2
    lifetimes_arrivals: int = 1500  # per offered load
    cell_hosts: int = 300000
    cell_instances: int = 1000000
    cell_report_hosts: int = 100  # hosts per report_instances call
    cell_decisions: int = 200
    cell_sweeps: int = 5
    replicas_hosts: int = 1000
    replicas_claims: int = 3000  # per setting, in rounds
    nova_hosts: int = 1000
    nova_calls: int = 2000  # per endpoint, alternating
    nova_codec_calls: int = 2000
    #: preempt: the churn's cloud and arrivals (each run twice: preemption on, off)
    preempt_churn_hosts: int = 40
    preempt_churn_operations: int = 12000
    #: preempt: the clouds a preempting decision's cost is measured on
    preempt_hosts: tuple[int, ...] = (1000, 10000)


FULL = Sizes()
QUICK = Sizes(
    engine_hosts=(100, 1000),
    naive_hosts=(100, 1000),
    flat_hosts=(100, 1000),
    uncapped_hosts=1000,
    stream_hosts=(100, 1000),
    engine_single=(30, 1.0),
    engine_multi=(5, 1.0),
    naive_decisions=(5, 1.0),
    profile_decisions=20,
    hostview_hosts=(1000,),
    cold_loads=1,
    writer_rate=200,
    catchup_seconds=1.0,
    catchup_pace=20.0,
    catchup_deferred=(False,),
    memory_hosts=(1000,),
    rabbit_hosts=100,
    rabbit_seconds=0.5,
    rabbit_rounds=1,
    storm_instances=40,
    storm_hosts=20,
    storm_modes=("backlog",),
    storm_timeout=60.0,
    workers_hosts=100,
    workers_callers=4,
    workers_seconds=0.5,
    workers_rounds=1,
    e2e_casts=300,
    e2e_echo_seconds=0.3,
    e2e_in_process=False,
    churn_hosts=(20,),
    churn_utilisations=(0.5, 0.95),
    churn_operations=120,
    churn_window=8,
    churn_retention=2.0,
    sweep_records=(1000, 3000),
    sweep_due=10,
    sweep_runs=5,
    sweep_baseline_runs=3,
    fill_seeds=1,
    fill_hosts_per_shape=4,
    fill_decision_hosts=1000,
    lifetimes_seeds=1,
    lifetimes_arrivals=60,
    cell_hosts=300,
    cell_instances=1000,
    cell_report_hosts=20,
    cell_decisions=5,
    cell_sweeps=2,
    replicas_hosts=50,
    replicas_claims=60,
    nova_hosts=50,
    nova_calls=40,
    nova_codec_calls=40,
    preempt_churn_hosts=4,
    preempt_churn_operations=400,
    preempt_hosts=(100,),
)


class Bench:
    """Options, results and shared clouds of one run."""

    def __init__(
        self,
        out: Path,
        *,
        quick: bool = False,
        profile: bool = False,
        redis_url: str = REDIS_URL,
        log: Any = print,
    ) -> None:
        self.out = out
        self.quick = quick
        self.profile = profile
        self.redis_url = redis_url
        self.sizes = QUICK if quick else FULL
        self.log = log
        #: cell: a saved populated cell to start from (written there when absent)
        self.cell_rdb: Path | None = None
        self.results: dict[str, Any] = {}
        self._plans: dict[int, list[cloud.HostPlan]] = {}
        self._redis: dict[int, RedisCloud] = {}
        self._tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        self._conf_parsed = False

    @property
    def cores(self) -> int:
        return os.cpu_count() or 1

    def plan(self, hosts: int) -> list[cloud.HostPlan]:
        if hosts not in self._plans:
            self._plans[hosts] = cloud.plan(hosts)
        return self._plans[hosts]

    def memory_cloud(self, hosts: int) -> Store:
        """A fresh in-memory store holding the cloud of ``hosts`` hosts."""
        store = MemoryStore()
        seconds = cloud.populate(store, self.plan(hosts))
        self.log(f"  populated {hosts} hosts in memory in {seconds:.1f}s")
        return store

    def redis_cloud(self, hosts: int) -> RedisCloud:
        """The Redis cloud of ``hosts`` hosts (built on first use, then shared)."""
        if hosts not in self._redis:
            cluster = self.cluster(f"cloud-{hosts}")
            hosts_plan = self.plan(hosts)
            seconds = cloud.populate(
                cluster.store,
                hosts_plan,
                url=self.redis_url,
                prefix=cluster.prefix,
                processes=POPULATE_PROCESSES,
                pipelined=hosts > PIPELINED_ABOVE,
            )
            self.log(f"  populated {hosts} hosts in Redis in {seconds:.1f}s")
            self._redis[hosts] = RedisCloud(cluster, hosts_plan, seconds)
            self._redis[hosts].start_heartbeats(self.redis_url)
        return self._redis[hosts]

    def drop_redis_cloud(self, hosts: int) -> None:
        rc = self._redis.pop(hosts, None)
        if rc is not None:
            rc.stop_heartbeats()
            rc.cluster.close()

    def cluster(self, name: str) -> Cluster:
        """A new isolated deployment (vhost, key prefix, config file)."""
        path = self._tmp / f"{name}-{time.monotonic_ns()}"
        path.mkdir()
        return Cluster(path)

    def transport(self, cluster: Cluster) -> Any:
        """An oslo.messaging transport into ``cluster``'s vhost (the caller cleans it up).

        Options live on the global ``cfg.CONF`` (a private ConfigOpts breaks
        oslo.messaging 18.3 silently); it is parsed once, with no files.
        """
        from scheduler import conf as conf_mod
        from scheduler import rpc

        if not self._conf_parsed:
            conf_mod.set_defaults()
            conf_mod.CONF([], project="scheduler", default_config_files=[])
            self._conf_parsed = True
        return rpc.get_transport(conf_mod.CONF, url=cluster.transport_url)

    def close(self) -> None:
        for hosts in list(self._redis):
            self.drop_redis_cloud(hosts)
        shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass
class RedisCloud:
    """A populated Redis store in its cluster, its live hosts heartbeating from
    another process (:mod:`bench.heartbeater`) every 10 s, as compute nodes do."""

    cluster: Cluster
    plan: list[cloud.HostPlan]
    populate_seconds: float
    heartbeater: subprocess.Popen[bytes] | None = None

    @property
    def store(self) -> Store:
        return self.cluster.store

    def start_heartbeats(self, redis_url: str) -> None:
        names = self.cluster.tmp / "live-hosts.txt"
        names.write_text("\n".join(h.name for h in self.plan if not h.down))
        self.heartbeater = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.heartbeater",
                "--url",
                redis_url,
                "--prefix",
                self.cluster.prefix,
                "--hosts-file",
                str(names),
            ]
        )

    def stop_heartbeats(self) -> None:
        if self.heartbeater is not None and self.heartbeater.poll() is None:
            self.heartbeater.terminate()
            self.heartbeater.wait()
