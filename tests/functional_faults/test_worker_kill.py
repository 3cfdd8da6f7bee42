"""A worker process killed with SIGKILL mid-storm (of boots, then of moves),
and another started.

Three workers are forked by one ``scheduler-worker`` (``[scheduler] workers =
3``). While boots pour in, one of them is killed with SIGKILL: every request
it had pulled off the queue and not finished is lost (oslo.messaging
acknowledges a cast before the endpoint runs). The supervisor starts another
in its place, and the conductor re-drives what it does not hear back on.
Afterwards every instance is ACTIVE or in ERROR with a reason, nothing is
doubled or leaked.

A fast worker finishes a request in milliseconds, so a kill timed from the
outside may well find it idle and lose nothing, which would leave the
re-drive untested. To be sure the killed worker holds requests, the kill
lands while the store is frozen (the test's private Redis stopped with
SIGSTOP, for well under the store's socket timeout): the last part of the
storm is cast meanwhile, each worker takes its share off the queue,
acknowledges it and waits on the store, and then one worker dies holding
its share.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from conductor_stub.records import ConductorSettings
from conductor_stub.tasks.resize import Resizer, own_flavor
from scheduler import rpc
from scheduler.flavors import load_catalog
from scheduler.objects import InstanceRecord, RequestSpec
from scheduler.service import ServiceResolver
from tests.functional_faults.conftest import FaultCluster, PrivateRedis, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

#: Cast while the store is frozen; each of the three workers takes about a third.
HELD = 60


@pytest.fixture
def cluster(
    private_redis: Callable[..., PrivateRedis], make_cluster: Callable[..., FaultCluster]
) -> Iterator[FaultCluster]:
    """The deployment on a Redis of the test's own, so that it can be frozen
    (asked for first, so that it outlives the deployment's checks)."""
    redis = private_redis()
    c = make_cluster(redis_url=redis.url())
    c.private_redis = redis  # type: ignore[attr-defined]
    yield c
    if redis.popen is not None and redis.popen.poll() is None:
        redis.popen.send_signal(signal.SIGCONT)


def test_a_worker_killed_mid_storm_loses_nothing(cluster: FaultCluster, transport) -> None:
    cluster.write_config(scheduler={"workers": 3}, conductor=FAST_CONDUCTOR)
    conductor = cluster.start_conductor()
    cluster.start_compute(40, "--build-time", "0.01")
    workers = cluster.start("workers", "scheduler.cmd.worker")
    wait_until(lambda: workers.count("scheduler_started") == 3, 60, "three workers")
    doomed = "scheduler-worker.1"

    def pids_of_doomed() -> list[int]:  # every process its slot started, in order
        return [e["pid"] for e in workers.worker_starts() if e["process"] == doomed]

    [pid] = pids_of_doomed()

    storm = start_storm(cluster, 600 - HELD, senders=3)
    # The rest of the storm: records made now (the conductor's deadlines on
    # them), the requests cast once the store is frozen.
    spec = RequestSpec(
        flavor=load_catalog("")[storm.flavor], project_id="demo", user_id="demo", num_instances=1
    )
    held = [str(uuidlib.uuid4()) for _ in range(HELD)]
    now = time.time()
    cluster.store.create_instances(
        InstanceRecord(
            uuid=u,
            request_spec=spec.to_primitive(),
            created_at=now,
            updated_at=now,
            deadline=now + FAST_CONDUCTOR["build_timeout"],
        )
        for u in held
    )
    storm.uuids += held
    client = rpc.SchedulerClient(transport)

    redis = cluster.private_redis  # type: ignore[attr-defined]
    redis.popen.send_signal(signal.SIGSTOP)
    try:
        for u in held:
            client.run_instance(rpc.RequestContext(user_id="demo", project_id="demo"), spec, [u])
        time.sleep(1.0)  # every worker takes its share and blocks on the store
        os.kill(pid, signal.SIGKILL)
    finally:
        redis.popen.send_signal(signal.SIGCONT)
    in_flight = storm.mark_fault()

    # The supervisor notices and starts another worker in its place.
    wait_until(lambda: len(pids_of_doomed()) == 2, 30, "a replacement worker")
    wait_until(lambda: workers.count("scheduler_started") == 4, 30, "the replacement serving")

    storm.settle(120)
    records = assert_settled_cleanly(storm)

    figures = storm.figures(
        held_by_the_workers_at_the_kill=HELD,
        replacement_pid=pids_of_doomed()[1],
        claims_reused=workers.count("allocation_reused"),
        redrives_logged=conductor.count("request_redriven"),
    )
    print("\nworker SIGKILL:", json.dumps(figures))
    assert workers.count("worker_died") == 1
    [died] = [e for e in workers.log_events() if e.get("event") == "worker_died"]
    assert (died["pid"], died["signal"]) == (pid, "SIGKILL"), "a worker killed, not the master"
    assert in_flight > 0
    assert figures["instances_redriven"] > 0, "the kill lost requests, and they were re-driven"
    assert figures["redrives"] == figures["redrives_logged"]
    assert figures["final_states"] == {"ACTIVE": 600}, figures
    assert len(records) == 600


#: Moves cast while the store is frozen, in the move test.
HELD_MOVES = 45


def test_a_worker_killed_mid_move_storm_loses_nothing(cluster: FaultCluster, transport) -> None:
    """The kill above, with moves: resizes and cold migrations of ACTIVE
    instances are cast while the store is frozen, a worker holding its share
    dies, and the conductor re-drives them (same request id, so the same
    migration: the park a no-op, the destination claimed once). Every move
    ends RESIZED, is confirmed or reverted, and the books balance."""
    cluster.write_config(
        scheduler={"workers": 3}, conductor={**FAST_CONDUCTOR, "resize_timeout": 6}
    )
    conductor = cluster.start_conductor()
    cluster.start_compute(40, "--build-time", "0.01")
    workers = cluster.start("workers", "scheduler.cmd.worker")
    wait_until(lambda: workers.count("scheduler_started") == 3, 60, "three workers")
    doomed = "scheduler-worker.2"
    [pid] = [e["pid"] for e in workers.worker_starts() if e["process"] == doomed]
    storm = start_storm(cluster, HELD_MOVES, senders=1, flavor="m1.small")
    storm.settle(120)
    assert storm.states() == {"ACTIVE": HELD_MOVES}

    store = cluster.store
    resizer = Resizer(
        store,
        rpc.SchedulerClient(transport),
        rpc.ComputeClient(transport, ServiceResolver(store, ttl=1.0)),
        ConductorSettings(resize_timeout=6),
    )
    flavors = load_catalog("")
    # Every other one a resize to m1.medium, the rest cold migrations; the
    # requests recorded (each with its deadline) and not yet sent.
    staged = [
        resizer.begin(u, flavors["m1.medium"] if i % 2 else own_flavor(store.get_instance(u)))
        for i, u in enumerate(storm.uuids)
    ]
    redis = cluster.private_redis  # type: ignore[attr-defined]
    redis.popen.send_signal(signal.SIGSTOP)
    try:
        for record in staged:
            resizer.send_resize(record)
        time.sleep(1.0)  # every worker takes its share and blocks on the store
        os.kill(pid, signal.SIGKILL)
    finally:
        redis.popen.send_signal(signal.SIGCONT)
    wait_until(lambda: workers.count("scheduler_started") == 4, 30, "the replacement serving")

    wait_until(
        lambda: all(r.state != "RESIZING" for r in storm.records()),
        120,
        "every move RESIZED again",
        interval=0.5,
    )
    records = storm.records()
    assert {r.state for r in records} == {"RESIZED"}, Counter((r.state, r.fault) for r in records)
    redriven = [r for r in records if r.redrives]
    assert redriven, "the kill lost moves, and they were re-driven"
    assert conductor.count("request_redriven") >= len(redriven)
    # Each re-driven move kept its migration: one destination claim, the source parked once.
    held = {c.uuid for c in store.list_consumers()}
    for record in records:
        assert record.migration_uuid in held and record.uuid in held, record
    for i, record in enumerate(records):
        (resizer.confirm if i % 3 else resizer.revert)(record.uuid)
    wait_until(
        lambda: all(r.state == "ACTIVE" and r.task_state is None for r in storm.records()),
        120,
        "every move confirmed or reverted",
        interval=0.5,
    )
    assert len(store.list_consumers()) == HELD_MOVES
    print(
        "\nworker SIGKILL mid-moves:",
        json.dumps({"moves": HELD_MOVES, "redriven": len(redriven), "pid": pid}),
    )
    assert workers.count("worker_died") == 1
