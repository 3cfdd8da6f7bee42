"""The store on a Redis Cluster (``redis+cluster://``): a private 3-master cluster.

* The store's contract suite (tests/unit/store/test_contract.py, its Redis
  half) runs against the cluster, as it runs against one Redis: every key of
  a store is in one hash slot, so every command and script goes to the one
  master holding it, and nothing meets a redirect it cannot follow.
* Two deployments whose key prefixes hash to slots on different masters boot
  instances through real processes (conductor stub, worker, compute
  simulator), each on its own shard; the accounting holds after.
* A master stopped: the store's calls on its slot raise ``StoreUnavailable``
  (retryable) rather than a redirect or a cluster error, until it is back;
  back without its scripts, a pipeline of them fails once, retryably.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.cluster import key_slot

from scheduler.exceptions import StoreUnavailable
from scheduler.objects import InstanceRecord
from scheduler.store import RedisStore
from tests.functional_faults.conftest import FaultCluster, PrivateRedisCluster, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_store_contract_holds_on_a_redis_cluster(
    private_redis_cluster: PrivateRedisCluster,
) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/unit/store/test_contract.py",
            "-k",
            "redis",
        ],
        cwd=ROOT,
        env={**os.environ, "SCHEDULER_TEST_REDIS_URL": private_redis_cluster.url()},
        capture_output=True,
        text=True,
        timeout=100,
    )
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None and int(passed.group(1)) >= 100, summary
    assert "failed" not in summary and "error" not in summary, summary


def _idents_on_two_shards(nodes: PrivateRedisCluster) -> tuple[str, str]:
    """Two deployment idents whose prefixes (``test-<ident>``) sit on different masters."""
    first = uuidlib.uuid4().hex[:10]
    home = nodes.port_of(f"test-{first}")
    while True:
        other = uuidlib.uuid4().hex[:10]
        if nodes.port_of(f"test-{other}") != home:
            return first, other


@pytest.mark.timeout(120)
def test_two_deployments_on_one_cluster_live_on_two_shards_and_both_boot(
    private_redis_cluster: PrivateRedisCluster,
    make_cluster: Callable[..., FaultCluster],
) -> None:
    idents = _idents_on_two_shards(private_redis_cluster)
    cells = [make_cluster(redis_url=private_redis_cluster.url(), ident=i) for i in idents]
    for cell in cells:
        cell.write_config(conductor={"build_timeout": 10, "sweep_interval": 0.5})
        cell.start_conductor()
        cell.start_compute(3, "--vcpus", "4", "--build-time", "0.01")
        cell.start_worker()
    for cell in cells:
        booted = cell.boot("--count", "6", "--flavor", "m1.tiny")
        assert booted["summary"]["states"] == {"ACTIVE": 6}, booted["summary"]
        assert len(cell.store.list_instances()) == 6

    # Each deployment's keys are on the master its slot names, and only there.
    ports = [private_redis_cluster.port_of(cell.prefix) for cell in cells]
    assert ports[0] != ports[1]
    for cell, port in zip(cells, ports, strict=True):
        slot = key_slot(f"{{{cell.prefix}}}".encode())
        for node in private_redis_cluster.nodes:
            with redis.Redis(port=node.port) as client:
                held = int(client.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
            if node.port == port:
                assert held >= 5, f"{cell.prefix}: {held} keys on its master"
            else:
                assert held == 0, f"{cell.prefix}: {held} keys on {node.port}"


@pytest.mark.timeout(90)
def test_a_lost_master_is_store_unavailable_until_it_is_back(
    private_redis_cluster: PrivateRedisCluster,
) -> None:
    # Last in the module: it stops a master (its data is gone when it is back).
    lost_prefix, kept_prefix = (f"test-{i}" for i in _idents_on_two_shards(private_redis_cluster))
    lost_port = private_redis_cluster.port_of(lost_prefix)
    kept_port = private_redis_cluster.port_of(kept_prefix)
    lost = next(n for n in private_redis_cluster.nodes if n.port == lost_port)
    stores = [
        RedisStore(private_redis_cluster.url(), prefix, socket_timeout=1.0)
        for prefix in (lost_prefix, kept_prefix)
    ]
    try:
        for store in stores:
            store.create_provider("p1", "host-1")
        lost.stop()
        # Its own slots: the node is gone (the client's retries end).
        with pytest.raises(StoreUnavailable):
            stores[0].get_provider("p1")
        # Once the others mark it failed, the whole cluster refuses (CLUSTERDOWN),
        # the masters still up too: retryable as well, every time it is asked.
        wait_until(lambda: _state(kept_port) == "fail", 30, "the cluster to see the loss")
        for _ in range(3):
            for store in stores:
                with pytest.raises(StoreUnavailable):
                    store.get_provider("p1")
        assert not stores[1].ping()  # the health check says so, and never raises
        lost.start()
        wait_until(private_redis_cluster.ready, 30, "the cluster to be whole again")
        wait_until(lambda: _answers(stores[1]), 30, "the store to answer again")
        assert stores[1].get_provider("p1").name == "host-1"
        # The master came back empty, its script cache too: a pipeline of
        # scripts there fails once, retryably, and the scripts are loaded again.
        wait_until(lambda: _answers(stores[0]), 30, "the lost master's slots to answer")
        record = InstanceRecord(uuid=str(uuidlib.uuid4()))
        with pytest.raises(StoreUnavailable, match="NoScriptError"):
            stores[0].create_instances([record])
        stores[0].create_instances([record])
        assert stores[0].get_instance(record.uuid).uuid == record.uuid
    finally:
        for store in stores:
            store.wipe()
            store.close()


def _state(port: int) -> str:
    with redis.Redis(port=port, decode_responses=True) as client:
        return str(client.cluster("info").get("cluster_state"))


def _answers(store: RedisStore) -> bool:
    try:
        store.list_providers()
    except StoreUnavailable:
        return False
    return True
