"""Case 4: a boot storm end to end, with one and with two worker processes.

Each run starts from an empty store (its own vhost and key prefix): the conductor
(``conductor_stub.cmd serve``), one compute simulator process for all hosts
(``compute_sim.cmd``, builds failing at random with ``storm_fail_rate``,
rescheduled by the conductor onto the alternates), and the worker with
``[scheduler] workers`` = 1 or 2. ``conductor_stub.cmd boot`` creates the
instance records and casts one ``run_instance`` per instance; the records
are then polled (once a second, so the poll costs little) until every
instance is ACTIVE or ERROR.

Two ways to storm:

* ``streamed``: the boot runs while the workers serve, as an operator would
  run it. Per instance, latency is the record's ``updated_at`` when it became
  ACTIVE less its ``created_at``; throughput is ACTIVE instances over the
  span from the first ``created_at`` to the last ``updated_at``. On a small
  machine this measures the booting client as much as the workers: it sends
  one request per instance and shares the cores with everything else.
* ``backlog``: the workers are paused (SIGSTOP) while the boot queues every
  request, then resumed; throughput is ACTIVE instances over the span from
  the resume to the last ``updated_at``, what the workers, compute and
  conductor drain once the client is out of the way. With RabbitMQ's default
  unlimited prefetch the whole backlog would be pushed to whichever worker
  process happened to be first, so here ``[oslo_messaging_rabbit]
  rabbit_qos_prefetch_count`` is 20, letting the processes share it.

Over the measured span, the CPU seconds of each process are read from /proc:
the worker's supervisor and each of its worker processes, the conductor, the
compute simulator, the broker and Redis (each asked for its pid: whatever else uses
them counts too), and the booting client's (streamed: over the span; from a
backlog it queued before the span, so it is given apart, per boot). With
them, how many of the machine's cores were busy, and so how much CPU was idle
(cores x span less what every process of the machine used): a second worker
can only add throughput where the first left CPU idle. Each row gives every
process's CPU as ms per boot and % of a core, with the machine's other
processes and its idle CPU (:func:`by_process`), and says whether a core was
free (:func:`free_cpu`). The two-worker storm is held to 1.6x its one-worker
storm where that left a core free; where it left less, to the same share of
the gain its idle CPU allowed (:func:`allowed_ratio`, :func:`ratio_limit`).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import amqp, pyspy
from bench.cluster import Cluster, Process
from bench.procstat import CpuMeter, family
from bench.runner import Bench
from bench.stats import ratio, summary
from bench.targets import Target
from compute_sim.ops.build import RESULTS_BY_CAST, RESULTS_IN_STORE
from scheduler.objects import ACTIVE, FINAL_STATES

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("storm_ratio", "boot storm: 2 worker processes >= 1.6x one", 1.6, "min"),
    Target("storm_cpu", "boot storm: <= 3.4 ms of CPU per boot over every process", 3.4, "max"),
    Target(
        "storm_cpu_10",
        "boot storm, 10 instances a request: <= 2.0 ms of CPU per instance over every process",
        2.0,
        "max",
    ),
    Target(
        "storm_messages_10",
        "boot storm, 10 instances a request: <= 3 AMQP messages per instance",
        3.0,
        "max",
    ),
)

#: Cores left idle by the one-worker storm for the second worker to count as
#: having had a free core.
FREE_CORE = 1.0


FLAVOR = "m1.small"


PREFETCH = 20

#: How the storms report, as ``compute-sim`` does by default: build results in
#: the store, the hosts' stats at most this many seconds late.
STATS_INTERVAL = 0.1
#: The one-worker backlog storm as it ran before: the build results cast and the
#: stats reported at once, then the results in the store.
BEFORE = ((RESULTS_BY_CAST, 0.0), (RESULTS_IN_STORE, 0.0))
#: ``[notifications]`` of the storms that say what the notifications cost: the
#: legacy format only (three publishes a boot instead of six), and none.
NOTIFICATIONS_FEWER = ("unversioned", "off")
#: Instances per request of the storm that says what a multi-instance request
#: costs per instance (one run_instance, one pair of notifications per request).
PER_REQUEST = 10


def run(bench: Bench) -> dict[str, Any]:
    rows = []
    # One deployment (vhost, key prefix) for every storm: the store is wiped and
    # every process restarted between them, which is cheaper than a new vhost.
    cluster = bench.cluster("storm")
    before: list[dict[str, Any]] = []  # listed after the storms as they run now
    profiles: list[str] = []
    try:
        # First the one-worker backlog as it ran before each change, to compare
        # in the same run: the results cast and the stats reported at once, then
        # the results in the store.
        mode = bench.sizes.storm_modes[-1]
        for build_results, stats_interval in BEFORE:
            before.append(_storm(bench, cluster, 1, mode, build_results, stats_interval))
            row = before[-1]
            bench.log(
                f"  {mode}, 1 worker, results by {build_results}, stats every "
                f"{stats_interval} s: {row['instances_per_s']:.0f} instances/s, "
                f"{row['cpu_ms_per_boot']:.2f} ms CPU per boot, {row['states']}"
            )
        for mode in bench.sizes.storm_modes:
            for workers in bench.sizes.storm_workers:
                rows.append(_storm(bench, cluster, workers, mode))
                row = rows[-1]
                bench.log(
                    f"  {mode}, {workers} worker(s): {row['instances_per_s']:.0f} "
                    f"instances/s, p50 {row['median_ms']:.0f} ms, "
                    f"p99 {row['p99_ms']:.0f} ms, {row['states']}; {row['cpu_free']}"
                )
            one = next((r for r in rows if r["workers"] == 1 and r["mode"] == mode), None)
            for row in rows:
                if row["mode"] == mode:
                    row["ratio_to_one_worker"] = ratio(
                        row["instances_per_s"], one["instances_per_s"] if one else None
                    )
                    if row["workers"] > 1 and one is not None:
                        # Whether the one-worker storm left a core for this one,
                        # the most its idle CPU allowed, and what this one is held to.
                        row["free_core_for_second"] = one["free_cores"] >= FREE_CORE
                        row["cpu_allowed_ratio"] = allowed_ratio(one)
                        row["ratio_limit"] = ratio_limit(
                            row["free_core_for_second"], row["cpu_allowed_ratio"]
                        )
        # And as it runs now, with fewer notifications: what they cost.
        for notifications in NOTIFICATIONS_FEWER:
            before.append(_storm(bench, cluster, 1, mode, notifications=notifications))
            row = before[-1]
            bench.log(
                f"  {mode}, 1 worker, notifications {notifications}: "
                f"{row['instances_per_s']:.0f} instances/s, "
                f"{row['cpu_ms_per_boot']:.2f} ms CPU per boot, {row['states']}"
            )
        # And with the instances asked for PER_REQUEST at a time.
        before.append(_storm(bench, cluster, 1, mode, per_request=PER_REQUEST))
        row = before[-1]
        bench.log(
            f"  {mode}, 1 worker, {PER_REQUEST} instances a request: "
            f"{row['instances_per_s']:.0f} instances/s, "
            f"{row['cpu_ms_per_boot']:.2f} ms CPU per boot, "
            f"{row['amqp_messages_per_boot']} AMQP messages per boot, {row['states']}"
        )
        # Last, with --profile, the one-worker backlog once more under py-spy:
        # a storm of its own, not reported, since py-spy takes CPU from the
        # processes it shares the two cores with.
        if bench.profile and pyspy.available():
            profiles = _storm(bench, cluster, 1, mode, profile=True)["profiles"]
    finally:
        cluster.close()
    return {
        "rows": rows + before,
        "cores": bench.cores,
        "prefetch": PREFETCH,
        "profiles": profiles,
    }


def _storm(
    bench: Bench,
    cluster: Cluster,
    workers: int,
    mode: str,
    build_results: str = RESULTS_IN_STORE,
    stats_interval: float = STATS_INTERVAL,
    notifications: str = "both",
    per_request: int = 1,
    on_ready: Callable[[Cluster, Process], None] | None = None,
    profile: bool = False,
) -> dict[str, Any]:
    """One storm; its row. ``on_ready`` is called once the daemons serve,
    before anything is measured (the end-to-end case asks the worker for a
    response to echo). With ``profile``, py-spy samples the worker, the
    conductor and the compute simulator while it drains (its figures are
    then of a profiled run)."""
    sizes = bench.sizes
    bench.log(
        f"bootstorm ({mode}): {sizes.storm_instances} instances on {sizes.storm_hosts} "
        f"hosts, {workers} worker(s), build results by {build_results}, stats every "
        f"{stats_interval} s, notifications {notifications}, {per_request} a request"
    )
    cluster.write_config(
        scheduler={"workers": workers},
        notifications={
            "enabled": notifications != "off",
            "format": "both" if notifications == "off" else notifications,
        },
    )
    if mode == "backlog":
        cluster.write_config(oslo_messaging_rabbit={"rabbit_qos_prefetch_count": PREFETCH})
    paused: list[int] = []
    try:
        conductor = cluster.start("conductor", "conductor_stub.cmd", "serve")
        compute = cluster.start(
            "compute",
            "compute_sim.cmd",
            "--hosts",
            str(sizes.storm_hosts),
            "--name-prefix",
            "storm",
            "--fail-rate",
            str(sizes.storm_fail_rate),
            "--seed",
            "7",
            "--build-results",
            build_results,
            "--stats-interval",
            str(stats_interval),
        )
        worker = cluster.start("worker", "scheduler.cmd.worker")
        conductor.wait_for("conductor_started", timeout=60)
        compute.wait_for("compute_sim_started", timeout=120)
        _wait_count(worker, "scheduler_started", workers, timeout=60)
        if on_ready is not None:
            on_ready(cluster, worker)
        master, *children = family(worker.popen.pid)
        meter = CpuMeter(
            {
                "worker supervisor": [master],
                **{f"worker {i}": [pid] for i, pid in enumerate(children, 1)},
                "conductor": [conductor.popen.pid],
                "compute": [compute.popen.pid],
            }
        )
        if mode == "backlog":
            paused = family(worker.popen.pid)
            _signal(paused, signal.SIGSTOP)
        else:
            meter.start()
        client_cpu = _children_cpu()
        received = amqp.messages_received()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "conductor_stub.cmd",
                "--config-file",
                str(cluster.config_file),
                "boot",
                "--count",
                str(sizes.storm_instances),
                "--flavor",
                FLAVOR,
                "--per-request",
                str(per_request),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=sizes.storm_timeout,
        )
        if out.returncode:
            raise RuntimeError(f"conductor-stub boot failed: {out.stderr[-2000:]}")
        client_cpu = _children_cpu() - client_cpu
        uuids = json.loads(out.stdout)["instances"]
        resumed = time.time()
        if mode == "backlog":
            meter.start()
        storm = f"{mode}-{workers}-{build_results}-{stats_interval}-{notifications}"
        spies = _profile(bench, storm, worker, conductor, compute) if profile else []
        _signal(paused, signal.SIGCONT)
        paused = []
        records = _wait_final(cluster.store, uuids, sizes.storm_timeout)
        cpu = meter.stop()
        received_after = amqp.messages_received()
        profiles = _summarise(spies)
        cluster.check_accounting()
    finally:
        _signal(paused, signal.SIGCONT)
        for proc in cluster.processes:  # all at once: each takes a second to drain
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in cluster.processes:
            proc.stop()
        cluster.processes.clear()
        cluster.store.wipe()
    states = Counter(r.state for r in records)
    active = [r for r in records if r.state == ACTIVE]
    latencies = [r.updated_at - r.created_at for r in active]
    start = resumed if mode == "backlog" else min(r.created_at for r in records)
    span = max(r.updated_at for r in records if r.state in FINAL_STATES) - start
    row = summary(latencies)
    ours = {name: v for name, v in cpu.items() if name not in ("seconds", "machine_busy_cores")}
    busy = cpu.pop("machine_busy_cores")
    row.update(
        mode=mode,
        workers=workers,
        build_results=build_results,
        stats_interval=stats_interval,
        notifications=notifications,
        per_request=per_request,
        instances=len(uuids),
        hosts=sizes.storm_hosts,
        fail_rate=sizes.storm_fail_rate,
        states=dict(states),
        rescheduled=sum(1 for r in active if r.attempts > 1),
        seconds=span,
        instances_per_s=len(active) / span if span > 0 else None,
        machine_busy_cores=busy,
        cpu_seconds={name: round(v, 2) for name, v in ours.items()}
        | ({"client": round(client_cpu, 2)} if mode == "streamed" else {}),
        cpu_by_process=by_process(
            ours,
            client_cpu,
            mode == "streamed",
            len(uuids),
            cpu["seconds"],
            bench.cores,
            busy,
        ),
        # Every process but the booting client (which a backlog storm leaves out).
        cpu_ms_per_boot=1000 * sum(ours.values()) / len(uuids),
        # The client's, per boot, wherever it ran (a backlog's: before the span).
        client_cpu_ms_per_boot=1000 * client_cpu / len(uuids),
        # The client is the run's too, where it ran in the span.
        **free_cpu(
            bench.cores,
            busy,
            cpu["seconds"],
            sum(ours.values()) + (client_cpu if mode == "streamed" else 0.0),
        ),
        # Every message published to the broker from the boot's first cast to the
        # last instance final, over the instances (bench.amqp: the broker's own
        # count, so only while the bench is alone on it).
        amqp_messages_per_boot=(
            round((received_after - received) / len(uuids), 2)
            if received is not None and received_after is not None
            else None
        ),
        profiles=profiles,
    )
    return row


#: Seconds each process of the profiled storm is sampled for (``--profile``).
PROFILE_SECONDS = 6.0


def _profile(
    bench: Bench, storm: str, worker: Any, conductor: Any, compute: Any
) -> list[tuple[str, Path, Any]]:
    """py-spy of the worker process, the conductor and the compute simulator
    while a one-worker backlog drains (``storm``)."""
    if not pyspy.available():
        return []
    spies = []
    for name, pid in (
        ("worker", worker.serving_pid()),
        ("conductor", conductor.popen.pid),
        ("compute", compute.popen.pid),
    ):
        raw = bench.out / "profiles" / f"bootstorm-{storm}-{name}.raw"
        raw.parent.mkdir(parents=True, exist_ok=True)
        spies.append((name, raw, pyspy.record(pid, PROFILE_SECONDS, raw)))
    return spies


def _summarise(spies: list[tuple[str, Path, Any]]) -> list[str]:
    written = []
    for name, raw, popen in spies:
        popen.wait(timeout=120)
        if not raw.exists():
            continue
        path = raw.with_suffix(".txt")
        path.write_text(
            pyspy.summarise(raw, f"py-spy of the {name} while a backlog of boots drained")
        )
        raw.unlink()
        written.append(f"profiles/{path.name}")
    return written


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        os.kill(pid, sig)


def _wait_count(proc: Any, event: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while proc.count(event) < count:
        if time.monotonic() > deadline or proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} did not log {event} {count} times")
        time.sleep(0.2)


def free_cpu(cores: int, busy_cores: float, seconds: float, ours: float) -> dict[str, Any]:
    """What was free of the machine over a storm of ``seconds``: cores x span
    less the CPU every process of the machine used (``busy_cores``, from
    /proc/stat: ours, and whatever else shared it), as core-seconds and as
    cores; ``ours``, the CPU seconds of the run's own processes, as cores; and
    the statement a row carries (``cpu_free``)."""
    free = max(cores - busy_cores, 0.0)
    ours_cores = ours / seconds if seconds > 0 else None
    return {
        "metered_seconds": round(seconds, 2),
        "free_cores": round(free, 2),
        "free_core_seconds": round(free * seconds, 2),
        "ours_cores": None if ours_cores is None else round(ours_cores, 2),
        "cpu_free": (
            f"{free:.2f} of {cores} cores free ({free * seconds:.1f} core-s over "
            f"{seconds:.1f} s); the run's processes used {ours_cores or 0:.2f}, "
            f"others {max(busy_cores - (ours_cores or 0), 0):.2f}"
            + ("" if free >= FREE_CORE else ": no free core")
        ),
    }


def allowed_ratio(one: dict[str, Any]) -> float | None:
    """The most a second worker could have added, from the CPU the one-worker
    storm ``one`` left free: (what its processes used + what was free) over
    what they used, were every process's CPU per boot to stay as it was."""
    ours, free = one.get("ours_cores"), one.get("free_cores")
    if not ours or free is None:
        return None
    return round((ours + free) / ours, 2)


