"""Evacuate end to end over RabbitMQ and Redis: the source host is a compute
simulator of its own, stopped with SIGSTOP (its heartbeats stop, it counts as
down), its instances rebuilt elsewhere, then SIGCONT: it destroys the VMs
evacuated from it instead of running them twice."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from bench.nodes import wait_until
from conductor_stub.tasks.evacuate import compute_is_up
from scheduler.engine.settings import EngineSettings
from tests.fixtures.resize import amounts, holdings
from tests.functional.conftest import Cluster, Process

#: Seconds without a heartbeat before a host is down, kept small for speed.
DOWN_TIME = 3


def deploy(cluster: Cluster, dst_hosts: int) -> tuple[Process, Process]:
    """A conductor, a worker, the source (one roomy host: boots go there first,
    the RAM weigher prefers it) and ``dst_hosts`` hosts in another simulator."""
    cluster.write_config(
        scheduler={"service_down_time": DOWN_TIME}, compute={"heartbeat_interval": 1}
    )
    # Started side by side (each takes seconds to import), then waited for.
    conductor = cluster.start("conductor", "conductor_stub.cmd", "serve")
    src, dst = (
        cluster.start(name, "compute_sim.cmd", "--hosts", str(n), "--name-prefix", name, *args)
        for name, n, args in (("src", 1, ("--memory-mb", "131072")), ("dst", dst_hosts, ()))
    )
    worker = cluster.start("worker", "scheduler.cmd.worker")
    for proc, ready in (
        (conductor, "conductor_started"),
        (src, "compute_sim_started"),
        (dst, "compute_sim_started"),
        (worker, "scheduler_started"),
    ):
        proc.wait_for(ready, timeout=60)
    return src, dst


def stop_host(cluster: Cluster, src: Process) -> None:
    """SIGSTOP the source's simulator and wait until its host counts as down."""
    src.pause()
    wait_until(
        lambda: not compute_is_up(cluster.store, "src-0000", DOWN_TIME, time.time()),
        timeout=DOWN_TIME + 10,
        what="src-0000 down",
    )


def evacuate(cluster: Cluster, *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cluster.conductor_stub(
        "evacuate", *args, "--wait", "--json", "--timeout", "60", timeout=120
    )
    return code, (json.loads(out) if out.strip() else {}), err


def test_evacuate_one_instance_then_the_host_comes_back(
    cluster: Cluster, notifications: Any
) -> None:
    src, dst = deploy(cluster, 2)
    uuid = cluster.boot("--count", "1", "--flavor", "m1.small")["instances"][0]["uuid"]
    assert holdings(cluster) == {uuid: {"src-0000": amounts("m1.small")}}

    # Refused while the compute is up, nothing changed.
    code, _, err = cluster.conductor_stub("evacuate", uuid)
    assert code == 2 and "compute src-0000 is up: evacuate only instances of a down host" in err
    assert err.strip().count("\n") == 0, err
    assert cluster.store.get_instance(uuid).state == "ACTIVE"

    stop_host(cluster, src)
    # An unknown uuid (the known one beside it is not moved either), a host
    # without --admin: one line each, exit 2, nothing changed.
    unknown = "0" * 8 + "-0000-4000-8000-" + "0" * 12
    for args, words in [
        ((uuid, unknown), f"instance {unknown} not found"),
        ((uuid, "--host", "dst-0000"), "requires an admin context"),
    ]:
        code, _, err = cluster.conductor_stub("evacuate", *args)
        assert code == 2 and words in err and err.strip().count("\n") == 0, (args, err)
    assert holdings(cluster) == {uuid: {"src-0000": amounts("m1.small")}}

    code, out, err = evacuate(cluster, uuid)

    assert code == 0, err
    [shown] = out["instances"]
    assert shown["state"] == "ACTIVE" and shown["host"].startswith("dst-"), shown
    record = cluster.store.get_instance(uuid)
    assert (record.migration_uuid, record.source_host, record.deadline) == (None, None, None)
    assert holdings(cluster) == {uuid: {shown["host"]: amounts("m1.small")}}
    assert dst.count("rebuild_succeeded") == 1
    wait_until(
        lambda: (
            Counter(n["event_type"] for n in notifications())["scheduler.select_destinations.end"]
            >= 1
        ),
        what="select_destinations.end",
    )
    events = Counter(n["event_type"] for n in notifications())
    assert events["scheduler.select_destinations.start"] == 1
    # While the source is down its VM runs nowhere (the checker says so too).
    assert cluster.running_vms() == {uuid: {shown["host"]}}
    cluster.check_accounting()

    src.resume()
    src.wait_for("evacuated_vm_destroyed", timeout=DOWN_TIME + 15)
    assert cluster.running_vms() == {uuid: {shown["host"]}}
    wait_until(
        lambda: compute_is_up(cluster.store, "src-0000", DOWN_TIME, time.time()),
        what="src-0000 up",
    )


def test_strict_anti_affinity_holds_then_from_host_moves_them_all(
    cluster: Cluster, notifications: Any
) -> None:
    src, _ = deploy(cluster, 2)
    members = cluster.boot(
        "--count", "3", "--flavor", "m1.small", "--group-policy", "anti-affinity"
    )["instances"]
    [member] = [m["uuid"] for m in members if m["host"] == "src-0000"]
    plain = cluster.boot("--count", "1", "--flavor", "m1.small")["instances"][0]
    assert plain["host"] == "src-0000", plain
    group = cluster.store.get_instance(member).request_spec["group"]["uuid"]
    stop_host(cluster, src)

    code, out, _ = evacuate(cluster, member)

    # Every live host holds a member: no host for it. It stays where it was,
    # with the fault and its allocation, and can be evacuated again.
    [shown] = out["instances"]
    assert (code, shown["state"], shown["host"]) == (1, "ACTIVE", "src-0000"), shown
    assert shown["fault"] == "No valid host was found.", shown
    assert holdings(cluster)[member] == {"src-0000": amounts("m1.small")}
    assert cluster.store.get_instance(member).migration_uuid is None
    wait_until(
        lambda: any(
            n["event_type"] == "scheduler.select_destinations" and n["priority"] == "ERROR"
            for n in notifications()
        ),
        what="select_destinations ERROR",
    )

    # A host with no member joins: --from-host moves both instances of src.
    cluster.start_compute(1, name="more")
    # A worker reads heartbeats at most every services_refresh_interval
    # seconds, and a host it has read none of counts as down: a request within
    # that time of the last read would find more-0000 down. Past it, the next
    # request reads them again.
    time.sleep(EngineSettings.services_refresh_interval)
    code, out, err = evacuate(cluster, "--from-host", "src-0000")

    assert code == 0, err
    moved = {r["uuid"]: r for r in out["instances"]}
    assert set(moved) == {member, plain["uuid"]}
    assert all(r["state"] == "ACTIVE" and r["host"] != "src-0000" for r in moved.values())
    assert moved[member]["host"] == "more-0000"  # the one host no other member is on
    hosts = cluster.store.group_hosts(group)
    assert sorted(hosts) == ["dst-0000", "dst-0001", "more-0000"] and set(hosts.values()) == {1}
    assert cluster.running_vms()[member] == {"more-0000"}
