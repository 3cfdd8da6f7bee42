"""Case 12: worker processes against throughput where the workers do the work.

``select_destinations`` only (no compute builds, no conductor): callers in
the bench's process (``workers_callers`` threads on one transport) call a
real worker daemon (``[scheduler] workers`` = 1, then 2, in alternating
rounds, the daemon restarted for each) on a cloud of ``workers_hosts`` hosts
in a Redis of its own, with requests of 1 and of 10 instances (the latter
puts more of a call's CPU in the worker). Around each round, from /proc: the
CPU of the daemon's supervisor and of each worker process, the callers, the
broker and Redis, as ms per call and % of a core, and the machine's busy
cores (/proc/stat), hence the idle CPU and what else on the machine used;
``INFO commandstats`` of the Redis the case starts for itself (commands per
call) and the workers' own ``host_view_loaded`` /
``host_view_stream_truncated`` / ``host_view_write_lost`` log lines. A second
worker held back by contention in the store or the feed would show as more
commands, reloads or CPU per call with two workers than with one; one held
back by CPU, as two workers that got no more CPU than one.

Every claim is released after its round (not timed).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid as uuidlib
from typing import Any

import redis

from bench import cloud, pyspy
from bench.cases import bootstorm
from bench.cases.engine import MULTI, SINGLE, request
from bench.cluster import Cluster
from bench.nodes import PrivateRedis
from bench.procstat import CpuMeter, family, service_pids
from bench.runner import Bench, RedisCloud
from bench.stats import ratio, summary
from scheduler import rpc
from scheduler.store import Store, open_store


def commandstats(url: str) -> dict[str, int]:
    """Redis's count of each command since its start."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


#: What a worker logs when its view is read whole again, or must be: a second
#: worker's writes making the first reload would show here.
RELOADS = ("host_view_loaded", "host_view_stream_truncated", "host_view_write_lost")


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    bench.log(
        f"workers: 1 and 2 worker processes, {sizes.workers_hosts} hosts, "
        f"{sizes.workers_callers} callers"
    )
    # A Redis of the case's own: its commands and CPU are the workers' alone
    # (the shared one serves whatever else runs on the machine).
    private = PrivateRedis("--appendonly", "no")
    private.start()
    cluster = bench.cluster("workers")
    cluster.write_config(redis={"url": private.url()})
    store = open_store(private.url(), cluster.prefix)
    rc = RedisCloud(cluster, bench.plan(sizes.workers_hosts), 0.0)
    rows: list[dict[str, Any]] = []
    profiles: list[str] = []
    try:
        rc.populate_seconds = cloud.populate(
            store, rc.plan, url=private.url(), prefix=cluster.prefix, processes=2
        )
        rc.start_heartbeats(private.url())
        assert private.popen is not None
        for kind in REQUESTS[:1] if bench.quick else REQUESTS:
            # With --profile, a last pair of rounds under py-spy, not counted:
            # py-spy takes CPU from the processes it shares the cores with.
            for round_ in range(sizes.workers_rounds + (1 if bench.profile else 0)):
                spy = round_ == sizes.workers_rounds
                for workers in (1, 2):
                    row = _round(bench, cluster, store, private, workers, kind, spy, profiles)
                    if spy:
                        continue
                    row["round"] = round_
                    rows.append(row)
                    bench.log(
                        f"  {kind}, {workers} worker(s): {row['calls_per_s']:.0f} calls/s, "
                        f"{row['cpu_ms_per_call']['workers']:.2f} ms worker CPU a call, "
                        f"{row['free_cores']:.2f} cores idle"
                    )
    finally:
        rc.stop_heartbeats()
        store.close()
        cluster.close()
        private.stop()
    return {
        "rows": rows,
        "scaling": scaling(rows, bench.cores),
        "hosts": sizes.workers_hosts,
        "callers": sizes.workers_callers,
        "seconds_per_round": sizes.workers_seconds,
        "cores": bench.cores,
        "profiles": profiles,
    }


#: The requests each pair of rounds is measured with (--quick: the first).
REQUESTS = (SINGLE, MULTI)


def scaling(rows: list[dict[str, Any]], cores: int) -> list[dict[str, Any]]:
    """Two workers over one, per request and round (the two ran one after
    the other): throughput, the CPU the run's processes got, the workers'
    CPU per call and Redis commands per call; the CPU the one-worker round
    left idle, and the most that allowed (:func:`bootstorm.allowed_ratio`)."""
    out = []
    for two in rows:
        if two["workers"] != 2:
            continue
        one = next(
            r
            for r in rows
            if r["workers"] == 1 and r["request"] == two["request"] and r["round"] == two["round"]
        )
        out.append(
            {
                "request": two["request"],
                "round": two["round"],
                "ratio": ratio(two["calls_per_s"], one["calls_per_s"]),
                "cpu_ratio": ratio(two["ours_cores"], one["ours_cores"]),
                "worker_cpu_ratio": ratio(
                    two["cpu_ms_per_call"]["workers"], one["cpu_ms_per_call"]["workers"]
                ),
                "commands_ratio": ratio(
                    two["redis_commands_per_call_total"], one["redis_commands_per_call_total"]
                ),
                "one_worker_idle_cores": one["free_cores"],
                "two_workers_idle_cores": two["free_cores"],
                "free_core_for_second": one["free_cores"] >= bootstorm.FREE_CORE,
                "cpu_allowed_ratio": bootstorm.allowed_ratio(one),
                "reloads": sum(two["view_reloads"].values()),
                "cores": cores,
            }
        )
    return out


