"""No request lost: casts lost on the way, a conductor restarted, requests never
answered, and a scheduler worker process killed with SIGKILL while 500 boots
are in flight (and replaced by its supervisor). Afterwards every instance is
ACTIVE, or ERROR with a reason, and no allocation is doubled or leaked."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

from bench.nodes import wait_until
from compute_sim.hosts import provider_uuid
from scheduler.exceptions import RequestTimedOut
from scheduler.objects import FINAL_STATES, InstanceRecord
from tests.fixtures.cli import boot_in_background
from tests.fixtures.resize import amounts
from tests.functional.conftest import Cluster

#: Short deadlines, so a lost request is re-driven within seconds.
FAST = {"build_timeout": 2, "sweep_interval": 0.5, "max_redrives": 3}


def void_topic(cluster: Cluster) -> Path:
    """A config file sending scheduler RPCs to a topic nobody consumes: the
    broker drops them, as a lost message."""
    path = cluster.tmp / "void.conf"
    path.write_text("[scheduler]\ntopic = void\n")
    return path


def all_final(cluster: Cluster, uuids: list[str]) -> bool:
    records = cluster.store.list_instances(uuids)
    return len(records) == len(uuids) and all(r.state in FINAL_STATES for r in records)


def assert_nothing_doubled_or_leaked(
    cluster: Cluster, records: list[InstanceRecord], flavor: str
) -> None:
    """One allocation per ACTIVE instance, on its host, of its flavor; none else."""
    consumers = {c.uuid: c for c in cluster.store.list_consumers()}
    active = {r.uuid: r for r in records if r.state == "ACTIVE"}
    assert set(consumers) == set(active), "an allocation without an ACTIVE instance, or none"
    for uuid, record in active.items():
        assert dict(consumers[uuid].allocations) == {
            provider_uuid(record.host or ""): amounts(flavor)
        }, record
    for record in records:
        assert record.state == "ACTIVE" or record.fault, record


def test_lost_requests_are_redriven_by_a_restarted_conductor(cluster: Cluster) -> None:
    cluster.write_config(conductor=FAST)
    first = cluster.start_conductor()
    cluster.start_compute(5, "--build-time", "0.01")
    worker = cluster.start_worker()
    # The first conductor dies before any deadline; the next one finds the
    # pending set in the store. It is stopped (SIGSTOP) before the boot, so
    # however long the boot command takes on a loaded machine, the first never
    # reaches a deadline and re-drives nothing.
    first.pause()
    # Every run_instance of this boot is lost on the way.
    code, stdout, stderr = cluster.conductor_stub(
        "boot", "--count", "20", "--json", config_files=(void_topic(cluster),)
    )
    assert code == 0, stderr
    uuids = json.loads(stdout)["instances"]
    first.stop(signal.SIGKILL)
    second = cluster.start("conductor-b", "conductor_stub.cmd", "serve", ready="conductor_started")

    wait_until(lambda: all_final(cluster, uuids), timeout=30, what="every instance final")

    records = cluster.store.list_instances(uuids)
    assert Counter(r.state for r in records) == {"ACTIVE": 20}
    redrives = sum(r.redrives for r in records)
    assert all(r.redrives >= 1 for r in records)  # once each, unless the machine is slow
    assert second.count("request_redriven") == redrives
    assert first.count("request_redriven") == 0
    # Only re-driven requests reached the worker (every original was lost).
    assert worker.count("instance_scheduled") == redrives
    assert_nothing_doubled_or_leaked(cluster, records, "m1.small")


def test_a_request_never_answered_ends_in_error_with_its_claim_released(cluster: Cluster) -> None:
    cluster.write_config(conductor={"build_timeout": 1, "sweep_interval": 0.2, "max_redrives": 2})
    conductor = cluster.start_conductor()
    # Builds take far longer than the conductor waits.
    compute = cluster.start_compute(3, "--build-time", "8")
    cluster.start_worker()
    code, stdout, stderr = cluster.conductor_stub("boot", "--count", "3", "--json")
    assert code == 0, stderr
    uuids = json.loads(stdout)["instances"]

    wait_until(lambda: all_final(cluster, uuids), timeout=20, what="every instance final")

    for record in cluster.store.list_instances(uuids):
        assert (record.state, record.fault, record.redrives) == (
            "ERROR",
            RequestTimedOut.USER_MESSAGE,
            2,
        ), record
        assert record.fault_details and "after 2 re-drive(s)" in record.fault_details
    assert cluster.store.list_consumers() == [], "claims released when given up"
    # The re-driven copies found the claims and the builds under way: nothing doubled.
    assert compute.count("build_duplicate_ignored") >= 3
    # The builds finish late, their claims gone and their records ERROR: the
    # compute drops them (no VM, nothing reported).
    wait_until(
        lambda: compute.refused("build_and_run_instance") >= 3, timeout=20, what="late builds"
    )
    assert compute.count("build_succeeded") == 0
    assert conductor.count("late_build_result_released") == 0
    assert compute.count("late_build_result_released") == 0
    assert not set(uuids) & set(cluster.running_vms())
    assert {r.state for r in cluster.store.list_instances(uuids)} == {"ERROR"}
    assert cluster.store.list_consumers() == []
    wait_until(
        lambda: not cluster.store.list_instances_due(time.time() + 3600),
        what="the clean-up deadlines to pass",
    )


def test_a_worker_killed_with_500_boots_in_flight(cluster: Cluster) -> None:
    cluster.write_config(conductor={"build_timeout": 8, "sweep_interval": 1, "max_redrives": 3})
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(50, "--build-time", "0.01")
    doomed = cluster.start_worker("worker-a")
    survivor = cluster.start_worker("worker-b")
    # Five API clients boot 100 each at once: casts arrive faster than the
    # workers decide, so each worker pulls a backlog.
    boots = [boot_in_background(cluster, 100) for _ in range(5)]

    # Kill one worker process while the boots pour in: every cast it has pulled
    # and not yet handled is gone (oslo.messaging acknowledged it on receipt).
    # The process serving, not worker-a's master: a master killed has its
    # worker stopped gracefully, which loses nothing.
    wait_until(
        lambda: doomed.count("instance_scheduled") >= 50, timeout=60, what="worker-a to be busy"
    )
    killed = doomed.serving_pid()
    os.kill(killed, signal.SIGKILL)
    killed_at = time.monotonic()
    # The master reaps it, logs its death, then starts a replacement: the
    # lines before worker_died are the killed worker's, those after the
    # replacement's.
    doomed.wait_for("worker_died")
    events = doomed.log_events()
    [death] = [i for i, e in enumerate(events) if e.get("event") == "worker_died"]
    assert (events[death]["pid"], events[death]["signal"]) == (killed, "SIGKILL")
    by_killed = Counter(e.get("event") for e in events[:death])
    scheduled_by_doomed = by_killed["instance_scheduled"]
    wait_until(
        lambda: doomed.count("scheduler_started") == 2,
        timeout=60,
        what="worker-a's replacement serving",
    )
    uuids: list[str] = []
    for boot in boots:
        stdout, stderr = boot.communicate(timeout=120)
        assert boot.returncode == 0, stderr.decode()[-4000:]
        uuids += json.loads(stdout)["instances"]
    assert len(uuids) == 500

    wait_until(lambda: all_final(cluster, uuids), timeout=90, what="every instance final")
    settled_after = time.monotonic() - killed_at

    records = cluster.store.list_instances(uuids)
    states = Counter(r.state for r in records)
    redriven = [r for r in records if r.redrives]
    counts = {
        "instances": len(records),
        "scheduled_by_killed_worker": scheduled_by_doomed,
        "scheduled_by_survivors": survivor.count("instance_scheduled")
        + doomed.count("instance_scheduled")
        - scheduled_by_doomed,
        "instances_redriven": len(redriven),
        "redrives": sum(r.redrives for r in records),
        "redrives_logged": conductor.count("request_redriven"),
        "reused_claims": survivor.count("allocation_reused")
        + doomed.count("allocation_reused")
        - by_killed["allocation_reused"],
        "duplicate_builds_ignored": compute.count("build_duplicate_ignored")
        + compute.count("build_duplicate_reported"),
        "final_states": dict(states),
        "seconds_from_kill_to_all_final": round(settled_after, 1),
    }
    print("\nkill test:", json.dumps(counts))
    (cluster.tmp / "kill-test-counts.json").write_text(json.dumps(counts))
    # Whether the kill lost requests depends on what the worker held at that
    # instant: a fast worker is often idle between casts and loses none. The
    # fault tier's test_worker_kill.py makes the loss certain (it kills while
    # the store is frozen); here, whatever was lost was re-driven, and every
    # re-drive is one the conductor logged.
    assert len(redriven) <= counts["redrives"] == counts["redrives_logged"]
    assert set(states) <= {"ACTIVE", "ERROR"}
    assert_nothing_doubled_or_leaked(cluster, records, "m1.tiny")
