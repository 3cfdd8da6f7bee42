"""Case 8: a whole cell (300k hosts, 1M instance records), each Redis command timed.

One private ``redis-server`` (no persistence, nothing else on it) holds the
cell: the hosts of :func:`bench.cloud.plan` (written by
:func:`bench.cloud.populate`, several processes) whose existing usage is
split into ``cell_instances`` consumers, and an ACTIVE instance record
(about 900 bytes, through the store's own create script, pipelined, several
processes) for each consumer, on its host, holding its flavor: records,
allocations and the computes' reports agree, as in a settled cell.
``sweep_due`` records past their deadline sit beside them. With
``--cell-rdb PATH`` the populated cell is saved there (SAVE, once populated)
and a later run with the same sizes starts from it instead of populating.

Then what the project runs against such a cell, one phase at a time:

* **reports**: every live host's instance report (``report_instances``,
  ``cell_report_hosts`` hosts a call, as one compute_sim process sends them);
* **cold load**: a real worker (``python -m scheduler.cmd.worker``) and its
  first ``select_destinations`` over RabbitMQ (the snapshot); its VmRSS and
  VmHWM after it;
* **decisions**: ``cell_decisions`` warm ``select_destinations``, each a claim;
* **sweep**: the conductor's ``list_instances_due`` (``cell_sweeps`` times);
* **reconcile**: ``scheduler-admin audit --json``, the conductor's periodic
  :meth:`Reconciler.audit` once (its ``run_once`` repairs what that finds:
  nothing here), as its own process;
* **admin hosts**: ``scheduler-admin hosts --json`` (the whole providers,
  services and heartbeats hashes).

SLOWLOG is reset before each phase and read after it, so each phase's
slowest command, its time and how many took over 10 ms are its own. During
the populate it logs commands above 1 ms (millions are sent: only the slow
ones are kept), during the reconcile pass above 100 µs (it sends one
command per provider beside its pages: more than SLOWLOG keeps); in every
other phase it logs every command (``slowlog-log-slower-than 0``,
``slowlog-max-len`` above any phase's count, which the case checks), so a
phase's slowest command is known even when it is fast. The populate's bulk
writes are the bench's, not the project's: reported, but not held to the
10 ms target.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bench import cloud
from bench.cases.engine import SINGLE, request
from bench.cases.memory import proc_status_mb
from bench.nodes import PrivateRedis, wait_until
from bench.runner import POPULATE_PROCESSES, Bench
from bench.stats import summary
from bench.targets import Target
from conductor_stub.redrive import SWEEP_BATCH
from scheduler import rpc
from scheduler.exceptions import SchedulerUnavailable
from scheduler.objects import ACTIVE, BUILDING, DISK_GB, MEMORY_MB, VCPU, Flavor
from scheduler.store import InstanceReport, RedisStore, RunningInstance

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("load_300k", "cold load <= 15 s at 300k hosts", 15.0, "max"),
    Target("rss_300k", "worker resident size <= 800 MB at 300k hosts", 800.0, "max"),
    Target(
        "command_300k", "no Redis command > 10 ms at 300k hosts, 1M instance records", 10.0, "max"
    ),
)


#: Records written per pipeline while populating.
RECORD_CHUNK = 2000
#: SLOWLOG entries kept: above what any measured phase sends.
SLOWLOG_LEN = 500000
#: The populate logs only commands slower than this (µs).
POPULATE_SLOWER_THAN_US = 1000
#: The reconcile pass sends a command per provider (its root's name, once
#: each) beside its pages: more than SLOWLOG keeps, so only those above this
#: (µs) are logged; none near the target hides under it.
RECONCILE_SLOWER_THAN_US = 100
#: What a command may take at most.
TARGET_MS = 10.0
PREFIX = "bench-cell"
#: The existing consumers' project and user (what bench.cloud.write_hosts claims with).
OWNER = "existing"


#: Calls that may fail to load the view before the case gives up on decisions.
COLD_LOAD_TRIES = 3


class _NoView(Exception):
    """The worker never loaded its view."""


def _flavor(amounts: dict[str, int]) -> Flavor:
    return Flavor(
        name="bench.existing",
        vcpus=amounts.get(VCPU, 0),
        memory_mb=amounts.get(MEMORY_MB, 0),
        root_gb=amounts.get(DISK_GB, 0),
    )


def _write_records(url: str, prefix: str, hosts: Sequence[cloud.HostPlan]) -> None:
    """An ACTIVE record for each consumer of ``hosts``, on its host."""
    store = RedisStore(url, prefix, socket_timeout=60.0)
    try:
        batch = []
        for h in hosts:
            for consumer, amounts in h.consumers:
                batch.append(
                    cloud.instance_record(
                        consumer,
                        _flavor(amounts),
                        project_id=OWNER,
                        user_id=OWNER,
                        state=ACTIVE,
                        task_state=None,
                        host=h.name,
                        node=h.name,
                    )
                )
                if len(batch) == RECORD_CHUNK:
                    store.create_instances(batch)
                    batch = []
        store.create_instances(batch)
    finally:
        store.close()


def _in_processes(target: Any, url: str, hosts: Sequence[cloud.HostPlan], processes: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    step = math.ceil(len(hosts) / processes)
    workers = [
        ctx.Process(target=target, args=(url, PREFIX, hosts[k * step : (k + 1) * step]))
        for k in range(processes)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if any(w.exitcode for w in workers):
        raise RuntimeError("writing the instance records failed")


def _reports(hosts: Sequence[cloud.HostPlan], now: float) -> list[InstanceReport]:
    return [
        InstanceReport(
            h.name,
            now,
            tuple(
                RunningInstance(uuid, resources=amounts, project_id=OWNER, user_id=OWNER)
                for uuid, amounts in h.consumers
            ),
        )
        for h in hosts
        if not h.down
    ]


class SlowLog:
    """SLOWLOG of one Redis, read per phase; EVALSHA named by the store's script."""

    def __init__(self, client: redis.Redis, store: RedisStore) -> None:
        self.client = client
        self.scripts = {s.sha: name for name, s in vars(store._scripts).items()}
        self.phases: list[dict[str, Any]] = []
        client.config_set("slowlog-max-len", SLOWLOG_LEN)

    def start(self, slower_than_us: int = 0) -> None:
        self.client.config_set("slowlog-log-slower-than", slower_than_us)
        self.client.slowlog_reset()
        self._slower_than = slower_than_us
        self._started = time.perf_counter()

    def stop(self, phase: str, targeted: bool = True, **figures: Any) -> dict[str, Any]:
        seconds = time.perf_counter() - self._started
        length = self.client.slowlog_len()
        entries = self.client.slowlog_get(length)
        slowest = max(entries, key=lambda e: e["duration"], default=None)
        row = {
            "phase": phase,
            "targeted": targeted,
            "seconds": seconds,
            "logged_above_us": self._slower_than,
            "commands_logged": length,
            "overflowed": length >= SLOWLOG_LEN,
            "over_10ms": sum(1 for e in entries if e["duration"] > TARGET_MS * 1000),
            "slowest_ms": slowest["duration"] / 1000 if slowest else None,
            "slowest_command": self._name(slowest["command"]) if slowest else None,
            **figures,
        }
        assert not (targeted and row["overflowed"]), f"{phase}: SLOWLOG overflowed"
        self.phases.append(row)
        return row

    def _name(self, command: bytes) -> str:
        words = command.decode(errors="replace").split()
        if words[0].upper() == "EVALSHA" and len(words) > 1:
            return f"EVALSHA {self.scripts.get(words[1], words[1][:12])}"
        return " ".join(words[:2])