def by_process(
    ours: dict[str, float],
    client: float,
    client_in_span: bool,
    boots: int,
    seconds: float,
    cores: int,
    busy_cores: float,
) -> dict[str, dict[str, float | None]]:
    """Each process's CPU over a storm: ms per boot and % of a core over the
    metered span (``ours``: CPU seconds by process; the booting ``client``'s,
    whose % of a core means something only where it ran in the span), then
    the rest of the machine from /proc/stat: ``others`` (every process not
    the run's: whatever shares the machine) and ``idle`` (cores x span less
    all of it), as % of a core (a 2-core machine has 200 %)."""

    def entry(cpu: float | None, in_span: bool = True) -> dict[str, float | None]:
        return {
            "ms_per_boot": None if cpu is None else round(1000 * cpu / boots, 3),
            "core_pct": round(100 * cpu / seconds, 1)
            if cpu is not None and in_span and seconds > 0
            else None,
        }

    out = {name: entry(v) for name, v in ours.items()}
    out["client"] = entry(client, client_in_span)
    run = sum(ours.values()) + (client if client_in_span else 0.0)
    others = max(busy_cores * seconds - run, 0.0)
    idle = max(cores - busy_cores, 0.0) * seconds
    out["others"] = entry(others)
    out["idle"] = entry(idle)
    return out


