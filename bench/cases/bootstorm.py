"""Case 4: a boot storm end to end, with one and with two worker processes.

Each run is a fresh deployment (its own vhost and key prefix): the conductor
(``conductor_stub.cmd serve``), one compute simulator process for all hosts
(``compute_sim.cmd``, builds failing at random with ``storm_fail_rate``,
rescheduled by the conductor onto the alternates), and the worker with
``[scheduler] workers`` = 1 or 2. ``conductor_stub.cmd boot`` creates the
instance records and casts one ``run_instance`` per instance; the records
are then polled (once a second, so the poll costs little) until every
instance is ACTIVE or ERROR.

Per instance, latency is the record's ``updated_at`` when it became ACTIVE
less its ``created_at``; throughput is ACTIVE instances over the span from
the first ``created_at`` to the last ``updated_at``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from bench.runner import Bench
from bench.stats import ratio, summary
from scheduler.objects import ACTIVE, FINAL_STATES

FLAVOR = "m1.small"


def run(bench: Bench) -> dict[str, Any]:
    rows = []
    for workers in bench.sizes.storm_workers:
        rows.append(_storm(bench, workers))
        row = rows[-1]
        bench.log(f"  {workers} worker(s): {row['instances_per_s']:.0f} instances/s, "
                  f"p50 {row['median_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms, {row['states']}")
    one = next((r for r in rows if r["workers"] == 1), None)
    for row in rows:
        row["ratio_to_one_worker"] = ratio(row["instances_per_s"],
                                           one["instances_per_s"] if one else None)
    return {"rows": rows, "cores": bench.cores}


def _storm(bench: Bench, workers: int) -> dict[str, Any]:
    sizes = bench.sizes
    bench.log(f"bootstorm: {sizes.storm_instances} instances on {sizes.storm_hosts} hosts, "
              f"{workers} worker(s)")
    cluster = bench.cluster(f"storm-{workers}")
    try:
        cluster.write_config(scheduler={"workers": workers})
        conductor = cluster.start("conductor", "conductor_stub.cmd", "serve")
        compute = cluster.start("compute", "compute_sim.cmd", "--hosts", str(sizes.storm_hosts),
                                "--name-prefix", "storm", "--fail-rate",
                                str(sizes.storm_fail_rate), "--seed", "7")
        worker = cluster.start("worker", "scheduler.cmd.worker")
        conductor.wait_for("conductor_started", timeout=60)
        compute.wait_for("compute_sim_started", timeout=120)
        _wait_count(worker, "scheduler_started", workers, timeout=60)
        out = subprocess.run(
            [sys.executable, "-m", "conductor_stub.cmd", "--config-file",
             str(cluster.config_file), "boot", "--count", str(sizes.storm_instances),
             "--flavor", FLAVOR, "--json"],
            capture_output=True, text=True, timeout=sizes.storm_timeout)
        if out.returncode:
            raise RuntimeError(f"conductor-stub boot failed: {out.stderr[-2000:]}")
        uuids = json.loads(out.stdout)["instances"]
        records = _wait_final(cluster.store, uuids, sizes.storm_timeout)
        cluster.check_accounting()
    finally:
        cluster.close()
    states = Counter(r.state for r in records)
    active = [r for r in records if r.state == ACTIVE]
    latencies = [r.updated_at - r.created_at for r in active]
    span = (max(r.updated_at for r in records if r.state in FINAL_STATES)
            - min(r.created_at for r in records))
    row = summary(latencies)
    row.update(workers=workers, instances=len(uuids), hosts=sizes.storm_hosts,
               fail_rate=sizes.storm_fail_rate, states=dict(states),
               rescheduled=sum(1 for r in active if r.attempts > 1),
               seconds=span, instances_per_s=len(active) / span if span > 0 else None)
    return row


def _wait_count(proc: Any, event: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while proc.count(event) < count:
        if time.monotonic() > deadline or proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} did not log {event} {count} times")
        time.sleep(0.2)


def _wait_final(store: Any, uuids: list[str], timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        records = store.list_instances(uuids)
        if len(records) == len(uuids) and all(r.state in FINAL_STATES for r in records):
            return records
        if time.monotonic() > deadline:
            states = Counter(r.state for r in records)
            raise RuntimeError(f"boot storm did not finish in {timeout}s: {dict(states)}")
        time.sleep(1.0)
