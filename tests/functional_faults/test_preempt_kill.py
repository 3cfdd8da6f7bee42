"""A preemption with its worker, then its conductor, killed with SIGKILL mid-way.

An on-demand boot on a host full of spot instances evicts one (see
:mod:`conductor_stub.tasks.preempt`). The worker's part is one store step:

* the worker is killed as soon as that step is written, while the conductor
  is frozen (SIGSTOP), so nothing of the rest has happened yet; the
  conductor, let go, carries it on from the records alone;
* the conductor is killed once it has sent the victim's terminate, while the
  compute is frozen, so the terminate is unanswered; a new conductor
  carries it on.

Either way the victim ends DELETED with the preempted fault, the preemptor
ACTIVE on the victim's host, built once and only after the victim's VM
stopped there (the compute's own log, in order), and the accounting holds.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from bench.cluster import Process
from scheduler.objects import InstanceRecord
from tests.functional_faults.conftest import FaultCluster, wait_until

CLASSES = {"classes": "on-demand:1000, spot:10:preemptible", "default_class": "on-demand"}
CONDUCTOR = {"sweep_interval": 0.5, "delete_timeout": 3, "build_timeout": 10, "max_redrives": 5}


def full_of_spot(cluster: FaultCluster) -> tuple[Process, Process, Process, list[str]]:
    """One host holding two spot m1.small, and nothing more: the conductor,
    the compute, the worker and the spot instances."""
    cluster.write_config(priority=CLASSES, conductor=CONDUCTOR)
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(1, "--memory-mb", "5000", "--vcpus", "4")
    worker = cluster.start_worker()
    spot = cluster.boot(
        "--flavor", "m1.small", "--extra-spec", "sched:priority_class=spot", "--count", "2"
    )
    assert {i["state"] for i in spot["instances"]} == {"ACTIVE"}, spot
    return conductor, compute, worker, [i["uuid"] for i in spot["instances"]]


def boot_on_demand(cluster: FaultCluster, spot: list[str]) -> str:
    """Cast an on-demand boot (not waited on); its uuid."""
    code, _, err = cluster.conductor_stub("boot", "--flavor", "m1.small")
    assert code == 0, err
    (uuid,) = [r.uuid for r in cluster.store.list_instances() if r.uuid not in spot]
    return uuid


def preempting(cluster: FaultCluster, uuid: str) -> InstanceRecord | None:
    record = cluster.store.get_instance(uuid)
    return record if record.task_state == "preempting" else None


def assert_preempted_once(
    cluster: FaultCluster, compute: Process, preemptor: str, spot: list[str]
) -> None:
    """The preemptor ACTIVE where one victim ran, built once, after it stopped."""
    wait_until(
        lambda: cluster.store.get_instance(preemptor).state == "ACTIVE", 90, "the preemptor ACTIVE"
    )
    record = cluster.store.get_instance(preemptor)
    victims = [r for r in cluster.store.list_instances(spot) if r.state == "DELETED"]
    assert len(victims) == 1, cluster.store.list_instances(spot)
    (victim,) = victims
    assert (victim.fault, victim.preempted_by) == (f"preempted by instance {preemptor}", preemptor)
    assert record.host == victim.host
    events: list[dict[str, Any]] = [
        e
        for e in compute.log_events()
        if e.get("event") in ("vm_started", "vm_stopped")
        and e.get("instance_uuid") in (preemptor, victim.uuid)
    ]
    order = [(e["event"], e["instance_uuid"]) for e in events]
    started = order.index(("vm_started", preemptor))
    assert ("vm_stopped", victim.uuid) in order[:started], order
    assert order.count(("vm_started", preemptor)) == 1, order


@pytest.mark.timeout(300)
def test_a_worker_killed_after_its_preempting_step_loses_nothing(cluster: FaultCluster) -> None:
    conductor, compute, worker, spot = full_of_spot(cluster)
    conductor.pause()  # nothing of the conductor's part happens meanwhile
    preemptor = boot_on_demand(cluster, spot)
    wait_until(lambda: preempting(cluster, preemptor), 60, "the preempting step")
    os.kill(worker.serving_pid(), signal.SIGKILL)
    assert all(r.state != "DELETED" for r in cluster.store.list_instances(spot))
    conductor.resume()
    assert_preempted_once(cluster, compute, preemptor, spot)


@pytest.mark.timeout(300)
def test_a_conductor_killed_mid_preemption_loses_nothing(cluster: FaultCluster) -> None:
    conductor, compute, _, spot = full_of_spot(cluster)
    compute.pause()  # the victim's terminate stays unanswered
    preemptor = boot_on_demand(cluster, spot)
    wait_until(lambda: preempting(cluster, preemptor), 60, "the preempting step")

    def terminates_sent() -> int:
        return sum(
            1
            for e in conductor.log_events()
            if e.get("event") == "request_redriven" and e.get("kind") == "terminate"
        )

    wait_until(terminates_sent, 30, "the victim's terminate sent")
    conductor.stop(signal.SIGKILL)
    compute.resume()
    cluster.start("conductor-2", "conductor_stub.cmd", "serve", ready="conductor_started")
    assert_preempted_once(cluster, compute, preemptor, spot)