def _admin(bench: Bench, config: Any, *args: str) -> tuple[str, float, float]:
    """``scheduler-admin ARGS`` as its own process: its stdout, seconds and peak RSS (MB)."""
    path = bench.out / f".cell-admin-{args[0]}.out"
    started = time.perf_counter()
    with path.open("w") as stdout:
        popen = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cmd.admin", "--config-file", str(config), *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(popen.pid, 0)
    seconds = time.perf_counter() - started
    popen.returncode = os.waitstatus_to_exitcode(status)
    errors = popen.stderr.read().decode(errors="replace") if popen.stderr else ""
    if popen.returncode not in (0, 1):  # 1: the audit found something
        raise RuntimeError(f"scheduler-admin {' '.join(args)}: {errors[-2000:]}")
    out = path.read_text()
    path.unlink()
    return out, seconds, usage.ru_maxrss / 1024


def _populate(
    bench: Bench, store: RedisStore, url: str, plan: list[cloud.HostPlan], log: SlowLog
) -> None:
    """The hosts, a record for each consumer, and the due records (one phase)."""
    store.list_instances_due(time.time(), 1)  # the empty store's deadline index: complete
    log.start(POPULATE_SLOWER_THAN_US)
    cloud.populate(
        store, plan, url=url, prefix=PREFIX, processes=POPULATE_PROCESSES, pipelined=True
    )
    hosts_s = time.perf_counter() - log._started
    _in_processes(_write_records, url, plan, POPULATE_PROCESSES)
    now = time.time()
    due = [
        cloud.instance_record(str(uuidlib.uuid4()), state=BUILDING, deadline=now - 3600 + i)
        for i in range(bench.sizes.sweep_due)
    ]
    store.create_instances(due)
    row = log.stop("populate", targeted=False, hosts_seconds=hosts_s)
    bench.log(f"  populated in {row['seconds']:.0f} s (hosts {hosts_s:.0f} s)")


