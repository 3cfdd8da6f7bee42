"""Durable acknowledgements (``[redis] min_replicas``) on a private master and
replica, and a Sentinel failover mid-storm.

* With ``min_replicas = 1`` a claim is done only once the replica has it:
  read from the replica right after, it is there; with the replica stopped
  (SIGSTOP), the claim raises StoreUnavailable after ``min_replicas_timeout``
  although the master has it: WAIT counted that write (WAIT waits for its
  own connection's last write, which is why the store sends it in the
  write's pipeline). The cost per claim, with and without, is printed.
* A master + replica + three sentinels, the daemons on the
  ``redis+sentinel://`` URL with ``min_replicas = 1``; mid-storm the
  replica's link is cut (its replication user turned off on the master),
  then the master killed (SIGKILL), so the sentinels promote a replica that
  lacks whatever the master took after the cut; the old master is started
  again and the sentinels make it the new master's replica (with one
  replica, ``min_replicas = 1`` acknowledges nothing until then), or, on a
  loaded machine, find the new master silent for their second and fail
  back to the old one before it was ever a replica (the figures say which;
  clean-clone CI saw it once). Every
  instance the boot was told accepted ends ACTIVE or in ERROR with a reason,
  its allocations as its record says, and none that the conductor recorded
  ACTIVE is lost (which shows as recorded ACTIVE twice, after a re-drive).
  ``SCHEDULER_TEST_MIN_REPLICAS=0`` runs the same fault without waiting: it
  loses the ACTIVE records (and claims) acknowledged after the cut, which
  the re-drives and the reconciliation then repair (see doc/source/admin/faults.rst).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

from scheduler.exceptions import GenerationConflict, StoreUnavailable
from scheduler.objects import AllocationRequest
from scheduler.store import Inventory, RedisStore
from tests.fixtures.replication import link_role, link_up
from tests.functional_faults.conftest import (
    FaultCluster,
    PrivateRedis,
    SentinelGroup,
    replica_online,
    wait_until,
)
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pair(
    private_redis: Callable[..., PrivateRedis],
) -> Iterator[tuple[PrivateRedis, PrivateRedis]]:
    master = private_redis("--repl-diskless-sync-delay", "0")
    replica = private_redis("--replicaof", "127.0.0.1", str(master.port))
    wait_until(lambda: replica_online(master), 30, "the replica to be online")
    yield master, replica
    assert replica.popen is not None
    os.kill(replica.popen.pid, signal.SIGCONT)


def request(host: str) -> AllocationRequest:
    return AllocationRequest(allocations={host: {"VCPU": 1}}, project_id="p", user_id="u")


def test_a_claim_is_done_once_the_replica_has_it(
    pair: tuple[PrivateRedis, PrivateRedis],
) -> None:
    master, replica = pair
    prefix = f"test-acks-{uuidlib.uuid4().hex}"
    plain = RedisStore(master.url(), prefix)
    # Room for a replica starved of CPU on a loaded machine (WAIT returns as
    # soon as the replica acknowledges); the outage below uses a short one.
    durable = RedisStore(master.url(), prefix, min_replicas=1, min_replicas_timeout=3.0)
    strict = RedisStore(master.url(), prefix, min_replicas=1, min_replicas_timeout=0.5)
    host = str(uuidlib.uuid4())
    provider = durable.create_provider(host, "host-1")
    durable.set_inventory(host, provider.generation, {"VCPU": Inventory(total=100000)})
    on_replica = redis.Redis(port=replica.port, decode_responses=True)
    try:
        # Acknowledged: the replica has it the moment the claim returns.
        for _ in range(20):
            consumer = str(uuidlib.uuid4())
            assert durable.claim(consumer, request(host))
            assert on_replica.hexists(durable.keys.consumers, consumer)
        # A refused write raises as without WAIT (it wrote nothing).
        with pytest.raises(GenerationConflict):
            durable.set_inventory(host, provider.generation, {"VCPU": Inventory(total=1)})

        cost = {}
        for name, store in (("min_replicas=0", plain), ("min_replicas=1", durable)):
            times = []
            for _ in range(500):
                started = time.perf_counter()
                store.claim(str(uuidlib.uuid4()), request(host))
                times.append(time.perf_counter() - started)
            cost[name] = round(statistics.median(times) * 1000, 3)
        print("\nmedian ms per claim, master + replica on one machine:", json.dumps(cost))

        # The replica stopped: the master has the claim, the caller is told
        # the store is unavailable (retryable), after the timeout.
        assert replica.popen is not None
        os.kill(replica.popen.pid, signal.SIGSTOP)
        consumer = str(uuidlib.uuid4())
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
            strict.claim(consumer, request(host))
        assert 0.5 <= time.monotonic() - started < 2
        assert durable.get_consumer(consumer) is not None
        # A write without WAIT is acknowledged at once, whatever the replica.
        assert plain.claim(str(uuidlib.uuid4()), request(host))
        os.kill(replica.popen.pid, signal.SIGCONT)
        assert durable.release(consumer)
        assert not on_replica.hexists(durable.keys.consumers, consumer)
    finally:
        on_replica.close()
        plain.wipe()
        plain.close()
        durable.close()
        strict.close()


#: The daemons' setting in the failover test (0 shows the loss it prevents).
MIN_REPLICAS = int(os.environ.get("SCHEDULER_TEST_MIN_REPLICAS", "1"))


def test_a_failover_mid_storm_loses_no_acknowledged_boot(
    sentinel_group: SentinelGroup, make_cluster: Callable[..., FaultCluster]
) -> None:
    # (sentinel_group first: it is torn down after the cluster's final checks.)
    group = sentinel_group
    cluster = make_cluster(redis_url=group.url())
    cluster.write_config(
        redis={"min_replicas": MIN_REPLICAS, "min_replicas_timeout": 0.5},
        conductor=FAST_CONDUCTOR,
    )
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(20, "--build-time", "0.5")
    worker = cluster.start_worker()
    storm = start_storm(cluster, 200)
    wait_until(lambda: storm.states()["ACTIVE"] >= 20, 60, "the storm to be under way")

    in_flight = storm.mark_fault()
    master = group.master.popen
    assert master is not None
    group.cut_replica()
    wait_until(lambda: not link_up(group.replica), 10, "the replica to lose its link")
    # The replica cut off for a while the storm goes on: with min_replicas =
    # 0 the master acknowledges writes the replica never gets.
    time.sleep(2)
    master.kill()
    master.wait(10)
    killed = time.monotonic()
    wait_until(lambda: group.master_port() == group.replica.port, 30, "the sentinels to promote")
    wait_until(lambda: link_role(group.replica) == "master", 30, "the replica to be master")
    failover = round(time.monotonic() - killed, 1)
    # The old master back, as the sentinels make it: the new master's replica
    # (until then, with min_replicas = 1, no write is acknowledged at all).
    # On a loaded machine the sentinels may also find the new master silent
    # for their second (down-after) and fail back to the old one before it
    # was ever a replica: a failover like any other, which must lose nothing
    # acknowledged either, so the test waits for whichever pair they settle on.
    group.master.start()
    try:
        wait_until(lambda: settled(group), 45, "the sentinels to settle on a master and replica")
    except AssertionError as exc:  # say what the sentinels did
        raise AssertionError(f"{exc}; the sentinels logged:\n{group.events()}") from None

    storm.settle(90)
    assert_settled_cleanly(storm)
    # A boot recorded ACTIVE (by the compute, or by the conductor it told),
    # lost with the failover, is re-driven and recorded ACTIVE a second time.
    active = Counter(
        e.get("instance_uuid")
        for e in compute.log_events() + conductor.log_events()
        if e["event"] == "instance_active"
    )
    figures = storm.figures(
        min_replicas=MIN_REPLICAS,
        acknowledged_active_lost=sum(1 for n in active.values() if n > 1),
        seconds_master_killed_to_promoted=failover,
        failed_back_to_old_master=group.master_port() == group.master.port,
        writes_not_acknowledged=worker.count("store_unavailable"),
        redrives_logged=conductor.count("request_redriven"),
    )
    print("\nsentinel failover:", json.dumps(figures))
    assert in_flight > 0
    assert figures["acknowledged_active_lost"] == 0, figures
    assert conductor.popen.poll() is None


def settled(group: SentinelGroup) -> bool:
    """The sentinels name a master that is one, and the other server is its
    replica, counted online (so that WAIT can count it)."""
    try:
        port = group.master_port()
        servers = {group.master.port: group.master, group.replica.port: group.replica}
        master = servers.pop(port, None)
        if master is None:
            return False
        (replica,) = servers.values()
        return (
            link_role(master) == "master"
            and link_role(replica) == "slave"
            and replica_online(master)
        )
    except redis.RedisError:  # a server still starting, or a sentinel busy
        return False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_replicas": -1}, "min_replicas must be 0 or more"),
        ({"min_replicas": 1, "min_replicas_timeout": 5.0}, "below socket_timeout"),
        ({"min_replicas": 1, "min_replicas_timeout": 0}, "above 0"),
    ],
)
def test_bad_min_replicas_settings_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedisStore("redis://127.0.0.1:1/0", "unused", socket_timeout=5.0, **options)  # type: ignore[arg-type]
