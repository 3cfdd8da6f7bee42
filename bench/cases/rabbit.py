"""Case 3: select_destinations over RabbitMQ against a bare echo call, same run.

A real worker process (``python -m scheduler.cmd.worker``, one process)
serves a Redis cloud; :mod:`bench.echo_server` serves the same method with a
canned answer of the same size (captured from the worker). Both are called
with the same client (:class:`scheduler.rpc.SchedulerClient`), one request
for one instance with alternates each, by 1 and by 16 concurrent callers
(threads sharing one transport), in alternating rounds so both see the same
machine. Throughput is calls completed per second; the ratio is
select_destinations' throughput over the echo's.
"""

from __future__ import annotations

import json
import threading
import time
import uuid as uuidlib
from typing import Any

from bench import pyspy
from bench.cases.engine import SINGLE, request
from bench.echo_server import TOPIC as ECHO_TOPIC
from bench.runner import Bench
from bench.stats import ratio, summary
from scheduler import rpc


def _callers(client: rpc.SchedulerClient, callers: int, seconds: float,
             claimed: list[str]) -> tuple[list[float], float]:
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


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    bench.log(f"rabbit: worker and echo server, {sizes.rabbit_hosts} hosts")
    rc = bench.redis_cloud(sizes.rabbit_hosts)
    cluster = rc.cluster
    worker = cluster.start_worker(name="worker-rabbit")
    transport = bench.transport(cluster)
    claimed: list[str] = []
    rows: list[dict[str, Any]] = []
    profiles: list[str] = []
    try:
        select = rpc.SchedulerClient(transport, timeout=60)
        echo = rpc.SchedulerClient(transport, topic=ECHO_TOPIC, timeout=60)
        ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
        uuid = str(uuidlib.uuid4())
        response = select.call_raw(ctxt, "select_destinations",
                                   request_spec=request(SINGLE).to_primitive(),
                                   instance_uuids=[uuid], return_alternates=True)
        claimed.append(uuid)
        response_file = cluster.tmp / "echo-response.json"
        response_file.write_text(json.dumps(response))
        cluster.start("echo", "bench.echo_server", "--response-file", str(response_file),
                      ready="echo_started")
        clients = {"echo": echo, "select_destinations": select}
        def kept(name: str) -> list[str]:  # what a call claimed, to release at the end
            return claimed if name == "select_destinations" else []

        for name, client in clients.items():  # warm both paths
            _callers(client, 1, 0.3, kept(name))
        for callers in sizes.rabbit_callers:
            got: dict[str, tuple[list[float], float]] = {n: ([], 0.0) for n in clients}
            for round_ in range(sizes.rabbit_rounds):
                for name, client in clients.items():
                    spy = None
                    if (bench.profile and pyspy.available() and round_ == 0
                            and name == "select_destinations" and callers > 1):
                        raw = bench.out / "profiles" / f"worker-select-{callers}-callers.raw"
                        raw.parent.mkdir(parents=True, exist_ok=True)
                        spy = (raw, pyspy.record(worker.popen.pid, sizes.rabbit_seconds, raw))
                    timings, wall = _callers(client, callers, sizes.rabbit_seconds,
                                            kept(name))
                    got[name] = (got[name][0] + timings, got[name][1] + wall)
                    if spy is not None:
                        profiles.append(_summarise(spy, callers))
            for name, (timings, wall) in got.items():
                row = summary(timings)
                row.update(call=name, callers=callers, calls_per_s=len(timings) / wall)
                rows.append(row)
            sel, ech = (next(r for r in rows if r["callers"] == callers and r["call"] == n)
                        for n in ("select_destinations", "echo"))
            sel["ratio_to_echo"] = ratio(sel["calls_per_s"], ech["calls_per_s"])
            bench.log(f"  {callers} caller(s): select {sel['calls_per_s']:.0f}/s "
                      f"(median {sel['median_ms']:.2f} ms), echo {ech['calls_per_s']:.0f}/s "
                      f"(median {ech['median_ms']:.2f} ms), ratio {sel['ratio_to_echo']:.2f}")
    finally:
        transport.cleanup()
        for proc in list(cluster.processes):
            if proc.name in ("echo", "worker-rabbit"):
                proc.stop()
                cluster.processes.remove(proc)
    for uuid in claimed:
        rc.store.release(uuid)
    return {"rows": rows, "hosts": sizes.rabbit_hosts, "profiles": profiles}


def _summarise(spy: tuple[Any, Any], callers: int) -> str:
    raw, popen = spy
    popen.wait(timeout=120)
    if not raw.exists():
        return ""
    text = pyspy.summarise(raw, f"py-spy of the worker process while {callers} callers "
                                f"sent select_destinations")
    path = raw.with_suffix(".txt")
    path.write_text(text)
    raw.unlink()
    return f"profiles/{path.name}"
