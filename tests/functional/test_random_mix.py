"""A random mix of every lifecycle operation on a few hundred instances, with
builds, resize preps and live-migration pre-checks failing at random, and one
host process stopped so its instances are evacuated: after every round the
shared checker's invariants hold (usage is the sum of live allocations,
nothing held by a deleted or shelved instance, every settled ACTIVE instance
holds exactly its flavor on its host, no VM on two hosts, strict groups as
claimed)."""

from __future__ import annotations

import json
from typing import Any

from bench.nodes import wait_until
from scheduler.objects import ACTIVE, ERROR
from tests.functional.conftest import Cluster
from tests.functional.mix import MIX_CONDUCTOR, WEIGHTS, LifecycleMix, in_flight

#: Seconds without a heartbeat before a host is down (small, for speed).
DOWN_TIME = 4


def test_a_random_mix_keeps_every_invariant(cluster: Cluster, transport: Any) -> None:
    cluster.write_config(
        scheduler={"service_down_time": DOWN_TIME},
        compute={"heartbeat_interval": 1},
        conductor=MIX_CONDUCTOR,
    )
    procs = [
        cluster.start("conductor", "conductor_stub.cmd", "serve"),
        cluster.start(
            "main",
            "compute_sim.cmd",
            *("--hosts", "6", "--name-prefix", "main", "--fail-rate", "0.05"),
            *("--fail-resize-hosts", "main-0005", "--seed", "3"),
            *("--live-migration-fail-rate", "0.1"),
            # Room for what the edge hosts hold when they go down: the mix
            # fills the cloud to about half.
            *("--memory-mb", "131072", "--disk-gb", "2000", "--vcpus", "64"),
        ),
        cluster.start(
            "edge", "compute_sim.cmd", "--hosts", "2", "--name-prefix", "edge", "--seed", "4"
        ),
        cluster.start("worker", "scheduler.cmd.worker"),
    ]
    for proc, ready in zip(
        procs,
        ("conductor_started", "compute_sim_started", "compute_sim_started", "scheduler_started"),
        strict=True,
    ):
        proc.wait_for(ready, timeout=60)
    edge = procs[2]
    mix = LifecycleMix(cluster, transport, seed=11, service_down_time=DOWN_TIME)

    mix.boot(160)
    mix.boot(20, grouped=True)
    mix.settle()
    cluster.check_accounting()
    for _ in range(8):
        mix.round(30)
        cluster.check_accounting()
    mix.finish_all()
    cluster.check_accounting()

    # The edge process stops: its instances are evacuated, then it comes back
    # and destroys the VMs it still had of them.
    edge_hosts = ["edge-0000", "edge-0001"]
    on_edge = [r.uuid for r in cluster.store.scan_instances() if r.host in edge_hosts]
    mix.evacuate_process(edge, edge_hosts)
    after = cluster.store.list_instances(on_edge)
    moved = [r for r in after if r.state == ACTIVE and r.host not in edge_hosts]
    assert moved, [(r.state, r.host, r.fault, r.fault_details) for r in after]
    wait_until(
        lambda: edge.count("evacuated_vm_destroyed") >= len(moved),
        timeout=DOWN_TIME + 20,
        what="the evacuated VMs destroyed on edge",
    )
    cluster.check_accounting()

    for _ in range(2):
        mix.round(30)
        cluster.check_accounting()
    mix.finish_all()
    cluster.check_accounting()

    records = list(cluster.store.scan_instances())
    assert not [r for r in records if in_flight(r)]
    assert all(r.fault for r in records if r.state == ERROR), "every ERROR says why"
    print("\nrandom mix:", json.dumps({"done": mix.done, "refused": mix.refused}))
    assert set(WEIGHTS) <= set(mix.done), (dict(mix.done), dict(mix.refused))
    assert sum(mix.done.values()) >= 400, dict(mix.done)
