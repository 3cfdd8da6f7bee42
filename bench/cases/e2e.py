"""Case 11: a boot end to end, the all-in-one demo and the real services, each
beside the floor of the messages it sends, in one run.

Two paths boot the same storm (``storm_instances`` of ``m1.small`` on
``storm_hosts`` hosts, one instance a request, builds failing at
``storm_fail_rate`` and rescheduled, notifications in both formats), each on
this case's own vhost and key prefix of the shared RabbitMQ and Redis:

* ``real services``: the separate daemons, as :mod:`bench.cases.bootstorm`
  runs them (conductor, compute simulator, one worker process), the boot
  streamed by ``conductor-stub boot``. CPU per boot is every daemon's, the
  broker's and Redis's over the span; the booting client's (a process of its
  own, start-up included) is given apart.
* ``all-in-one``: ``scheduler-demo`` (:mod:`allinone.demo`) on the same
  broker and Redis: worker, conductor, compute simulator and booting client
  in one process (:mod:`bench.demo_run` meters its boot). CPU per boot is that
  process's, the broker's and Redis's; the part of it the booting client's
  thread used (its requests, then its wait, which reads every record every
  0.1 s until all are final) is given too. The demo gives its worker no
  notification transport: it publishes no notifications, which its messages
  per boot show.

A full run also boots it through ``all-in-one, in-process``: the demo as it
runs with no URLs, on oslo.messaging's in-process ``fake://`` transport and
the in-memory store, no broker, no Redis: what the scheduler's, conductor's
and simulator's own Python costs with no message or store round trip (no
floor: it sends no AMQP message).

The baselines, measured between them, are what the messages of a boot cost
with nothing of the scheduler's above them:

* ``echo call``: a bare oslo.messaging RPC server (:mod:`bench.echo_server`)
  answering ``select_destinations`` with a response captured from the
  real-services worker, called by 1 and by 16 callers: the floor of a call.
* ``kombu cast``: a bare kombu publish/consume loop (:mod:`bench.kombu_loop`,
  each publish confirmed, as oslo.messaging publishes): the floor of a cast.

A boot's message floor is then its calls (one ``select_destinations`` a
request) at the echo's CPU per call, and its other messages (the broker's
count per boot less a call's request and reply) at the loop's CPU per cast;
each path's CPU per boot is given over that floor, and its boots/s over the
echo's calls/s with 16 callers. The broker's count is the whole broker's:
on a broker others use, the casts (and so the floor) are overcounted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid as uuidlib
from typing import Any

from allinone.demo import STORE_ENV, TRANSPORT_ENV
from bench.cases import bootstorm
from bench.cases.engine import SINGLE, request
from bench.cases.rabbit import _callers
from bench.cluster import Cluster, Process
from bench.demo_run import CLIENT, PROCESS
from bench.echo_server import TOPIC as ECHO_TOPIC
from bench.kombu_loop import cast_loop
from bench.procstat import CpuMeter, service_env
from bench.runner import Bench
from bench.stats import ratio
from scheduler import rpc

REAL, ALLINONE = "real services", "all-in-one"
#: The demo as it runs with no URLs: oslo.messaging's in-process transport and
#: the in-memory store, no broker, no Redis (no floor: no messages).
IN_PROCESS = "all-in-one, in-process"
ECHO, CAST = "echo call", "kombu cast"
#: Callers of the echo call; the paths' boots/s are read against the last.
ECHO_CALLERS = (1, 16)


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    cluster = bench.cluster("e2e")
    captured: dict[str, Any] = {}
    baselines: list[dict[str, Any]] = []
    try:
        bench.log(
            f"e2e: {sizes.storm_instances} instances on {sizes.storm_hosts} hosts, "
            "the separate daemons, then the echo call and the kombu cast, then the demo"
        )
        real = bootstorm._storm(
            bench, cluster, 1, "streamed", on_ready=lambda c, w: _capture(bench, c, captured)
        )
        baselines += _echo(bench, cluster, captured["response"])
        baselines.append(_casts(cluster, sizes.e2e_casts))
        paths = [_real_row(real), _demo(bench, cluster)]
        if sizes.e2e_in_process:
            paths.append(_demo(bench, cluster, in_process=True))
    finally:
        cluster.close()
    echo = {b["callers"]: b for b in baselines if b["baseline"] == ECHO}
    cast = next(b for b in baselines if b["baseline"] == CAST)
    for row in paths:
        _judge(row, echo, cast)
    for row in paths:
        bench.log(
            f"  {row['path']}: {row['boots_per_s'] or 0:.0f} boots/s, "
            f"{row['cpu_ms_per_boot']:.2f} ms CPU per boot, "
            + (
                f"floor {row['floor_ms_per_boot']:.2f} ms ({row['ratio_to_floor']:.1f}x)"
                if row["floor_ms_per_boot"]
                else "no floor (no AMQP count)"
            )
        )
    for b in baselines:
        bench.log(
            f"  {b['baseline']} ({b['callers']} caller(s)): {b['per_s']:.0f}/s, "
            f"{b['cpu_ms_each']:.3f} ms CPU each"
        )
    return {"rows": paths, "baselines": baselines, "cores": bench.cores}


def _capture(bench: Bench, cluster: Cluster, into: dict[str, Any]) -> None:
    """A select_destinations response of the worker, for the echo server to
    answer with (its claim released at once)."""
    transport = bench.transport(cluster)
    try:
        uuid = str(uuidlib.uuid4())
        into["response"] = rpc.SchedulerClient(transport, timeout=60).call_raw(
            rpc.RequestContext(user_id="bench", project_id="bench"),
            "select_destinations",
            request_spec=request(SINGLE).to_primitive(),
            instance_uuids=[uuid],
            return_alternates=True,
            return_zones=True,
        )
        cluster.store.release(uuid)
    finally:
        transport.cleanup()


def _echo(bench: Bench, cluster: Cluster, response: Any) -> list[dict[str, Any]]:
    """The echo call by each count of callers: calls/s and CPU per call."""
    path = cluster.tmp / "echo-response.json"
    path.write_text(json.dumps(response))
    echo = cluster.start(
        "echo", "bench.echo_server", "--response-file", str(path), ready="echo_started"
    )
    transport = bench.transport(cluster)
    rows = []
    try:
        client = rpc.SchedulerClient(transport, topic=ECHO_TOPIC, timeout=60)
        _callers(client, 1, 0.2, [])  # warm
        for callers in ECHO_CALLERS:
            meter = CpuMeter({"echo server": [echo.popen.pid], "callers": [os.getpid()]})
            meter.start()
            timings, _wall = _callers(client, callers, bench.sizes.e2e_echo_seconds, [])
            rows.append(_baseline(ECHO, callers, len(timings), meter.stop()))
    finally:
        transport.cleanup()
        _stop(cluster, echo)
    return rows


def _casts(cluster: Cluster, count: int) -> dict[str, Any]:
    url = cluster.transport_url.replace("rabbit://", "amqp://", 1)
    measured = cast_loop(url, count, CpuMeter({"publisher and consumer": [os.getpid()]}))
    return _baseline(CAST, 1, count, measured)


def _baseline(name: str, callers: int, count: int, cpu: dict[str, float]) -> dict[str, Any]:
    seconds = cpu.pop("seconds")
    busy = cpu.pop("machine_busy_cores")
    return {
        "baseline": name,
        "callers": callers,
        "count": count,
        "seconds": seconds,
        "per_s": count / seconds if seconds else None,
        "cpu_ms_each": 1000 * sum(cpu.values()) / count,
        "cpu_ms_each_by_process": {k: round(1000 * v / count, 4) for k, v in cpu.items()},
        "machine_busy_cores": busy,
    }


def _real_row(storm: dict[str, Any]) -> dict[str, Any]:
    n = storm["instances"]
    return {
        "path": REAL,
        "instances": n,
        "per_request": storm["per_request"],
        "states": storm["states"],
        "rescheduled": storm["rescheduled"],
        "seconds": storm["seconds"],
        "boots_per_s": storm["instances_per_s"],
        "cpu_ms_per_boot": storm["cpu_ms_per_boot"],
        "cpu_ms_per_boot_by_process": {
            k: round(1000 * v / n, 3) for k, v in storm["cpu_seconds"].items() if k != "client"
        },
        "client_cpu_ms_per_boot": storm["client_cpu_ms_per_boot"],
        "amqp_messages_per_boot": storm["amqp_messages_per_boot"],
        "machine_busy_cores": storm["machine_busy_cores"],
        "cpu_free": storm["cpu_free"],
    }


def _demo(bench: Bench, cluster: Cluster, in_process: bool = False) -> dict[str, Any]:
    """``scheduler-demo`` on the case's vhost and Redis (or, ``in_process``, on
    its in-process transport and store), its boot metered."""
    sizes = bench.sizes
    out = cluster.tmp / "demo-run.json"
    path = IN_PROCESS if in_process else ALLINONE
    bench.log(f"e2e: scheduler-demo ({path}), {sizes.storm_instances} instances")
    env = service_env()
    for name in (TRANSPORT_ENV, STORE_ENV):  # its URLs: the config file's, or none
        env.pop(name, None)
    where = ["--in-process"] if in_process else ["--config-file", str(cluster.config_file)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.demo_run",
            str(out),
            *where,
            "--hosts",
            str(sizes.storm_hosts),
            "--instances",
            str(sizes.storm_instances),
            "--flavors",
            bootstorm.FLAVOR,
            "--fail-rate",
            str(sizes.storm_fail_rate),
            # As the compute simulator's default, which the real services run.
            "--build-time",
            str(DAEMON_BUILD_TIME),
            "--timeout",
            str(sizes.storm_timeout),
        ],
        capture_output=True,
        text=True,
        timeout=sizes.storm_timeout + 120,
        env=env,
    )
    if done.returncode:
        raise RuntimeError(f"scheduler-demo failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    got = json.loads(out.read_text())
    n = sizes.storm_instances
    cpu = {k: got[k] for k in (PROCESS, "broker", "redis") if k in got}
    active = got["states"].get("ACTIVE", 0)
    return {
        "path": path,
        "instances": n,
        "per_request": 1,
        "states": got["states"],
        "rescheduled": got["rescheduled"],
        "seconds": got["boot_seconds"],
        "boots_per_s": active / got["boot_seconds"] if got["boot_seconds"] else None,
        "cpu_ms_per_boot": 1000 * sum(cpu.values()) / n,
        "cpu_ms_per_boot_by_process": {k: round(1000 * v / n, 3) for k, v in cpu.items()},
        # Within the one process: the thread that boots and waits (the wait
        # reads every record every 0.1 s).
        "client_cpu_ms_per_boot": 1000 * got[CLIENT] / n,
        "amqp_messages_per_boot": (
            round(got["amqp_messages"] / n, 2) if got["amqp_messages"] is not None else None
        ),
        "machine_busy_cores": got["machine_busy_cores"],
        "cpu_free": bootstorm.free_cpu(
            bench.cores, got["machine_busy_cores"], got["seconds"], sum(cpu.values())
        )["cpu_free"],
    }


#: ``compute-sim --build-time``'s default, which the real-services storm runs
#: (the demo's own default is shorter).
DAEMON_BUILD_TIME = 0.05


def message_floor(
    per_request: int, messages: float | None, echo_ms: float, cast_ms: float
) -> tuple[float, float] | None:
    """(casts, CPU ms) a boot's messages cost at the floor: a call a request
    (``select_destinations``) at ``echo_ms``, and every other message of the
    ``messages`` a boot the broker counted (less the call's request and
    reply) at ``cast_ms``; None where the broker's count could not be read."""
    if messages is None:
        return None
    calls = 1 / per_request
    casts = max(messages - 2 * calls, 0.0)
    return casts, calls * echo_ms + casts * cast_ms


def _judge(row: dict[str, Any], echo: dict[int, dict[str, Any]], cast: dict[str, Any]) -> None:
    """A path's row beside its floor (the echo's CPU with one caller) and its
    rate beside the echo's with the most callers."""
    floor = message_floor(
        row["per_request"],
        row["amqp_messages_per_boot"],
        echo[1]["cpu_ms_each"],
        cast["cpu_ms_each"],
    )
    row["casts_per_boot"] = floor and round(floor[0], 2)
    row["floor_ms_per_boot"] = floor and floor[1]
    row["ratio_to_floor"] = ratio(row["cpu_ms_per_boot"], floor and floor[1])
    row["ratio_to_echo_calls"] = ratio(row["boots_per_s"], echo[ECHO_CALLERS[-1]]["per_s"])


def _stop(cluster: Cluster, proc: Process) -> None:
    proc.popen.send_signal(signal.SIGTERM)
    proc.stop()
    cluster.processes.remove(proc)