def _loaded(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.BusyLoadingError:
        return False


def private_redis(rdb: Path | None) -> tuple[PrivateRedis, redis.Redis, bool]:
    """A private ``redis-server`` (no persistence), started from the RDB file
    ``rdb`` when there is one (a hard link to it: Redis replaces, never
    rewrites, its dump), once it has loaded it; a client of it; and whether
    it started from ``rdb``."""
    server = PrivateRedis("--appendonly", "no")
    loaded = rdb is not None and rdb.exists()
    if rdb is not None and loaded:
        os.link(rdb, server.dir / "dump.rdb")
    server.start()
    client = redis.Redis.from_url(server.url(), socket_timeout=60.0)
    wait_until(lambda: _loaded(client), 900, "the private Redis to load its RDB file")
    return server, client, loaded


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    server, client, loaded = private_redis(bench.cell_rdb)
    url = server.url()
    store = RedisStore(url, PREFIX, socket_timeout=60.0)
    cluster = bench.cluster("cell")
    cluster.write_config(redis={"url": url, "key_prefix": PREFIX})
    log = SlowLog(client, store)
    result: dict[str, Any] = {"hosts": sizes.cell_hosts}
    try:
        bench.log(f"cell: {sizes.cell_hosts} hosts, {sizes.cell_instances} instances")
        plan = cloud.plan(sizes.cell_hosts, consumers=sizes.cell_instances)
        instances = sum(len(h.consumers) for h in plan)
        result["instances"] = instances
        if loaded:
            result["populated_from"] = str(bench.cell_rdb)
            bench.log(f"  loaded the populated cell from {bench.cell_rdb}")
        else:
            _populate(bench, store, url, plan, log)
            if bench.cell_rdb is not None:  # outside any phase: SAVE blocks Redis
                client.save()
                shutil.move(server.dir / "dump.rdb", bench.cell_rdb)
        memory = client.info("memory")
        result["redis_used_memory_mb"] = memory["used_memory"] / 2**20
        result["redis_used_memory_rss_mb"] = memory["used_memory_rss"] / 2**20
        bench.log(f"  Redis used_memory {result['redis_used_memory_mb']:.0f} MB")

        reports = _reports(plan, time.time())
        log.start()
        calls = []
        for start in range(0, len(reports), sizes.cell_report_hosts):
            started = time.perf_counter()
            store.report_instances(reports[start : start + sizes.cell_report_hosts])
            calls.append(time.perf_counter() - started)
        log.stop("reports", calls=summary(calls), hosts_per_call=sizes.cell_report_hosts)

        cloud.refresh_heartbeats(store, plan, batch=1000)
        worker = cluster.start_worker(name="worker-cell")
        pid = worker.serving_pid()
        transport = bench.transport(cluster)
        claimed = []
        try:
            scheduler = rpc.SchedulerClient(transport, timeout=600)
            ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
            log.start()
            cold, errors = None, []
            started = time.perf_counter()
            for _ in range(COLD_LOAD_TRIES):
                claimed.append(str(uuidlib.uuid4()))
                try:
                    scheduler.select_destinations(ctxt, request(SINGLE), [claimed[-1]])
                except SchedulerUnavailable as exc:  # the load failed: the worker's log says why
                    errors.append(repr(exc))
                    continue
                cold = time.perf_counter() - started
                break
            rss = proc_status_mb(pid)
            failed = [
                {k: e.get(k) for k in ("event", "error", "reason", "exc_info") if k in e}
                for e in worker.log_events()
                if e.get("level") in ("error", "warning")
            ][-5:]
            log.stop(
                "cold load",
                cold_load_s=cold,
                failed_calls=errors,
                worker_errors=failed,
                worker_rss_mb=rss["VmRSS"],
                worker_peak_rss_mb=rss["VmHWM"],
            )
            result.update(
                cold_load_s=cold, worker_rss_mb=rss["VmRSS"], worker_peak_rss_mb=rss["VmHWM"]
            )
            bench.log(
                f"  cold load {cold and round(cold, 2)} s after {len(errors)} failed call(s) "
                f"{failed}, worker RSS "
                f"{rss['VmRSS']:.0f} MB (peak {rss['VmHWM']:.0f} MB)"
            )
            if cold is None:
                raise _NoView
            log.start()
            timings = []
            for _ in range(sizes.cell_decisions):
                claimed.append(str(uuidlib.uuid4()))
                started = time.perf_counter()
                scheduler.select_destinations(ctxt, request(SINGLE), [claimed[-1]])
                timings.append(time.perf_counter() - started)
            log.stop("decisions", calls=summary(timings))
        except _NoView:
            pass  # no decisions on a worker that cannot load its view
        finally:
            transport.cleanup()
            worker.stop()
            cluster.processes.remove(worker)
        for uuid in claimed:
            store.release(uuid)

        log.start()
        timings = []
        for _ in range(sizes.cell_sweeps):
            started = time.perf_counter()
            found = store.list_instances_due(time.time(), SWEEP_BATCH)
            timings.append(time.perf_counter() - started)
        assert len(found) == sizes.sweep_due, "the sweep finds the due records"
        log.stop("sweep", calls=summary(timings), due=len(found))

        log.start(RECONCILE_SLOWER_THAN_US)
        out, seconds, peak = _admin(bench, cluster.config_file, "audit", "--json")
        counts = json.loads(out)["counts"]
        log.stop("reconcile", findings=counts, process_seconds=seconds, process_peak_rss_mb=peak)
        bench.log(f"  audit {seconds:.0f} s, findings {counts or 'none'}")

        log.start()
        out, seconds, peak = _admin(bench, cluster.config_file, "hosts", "--json")
        listed = len(json.loads(out))
        assert listed == len(plan), f"scheduler-admin hosts listed {listed} of {len(plan)}"
        log.stop("admin hosts", listed=listed, process_seconds=seconds, process_peak_rss_mb=peak)

        memory = client.info("memory")
        result["redis_used_memory_end_mb"] = memory["used_memory"] / 2**20
        result["redis_used_memory_peak_mb"] = memory["used_memory_peak"] / 2**20
    finally:
        client.close()
        store.close()
        cluster.close()
        server.destroy()
    result["phases"] = log.phases
    targeted = [p for p in log.phases if p["targeted"] and p["slowest_ms"] is not None]
    worst = max(targeted, key=lambda p: p["slowest_ms"])
    result.update(
        slowest_ms=worst["slowest_ms"],
        slowest_command=worst["slowest_command"],
        slowest_phase=worst["phase"],
        over_10ms=sum(p["over_10ms"] for p in targeted),
    )
    for p in log.phases:
        bench.log(
            f"  {p['phase']}: {p['seconds']:.1f} s, slowest {p['slowest_ms']} ms "
            f"({p['slowest_command']}), {p['over_10ms']} over 10 ms"
        )
    return result
