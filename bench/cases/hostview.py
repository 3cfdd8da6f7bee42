"""Case 2: the host view on Redis: cold load, and catching up with the change stream.

Cold load: a fresh :class:`Engine` loads its view on its first decision, so
the load is the first decision's time less a warm decision's median (a dry
run, ``claim=False``, so nothing changes in between). Repeated on fresh
engines; the median is reported.

Catch-up: dry-run decisions at a steady pace, first with nothing else
writing, then while another process (:mod:`bench.claim_writer`) makes
``writer_rate`` claims per second on the same store. Every decision first
applies the changes written since the one before; the difference between
the two medians is what catching up costs a decision. Run twice: with the
default settings, where the view also re-reads heartbeats (not in the
change feed) every ``services_refresh_interval`` (2 s), for the hosts whose
liveness is in doubt, and with that re-read deferred past the run, which
isolates the change stream's own cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from bench.cases.engine import SINGLE, Decider
from bench.runner import Bench
from bench.stats import summary
from bench.targets import Target
from scheduler.engine import EngineSettings

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (Target("load_100k", "cold load <= 5 s at 100k hosts", 5.0, "max"),)


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    loads: list[dict[str, Any]] = []
    catchup: list[dict[str, Any]] = []
    for hosts in sizes.hostview_hosts:
        bench.log(f"hostview: {hosts} hosts")
        rc = bench.redis_cloud(hosts)
        loads.append(_cold_load(bench, rc.store, hosts))
        bench.log(f"  cold load {loads[-1]['load_ms']:.0f} ms")
        for deferred in sizes.catchup_deferred:
            services = DEFERRED_SERVICES if deferred else DEFAULT_SERVICES
            catchup.append(_catchup(bench, rc, hosts, services))
            bench.log(
                f"  catch-up, services {services}: "
                f"{catchup[-1]['cost_per_decision_ms']:.3f} ms per decision "
                f"({catchup[-1]['changes_per_decision']:.0f} changes)"
            )
    return {"cold_load": loads, "catchup": catchup}


DEFAULT_SERVICES = "re-read every 2 s (default)"
DEFERRED_SERVICES = "re-read deferred"


def _cold_load(bench: Bench, store: Any, hosts: int) -> dict[str, Any]:
    firsts, warms = [], []
    for _ in range(bench.sizes.cold_loads):
        decider = Decider(store)
        started = time.perf_counter()
        decider.decide(SINGLE, claim=False)
        firsts.append(time.perf_counter() - started)
        for _ in range(20):
            started = time.perf_counter()
            decider.decide(SINGLE, claim=False)
            warms.append(time.perf_counter() - started)
        del decider
    first, warm = summary(firsts), summary(warms)
    return {
        "hosts": hosts,
        "first_decision_ms": first["median_ms"],
        "warm_decision_ms": warm["median_ms"],
        "load_ms": first["median_ms"] - warm["median_ms"],
        "loads": first["n"],
    }


def _paced(decider: Decider, seconds: float, pace: float) -> tuple[list[float], float]:
    timings: list[float] = []
    started = time.perf_counter()
    interval = 1.0 / pace
    while (now := time.perf_counter()) - started < seconds:
        due = started + len(timings) * interval
        if now < due:
            time.sleep(due - now)
        t0 = time.perf_counter()
        decider.decide(SINGLE, claim=False)
        timings.append(time.perf_counter() - t0)
    return timings, time.perf_counter() - started


def _catchup(bench: Bench, rc: Any, hosts: int, services: str) -> dict[str, Any]:
    sizes = bench.sizes
    settings = (
        EngineSettings()
        if services == DEFAULT_SERVICES
        else EngineSettings(services_refresh_interval=3600.0)
    )
    decider = Decider(rc.store, settings)
    decider.decide(SINGLE, claim=False)  # load
    idle, _ = _paced(decider, sizes.catchup_seconds, sizes.catchup_pace)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.claim_writer",
            "--url",
            bench.redis_url,
            "--prefix",
            rc.cluster.prefix,
            "--rate",
            str(sizes.writer_rate),
            "--seconds",
            str(sizes.catchup_seconds + 1.0),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        if writer.stdout.readline().strip() != "ready":
            raise RuntimeError("the claim writer did not start")
        time.sleep(0.5)  # let the writer reach its rate
        busy, busy_wall = _paced(decider, sizes.catchup_seconds, sizes.catchup_pace)
        out, _ = writer.communicate(timeout=600)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    written = json.loads(out.strip().splitlines()[-1])
    quiet, loaded = summary(idle), summary(busy)
    decisions_per_s = len(busy) / busy_wall
    changes = written["rate"] / decisions_per_s
    cost = loaded["median_ms"] - quiet["median_ms"]
    return {
        "hosts": hosts,
        "services": services,
        "writer_claims_per_s": written["rate"],
        "decisions_per_s": decisions_per_s,
        "changes_per_decision": changes,
        "idle_median_ms": quiet["median_ms"],
        "idle_p99_ms": quiet["p99_ms"],
        "median_ms": loaded["median_ms"],
        "p99_ms": loaded["p99_ms"],
        "cost_per_decision_ms": cost,
        "cost_per_change_us": cost * 1000 / changes if changes else None,
    }