def _round(
    bench: Bench,
    cluster: Cluster,
    store: Store,
    private: PrivateRedis,
    workers: int,
    kind: str,
    spy: bool,
    profiles: list[str],
) -> dict[str, Any]:
    """One round: a daemon of ``workers`` worker processes called by the
    callers for ``workers_seconds``; its row."""
    sizes = bench.sizes
    url = private.url()
    cluster.write_config(scheduler={"workers": workers})
    daemon = cluster.start("worker-scaling", "scheduler.cmd.worker")
    transport = bench.transport(cluster)
    claimed: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while daemon.count("scheduler_started") < workers:
            if time.monotonic() > deadline or daemon.popen.poll() is not None:
                raise RuntimeError("the worker daemon did not start")
            time.sleep(0.2)
        client = rpc.SchedulerClient(transport, timeout=60)
        _callers(client, sizes.workers_callers, WARM_SECONDS, claimed, kind)  # all warm
        master, *children = family(daemon.popen.pid)
        assert private.popen is not None
        meter = CpuMeter(
            {
                "worker supervisor": [master],
                **{f"worker {i}": [pid] for i, pid in enumerate(children, 1)},
                "callers": [os.getpid()],
                "broker": service_pids()["broker"],
                "redis": [private.popen.pid],
            },
            include_services=False,
        )
        spies = []
        if spy and pyspy.available():
            for i, pid in enumerate(children, 1):
                name = f"workers-{request(kind).num_instances}-a-call-{i}-of-{workers}.raw"
                raw = bench.out / "profiles" / name
                raw.parent.mkdir(parents=True, exist_ok=True)
                spies.append((raw, pyspy.record(pid, sizes.workers_seconds, raw)))
        loads = {event: daemon.count(event) for event in RELOADS}
        before = commandstats(url)
        meter.start()
        timings, wall = _callers(
            client, sizes.workers_callers, sizes.workers_seconds, claimed, kind
        )
        cpu = meter.stop()
        after = commandstats(url)
        loads = {event: daemon.count(event) - n for event, n in loads.items()}
        for raw, popen in spies:
            popen.wait(timeout=120)
            if raw.exists():
                title = f"py-spy of a worker process of {workers}, {kind}, calls only"
                raw.with_suffix(".txt").write_text(pyspy.summarise(raw, title))
                raw.unlink()
                profiles.append(f"profiles/{raw.with_suffix('.txt').name}")
    finally:
        transport.cleanup()
        daemon.popen.send_signal(signal.SIGTERM)
        daemon.stop()
        cluster.processes.remove(daemon)
        for uuid in claimed:
            store.release(uuid)
    calls = len(timings)
    span = cpu.pop("seconds")
    busy = cpu.pop("machine_busy_cores")
    ours = sum(cpu.values())
    cpu["workers"] = sum(v for name, v in cpu.items() if name.startswith("worker "))
    commands = {name: n - before.get(name, 0) for name, n in after.items()}
    row = summary(timings)
    row.update(
        workers=workers,
        callers=sizes.workers_callers,
        request=kind,
        calls=calls,
        calls_per_s=calls / wall if wall else None,
        busy_cores=round(busy, 2),
        free_cores=round(max(bench.cores - busy, 0.0), 2),
        ours_cores=round(ours / span, 3) if span else None,
        cpu_ms_per_call={k: round(1000 * v / calls, 3) for k, v in cpu.items()},
        core_pct={k: round(100 * v / span, 1) for k, v in cpu.items()}
        | {
            "others": round(100 * max(busy - ours / span, 0.0), 1),
            "idle": round(100 * max(bench.cores - busy, 0.0), 1),
        },
        view_reloads=loads,
        redis_commands_per_call_total=round(sum(commands.values()) / calls, 2),
        redis_commands_per_call={
            name: round(n / calls, 2)
            for name, n in sorted(commands.items(), key=lambda kv: -kv[1])
            if n >= calls / 10
        },
    )
    return row


#: Seconds of calls before a round is measured: every worker process warm.
WARM_SECONDS = 1.0


def _callers(
    client: rpc.SchedulerClient, callers: int, seconds: float, claimed: list[str], kind: str
) -> tuple[list[float], float]:
    """``callers`` threads calling back to back for ``seconds``: each call's
    seconds, and the wall time."""
    ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
    spec = request(kind)
    timings: list[float] = []
    errors: list[BaseException] = []
    ready = threading.Barrier(callers + 1)
    deadline = [0.0]

    def loop() -> None:
        ready.wait()
        try:
            while time.perf_counter() < deadline[0]:
                uuids = [str(uuidlib.uuid4()) for _ in range(spec.num_instances)]
                t0 = time.perf_counter()
                client.select_destinations(ctxt, spec, uuids)
                timings.append(time.perf_counter() - t0)
                claimed.extend(uuids)
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)

    threads = [threading.Thread(target=loop) for _ in range(callers)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    ready.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise errors[0]
    return timings, wall