#: What two workers are held to where a core was free (the issue's 1.6x), and
#: the share of the gain the idle CPU allowed that it stands for (1.6x of the
#: 2x a whole free core allows): where less than a core was free, two workers
#: are held to that share of what the idle CPU allowed (:func:`ratio_limit`).
RATIO_TARGET = next(t.limit for t in TARGETS if t.id == "storm_ratio")
GAIN_SHARE = 0.6
#: Below this gain allowed (ratio less one), there is nothing to judge.
LEAST_GAIN = 0.05


def ratio_limit(free_core: bool, allowed: float | None) -> float | None:
    """What a two-worker storm is held to: 1.6x where the one-worker storm
    left a core free; else 60 % of the gain its idle CPU allowed
    (``allowed``, :func:`allowed_ratio`), at most 1.6x; None (not judged)
    where it allowed next to nothing or is not known."""
    if free_core:
        return RATIO_TARGET
    if allowed is None or allowed - 1 < LEAST_GAIN:
        return None
    return round(min(RATIO_TARGET, 1 + GAIN_SHARE * (allowed - 1)), 2)


def _wait_final(store: Any, uuids: list[str], timeout: float) -> list[Any]:
    """Every record once all are final: the ones not yet final polled every
    POLL seconds (only those, so a poll costs little and the span ends close
    to the last one), then all read once."""
    deadline = time.monotonic() + timeout
    pending = list(uuids)
    while pending:
        records = store.list_instances(pending)
        final = {r.uuid for r in records if r.state in FINAL_STATES}
        pending = [u for u in pending if u not in final]
        if not pending:
            break
        if time.monotonic() > deadline:
            states = Counter(r.state for r in records)
            raise RuntimeError(f"boot storm did not finish in {timeout}s: {dict(states)}")
        time.sleep(POLL)
    return store.list_instances(uuids)


#: Seconds between polls of the records not yet final.
POLL = 0.2
