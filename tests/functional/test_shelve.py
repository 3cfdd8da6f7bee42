"""Shelve and unshelve end to end over RabbitMQ and Redis: the host destroys
the VM and the allocation is released (group membership with it); unshelve
schedules the instance again as a boot with its original request spec (zone,
server group), on the same host or another; bad requests change nothing."""

from __future__ import annotations

import json
from typing import Any

from bench.nodes import wait_until
from tests.fixtures.resize import amounts, holdings
from tests.functional.conftest import Cluster


def shelving(cluster: Cluster, command: str, *uuids: str) -> dict[str, dict[str, Any]]:
    """``conductor-stub shelve|unshelve UUID... --wait --json``: uuid -> row."""
    code, stdout, stderr = cluster.conductor_stub(command, *uuids, "--wait", "--json")
    assert code == 0, stderr[-4000:]
    return {row["uuid"]: row for row in json.loads(stdout)["instances"]}


def test_shelve_releases_and_unshelve_rebuilds_on_the_same_host(
    cluster: Cluster, notifications: Any
) -> None:
    cluster.start_conductor()
    cluster.start_compute(1, "--aggregate", "east:availability_zone=east", name="only")
    cluster.start_worker()
    booted = cluster.boot("--count", "1", "--availability-zone", "east")
    (instance,) = booted["instances"]
    uuid = instance["uuid"]
    assert cluster.running_vms() == {uuid: {"only-0000"}}

    shelved = shelving(cluster, "shelve", uuid)[uuid]

    assert (shelved["state"], shelved["host"], shelved["availability_zone"]) == (
        "SHELVED_OFFLOADED",
        None,
        None,
    )
    assert holdings(cluster) == {} and cluster.running_vms() == {}
    cluster.check_accounting()

    # Bad requests are one line each and change nothing.
    unknown = "00000000-0000-4000-8000-000000000000"
    before = cluster.store.get_instance(uuid)
    for args, message in [
        (("shelve", uuid), "is SHELVED_OFFLOADED, not ACTIVE"),
        (("shelve", unknown), f"no such instance: {unknown}"),
        (("unshelve", uuid, unknown), f"no such instance: {unknown}"),
    ]:
        code, stdout, stderr = cluster.conductor_stub(*args)
        assert (code, stdout) == (2, ""), (args, stderr)
        assert message in stderr and len(stderr.strip().splitlines()) == 1, (args, stderr)
    assert cluster.store.get_instance(uuid) == before

    unshelved = shelving(cluster, "unshelve", uuid)[uuid]

    # Built again on the host it was built on before (a new request, a new
    # build there), in the zone its spec asks for.
    assert (unshelved["state"], unshelved["host"], unshelved["availability_zone"]) == (
        "ACTIVE",
        "only-0000",
        "east",
    )
    assert holdings(cluster) == {uuid: {"only-0000": amounts("m1.small")}}
    assert cluster.running_vms() == {uuid: {"only-0000"}}
    # The unshelve asked the scheduler as every move does.
    wait_until(
        lambda: any(
            n["event_type"] == "scheduler.select_destinations.end"
            and n["payload"]["instance_uuids"] == [uuid]
            for n in notifications()
        ),
        what="the unshelve's select_destinations.end",
    )
    code, _, stderr = cluster.conductor_stub("unshelve", uuid)
    assert code == 2 and "is ACTIVE, not SHELVED_OFFLOADED" in stderr, stderr

    # Shelved again, then deleted: nothing to wait on.
    shelving(cluster, "shelve", uuid)
    code, _, stderr = cluster.conductor_stub("delete", uuid, "--wait")
    assert code == 0, stderr
    assert cluster.store.get_instance(uuid).state == "DELETED"


def test_unshelve_keeps_the_server_group(cluster: Cluster) -> None:
    cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", "262144", name="big")
    cluster.start_compute(1, name="small")
    cluster.start_worker()
    booted = cluster.boot("--count", "2", "--group-policy", "anti-affinity")
    on = {i["host"]: i["uuid"] for i in booted["instances"]}
    assert sorted(on) == ["big-0000", "small-0000"], booted
    group = (cluster.store.get_instance(on["small-0000"]).request_spec or {})["group"]["uuid"]

    shelving(cluster, "shelve", on["small-0000"])

    # Its membership went with its allocation.
    assert cluster.store.group_hosts(group) == {"big-0000": 1}

    unshelved = shelving(cluster, "unshelve", on["small-0000"])[on["small-0000"]]

    # big weighs best, but holds the other member: the group sends it back to small.
    assert (unshelved["state"], unshelved["host"]) == ("ACTIVE", "small-0000")
    assert cluster.store.group_hosts(group) == {"big-0000": 1, "small-0000": 1}
