"""Case 3: select_destinations over RabbitMQ against a bare echo call, same run.

A real worker (``python -m scheduler.cmd.worker``: one worker process forked
by its supervisor's master) serves a Redis cloud; :mod:`bench.echo_server`
serves the same method with a canned answer of the same size (captured from
the worker). Both are called with the same client
(:class:`scheduler.rpc.SchedulerClient`), one request for one instance with
alternates each, by 1 and by 16 concurrent callers (threads sharing one
transport), in alternating rounds so both see the same machine. Throughput is
calls completed per second; the ratio is select_destinations' throughput over
the echo's. The worker publishes each call's two notifications in both
formats (the default: four publishes); a second worker with notifications
off and a third with the legacy format only, each on a topic of its own, say
what the notifications of each call cost, and what the versioned format
adds. The CPU seconds of the
server (a worker daemon's master and its worker process; the echo server's
one process), the calling process, the broker and Redis are read from /proc
around every round, per call; the py-spy profile (``--profile``) samples the
worker process itself, in a round of its own after the measured ones (py-spy
takes CPU from the processes it shares the two cores with, so a profiled round
is never counted).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid as uuidlib
from typing import Any

from bench import pyspy
from bench.cases.engine import SINGLE, request
from bench.echo_server import TOPIC as ECHO_TOPIC
from bench.procstat import CpuMeter, family
from bench.runner import Bench
from bench.stats import ratio, summary
from bench.targets import Target
from scheduler import rpc

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target(
        "rabbit_ratio",
        "select_destinations throughput >= 0.6x the bare echo call, notifications on",
        0.6,
        "min",
    ),
)


def _callers(
    client: rpc.SchedulerClient, callers: int, seconds: float, claimed: list[str]
) -> tuple[list[float], float]:
    ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
    spec = request(SINGLE)
    timings: list[list[float]] = [[] for _ in range(callers)]
    errors: list[BaseException] = []
    start = threading.Barrier(callers + 1)
    deadline = [0.0]

    def loop(mine: list[float]) -> None:
        start.wait()
        try:
            while time.perf_counter() < deadline[0]:
                uuid = str(uuidlib.uuid4())
                t0 = time.perf_counter()
                client.select_destinations(ctxt, spec, [uuid])
                mine.append(time.perf_counter() - t0)
                claimed.append(uuid)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(t,)) for t in timings]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise errors[0]
    return [x for t in timings for x in t], wall


SELECT = "select_destinations"
QUIET = "select_destinations, notifications off"
LEGACY = "select_destinations, legacy notifications only"
#: The other workers: call name -> (process name, topic, its [notifications] options).
VARIANTS = {
    QUIET: ("worker-quiet", "bench-quiet", "enabled = False"),
    LEGACY: ("worker-legacy", "bench-legacy", "format = unversioned"),
}


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    bench.log(f"rabbit: workers and echo server, {sizes.rabbit_hosts} hosts")
    rc = bench.redis_cloud(sizes.rabbit_hosts)
    cluster = rc.cluster
    worker = cluster.start("worker-rabbit", "scheduler.cmd.worker")
    # The other workers, each on its own topic: with notifications off, how much
    # of a call's cost is the notifications every select_destinations
    # publishes; with the legacy format only, what the versioned one adds.
    # (A second --config-file overrides the cluster's for that process only.)
    variants = {}
    for call, (proc_name, topic, options) in VARIANTS.items():
        conf = cluster.tmp / f"{proc_name}.conf"
        conf.write_text(f"[scheduler]\ntopic = {topic}\n[notifications]\n{options}\n")
        variants[call] = (
            cluster.start(proc_name, "scheduler.cmd.worker", "--config-file", str(conf)),
            topic,
        )
    for proc in (worker, *(v for v, _ in variants.values())):
        proc.wait_for("scheduler_started", timeout=60)
    transport = bench.transport(cluster)
    claimed: list[str] = []
    rows: list[dict[str, Any]] = []
    profiles: list[str] = []
    try:
        select = rpc.SchedulerClient(transport, timeout=60)
        ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
        uuid = str(uuidlib.uuid4())
        response = select.call_raw(
            ctxt,
            "select_destinations",
            request_spec=request(SINGLE).to_primitive(),
            instance_uuids=[uuid],
            return_alternates=True,
            return_zones=True,
        )
        claimed.append(uuid)
        response_file = cluster.tmp / "echo-response.json"
        response_file.write_text(json.dumps(response))
        echo = cluster.start(
            "echo",
            "bench.echo_server",
            "--response-file",
            str(response_file),
            ready="echo_started",
        )
        # call name -> (client, the server's processes, the one answering)
        clients = {
            "echo": (
                rpc.SchedulerClient(transport, topic=ECHO_TOPIC, timeout=60),
                [echo.popen.pid],
                echo.popen.pid,
            ),
            SELECT: (select, family(worker.popen.pid), worker.serving_pid()),
            **{
                call: (
                    rpc.SchedulerClient(transport, topic=topic, timeout=60),
                    family(proc.popen.pid),
                    proc.serving_pid(),
                )
                for call, (proc, topic) in variants.items()
            },
        }

        def kept(name: str) -> list[str]:  # what a call claimed, to release at the end
            return [] if name == "echo" else claimed

        for name, (client, _pids, _pid) in clients.items():  # warm every path
            _callers(client, 1, 0.3, kept(name))
        for callers in sizes.rabbit_callers:
            got: dict[str, dict[str, Any]] = {n: {"timings": [], "cpu": []} for n in clients}
            for _round in range(sizes.rabbit_rounds):
                for name, (client, pids, _pid) in clients.items():
                    meter = CpuMeter({"server": pids, "callers": [os.getpid()]}).start()
                    timings, _wall = _callers(client, callers, sizes.rabbit_seconds, kept(name))
                    got[name]["timings"] += timings
                    got[name]["cpu"].append(meter.stop())
            if bench.profile and pyspy.available() and callers > 1:
                # A round of its own, not counted: py-spy takes CPU from the
                # processes it shares the cores with.
                client, _pids, pid = clients[SELECT]
                raw = bench.out / "profiles" / f"worker-select-{callers}-callers.raw"
                raw.parent.mkdir(parents=True, exist_ok=True)
                spy = (raw, pyspy.record(pid, sizes.rabbit_seconds, raw))
                _callers(client, callers, sizes.rabbit_seconds, kept(SELECT))
                profiles.append(_summarise(spy, callers))
            for name, found in got.items():
                rows.append(_row(name, callers, found["timings"], found["cpu"]))
            ech = _find(rows, callers, "echo")
            for name in (SELECT, *VARIANTS):
                row = _find(rows, callers, name)
                row["ratio_to_echo"] = ratio(row["calls_per_s"], ech["calls_per_s"])
            sel = _find(rows, callers, SELECT)
            bench.log(
                f"  {callers} caller(s): select {sel['calls_per_s']:.0f}/s "
                f"(median {sel['median_ms']:.2f} ms), echo {ech['calls_per_s']:.0f}/s "
                f"(median {ech['median_ms']:.2f} ms), ratio {sel['ratio_to_echo']:.2f}"
            )
    finally:
        transport.cleanup()
        names = ("echo", "worker-rabbit", *(proc_name for proc_name, _, _ in VARIANTS.values()))
        ours = [p for p in cluster.processes if p.name in names]
        for proc in ours:  # all at once: each takes a second to drain
            proc.popen.send_signal(signal.SIGTERM)
        for proc in ours:
            proc.stop()
            cluster.processes.remove(proc)
    for uuid in claimed:
        rc.store.release(uuid)
    return {"rows": rows, "hosts": sizes.rabbit_hosts, "profiles": profiles}


def _row(
    name: str, callers: int, timings: list[float], cpu: list[dict[str, float]]
) -> dict[str, Any]:
    """Latency summary, throughput, and CPU per call of each party (ms)."""
    wall = sum(c["seconds"] for c in cpu)
    calls = len(timings)
    row = summary(timings)
    row.update(
        call=name,
        callers=callers,
        calls_per_s=calls / wall if wall else None,
        machine_busy_cores=sum(c["machine_busy_cores"] * c["seconds"] for c in cpu) / wall
        if wall
        else None,
    )
    for party in ("server", "callers", "broker", "redis"):
        row[f"{party}_cpu_ms_per_call"] = (
            1000 * sum(c[party] for c in cpu) / calls if calls else None
        )
    return row


def _find(rows: list[dict[str, Any]], callers: int, call: str) -> dict[str, Any]:
    return next(r for r in rows if r["callers"] == callers and r["call"] == call)


def _summarise(spy: tuple[Any, Any], callers: int) -> str:
    raw, popen = spy
    popen.wait(timeout=120)
    if not raw.exists():
        return ""
    text = pyspy.summarise(
        raw, f"py-spy of the worker process while {callers} callers sent select_destinations"
    )
    path = raw.with_suffix(".txt")
    path.write_text(text)
    raw.unlink()
    return f"profiles/{path.name}"
