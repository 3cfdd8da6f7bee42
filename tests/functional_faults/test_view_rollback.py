"""Host views that notice a rollback: a Sentinel failover with ``min_replicas = 0``
loses writes the workers' views hold, and every worker reloads.

Three worker processes (one ``scheduler-worker``, ``workers = 3``) on a master +
replica + three sentinels. Once every view is loaded and the replica has
everything, the replica's link is cut and each worker in turn (a request sent
to its own server name) claims instances with ``select_destinations``: writes
the master acknowledges and the replica never gets. The first worker's feed
cursor is from before the cut (the stream was quiet until its claims), so
after the failover its cursor is still an entry of the promoted replica's
stream: only the claims it consumed locally, never delivered, tell it the
store lost them (``host_view_write_lost``). The two others read the first
one's claims before claiming, so their cursors are past the promoted stream
(``host_view_stream_truncated``). Then the master is killed and the sentinels
promote the replica.

What must hold afterwards, from each worker's decisions: a dry run
(``explain``) of exactly the capacity the rolled-back store has free is
placeable on every worker, one instance more is not (a view keeping the lost
claims would refuse hosts that are free; one missing usage would offer full
ones); then a storm of exactly that many boots lands every one ACTIVE, and
the store is full. The accounting checker ends it (the lost claims had no
instance records and no builds: nothing to repair but nothing left over).
"""

from __future__ import annotations

import json
import signal
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from scheduler import rpc
from scheduler.exceptions import SchedulerUnavailable
from scheduler.flavors import load_catalog
from scheduler.objects import RequestSpec
from tests.fixtures.replication import link_role, link_up
from tests.functional_faults.conftest import FaultCluster, SentinelGroup, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

pytestmark = pytest.mark.timeout(150)

HOSTS = 4
#: m1.tiny is 1 VCPU; ``--vcpus 1`` at the default cpu_allocation_ratio 4 is 4 per host.
SLOTS_PER_HOST = 4
WARM = 4  # booted before the cut (kept)
#: Claimed after the cut (lost), per worker in the order they are asked.
LOST = (3, 2, 2)
ADMIN = rpc.RequestContext.admin(project_id="p", user_id="u")


def tiny(count: int) -> RequestSpec:
    return RequestSpec(
        flavor=load_catalog("")["m1.tiny"], project_id="p", user_id="u", num_instances=count
    )


def repl_offset(port: int, field: str) -> int:
    with redis.Redis(port=port, decode_responses=True, socket_timeout=2) as client:
        return int(client.info("replication")[field])


def until_served(call: Callable[[], Any], timeout: float = 30) -> Any:
    """``call`` once the worker's store answers again (the failover just done:
    a worker learns the new master from the sentinels on its next connection)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except SchedulerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_every_worker_notices_the_rollback_and_decides_on_what_the_store_has(
    sentinel_group: SentinelGroup, make_cluster: Callable[..., FaultCluster]
) -> None:
    started = time.monotonic()
    group = sentinel_group
    cluster = make_cluster(redis_url=group.url())
    cluster.write_config(
        redis={"min_replicas": 0}, scheduler={"workers": 3}, conductor=FAST_CONDUCTOR
    )
    cluster.start_conductor()
    cluster.start_compute(HOSTS, "--vcpus", "1", "--build-time", "0.2")
    supervisor = cluster.start_worker()
    wait_until(lambda: len(supervisor.serving_pids()) == 3, 60, "three worker processes")
    slots = sorted(supervisor.serving_pids().items())
    transport = cluster.open_transport()
    try:
        clients = {
            process: rpc.SchedulerClient(
                transport, timeout=30, server=f"node-{cluster.ident}.{process.rsplit('.', 1)[1]}"
            )
            for process, _pid in slots
        }
        set_up = time.monotonic()
        boot = cluster.boot("--count", str(WARM), "--flavor", "m1.tiny")
        assert boot["summary"]["states"] == {"ACTIVE": WARM}, boot
        for client in clients.values():  # every view loaded, and caught up
            assert client.explain(ADMIN, tiny(1)).placeable

        # Everything so far on the replica, then its link cut.
        target = repl_offset(group.master.port, "master_repl_offset")
        wait_until(
            lambda: repl_offset(group.replica.port, "slave_repl_offset") >= target,
            10,
            "the replica to catch up",
        )
        group.cut_replica()
        wait_until(lambda: not link_up(group.replica), 10, "the replica to lose its link")
        lost: list[str] = []
        for (process, _), count in zip(slots, LOST, strict=True):
            uuids = [str(uuidlib.uuid4()) for _ in range(count)]
            picked = clients[process].select_destinations(ADMIN, tiny(count), uuids)
            assert len(picked) == count
            lost += uuids
        assert all(cluster.store.get_consumer(u) is not None for u in lost)

        master = group.master.popen
        assert master is not None
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        killed = time.monotonic()
        wait_until(lambda: group.master_port() == group.replica.port, 30, "the promotion")
        wait_until(lambda: link_role(group.replica) == "master", 30, "the replica to be master")
        failover = round(time.monotonic() - killed, 1)
        assert all(cluster.store.get_consumer(u) is None for u in lost)

        free = HOSTS * SLOTS_PER_HOST - WARM
        placeable = {
            process: (
                until_served(lambda c=client: c.explain(ADMIN, tiny(free)).placeable),
                client.explain(ADMIN, tiny(free + 1)).placeable,
            )
            for process, client in clients.items()
        }
    finally:
        transport.cleanup()
    events = [e for e in supervisor.log_events() if "process" in e]
    reloads = {
        process: {
            name: sum(1 for e in events if e["process"] == process and e["event"] == name)
            for name in ("host_view_write_lost", "host_view_stream_truncated")
        }
        for process, _ in slots
    }
    assert placeable == dict.fromkeys(clients, (True, False)), (placeable, reloads)
    first, *others = (process for process, _ in slots)
    assert reloads[first] == {"host_view_write_lost": 1, "host_view_stream_truncated": 0}, reloads
    for process in others:
        assert reloads[process] == {
            "host_view_write_lost": 0,
            "host_view_stream_truncated": 1,
        }, reloads

    # The free capacity filled by boots the workers share: every one lands.
    warm = [r.uuid for r in cluster.store.scan_instances()]
    filling = time.monotonic()
    storm = start_storm(cluster, free)
    storm.uuids += warm
    storm.settle(60)
    records = assert_settled_cleanly(storm)
    assert all(r.state == "ACTIVE" for r in records), storm.figures()
    assert len(records) == WARM + free
    figures = {
        "seconds_master_killed_to_promoted": failover,
        "claims_lost": len(lost),
        "reloads_per_worker": reloads,
        "seconds_setup": round(set_up - started, 1),
        "seconds_fill": round(time.monotonic() - filling, 1),
        "seconds_test": round(time.monotonic() - started, 1),
    }
    print("\nview rollback:", json.dumps(figures))
