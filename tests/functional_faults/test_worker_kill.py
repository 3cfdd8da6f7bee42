"""A worker process killed with SIGKILL mid-storm, and another started.

Three workers are forked by one ``scheduler-worker`` (``[scheduler] workers =
3``). While 600 boots pour in, one of them is killed with SIGKILL: every
request it had pulled off the queue and not finished is lost (oslo.messaging
acknowledged them on receipt). The supervisor starts another in its place,
and the conductor re-drives what it does not hear back on. Afterwards every
instance is ACTIVE or in ERROR with a reason, nothing is doubled or leaked.
"""

from __future__ import annotations

import json
import os
import signal

from tests.functional_faults.conftest import FaultCluster, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm


def worker_pids(log: list[dict]) -> dict[str, list[int]]:
    """Pids each forked worker (``scheduler-worker.N``) started with, in order."""
    pids: dict[str, list[int]] = {}
    for event in log:
        if event.get("event") == "worker_starting":
            pids.setdefault(event["process"], []).append(event["pid"])
    return pids


def test_a_worker_killed_mid_storm_loses_nothing(cluster: FaultCluster) -> None:
    cluster.write_config(scheduler={"workers": 3}, conductor=FAST_CONDUCTOR)
    conductor = cluster.start_conductor()
    cluster.start_compute(40, "--build-time", "0.01")
    workers = cluster.start("workers", "scheduler.cmd.worker")
    wait_until(lambda: workers.count("scheduler_started") == 3, 60, "three workers")

    storm = start_storm(cluster, 600, senders=3)
    doomed = "scheduler-worker.1"

    def decided_by_doomed() -> int:
        return sum(1 for e in workers.log_events() if e.get("process") == doomed
                   and e.get("event") == "instance_scheduled")

    wait_until(lambda: decided_by_doomed() >= 40, 60, f"{doomed} to be busy")
    [pid] = worker_pids(workers.log_events())[doomed]
    os.kill(pid, signal.SIGKILL)
    in_flight = storm.mark_fault()
    decided_before_kill = decided_by_doomed()
    # The supervisor notices and starts another worker in its place.
    wait_until(lambda: len(worker_pids(workers.log_events()).get(doomed, [])) == 2, 30,
               "a replacement worker")
    wait_until(lambda: workers.count("scheduler_started") == 4, 30, "the replacement serving")

    storm.settle(120)
    records = assert_settled_cleanly(storm)

    figures = storm.figures(
        decided_by_killed_worker=decided_before_kill,
        replacement_pid=worker_pids(workers.log_events())[doomed][1],
        claims_reused=workers.count("allocation_reused"),
        redrives_logged=conductor.count("request_redriven"))
    print("\nworker SIGKILL:", json.dumps(figures))
    assert workers.count("worker_died") == 1
    assert in_flight > 0
    assert figures["instances_redriven"] > 0, "the kill lost requests, and they were re-driven"
    assert figures["redrives"] == figures["redrives_logged"]
    assert figures["final_states"] == {"ACTIVE": 600}, figures
    assert len(records) == 600
