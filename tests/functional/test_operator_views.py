"""The views a Nova operator reaches for, and boot as one would use it,
against a real worker, conductor, RabbitMQ and Redis: ``conductor-stub boot``
with a project, an image, extra specs, an existing server group and a hint;
``scheduler-admin hosts`` filtered and sorted and ``usage`` per provider,
aggregate and project, their numbers checked against the store's own; a
resize to the same flavor refused."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests.fixtures.cli import admin_cli
from tests.functional.conftest import Cluster


def admin_json(cluster: Cluster, *args: str) -> Any:
    done = admin_cli(cluster, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_boot_options_and_the_usage_views_agree_with_the_store(cluster: Cluster) -> None:
    cluster.write_config(
        filter_scheduler={
            "enabled_filters": "ComputeFilter,ComputeCapabilitiesFilter,"
            "ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,"
            "DifferentHostFilter,AggregateInstanceExtraSpecsFilter"
        }
    )
    cluster.start_conductor()
    cluster.start_compute(3, "--aggregate", "ssd:ssd=true", "--traits", "CUSTOM_FAST", name="fast")
    cluster.start_compute(2, name="slow")
    cluster.start_worker()

    # A new anti-affinity group for p1, placed where the extra spec and the
    # trait allow; its uuid printed.
    first = cluster.boot(
        "--count",
        "2",
        "--group-policy",
        "anti-affinity",
        "--project",
        "p1",
        "--user",
        "alice",
        "--extra-spec",
        "aggregate_instance_extra_specs:ssd=true",
        "trait:CUSTOM_FAST=required",
        "--image-property",
        "hw_architecture=x86_64",
    )
    group = first["summary"]["group_uuid"]
    assert group and first["summary"]["group_policy"] == "anti-affinity"
    hosts_of = {i["uuid"]: i["host"] for i in first["instances"]}
    assert all(i["state"] == "ACTIVE" for i in first["instances"]), first
    assert len(set(hosts_of.values())) == 2 and all(
        h.startswith("fast-") for h in hosts_of.values()
    )
    # A third member, by the group's uuid: its policy comes from the members.
    third = cluster.boot("--group", group, "--project", "p1", "--flavor", "m1.small")
    (joined,) = third["instances"]
    assert third["summary"]["group_uuid"] == group
    assert joined["state"] == "ACTIVE" and joined["host"] not in hosts_of.values()
    # p2 boots away from one of p1's instances, by hint.
    avoid = next(iter(hosts_of))
    other = cluster.boot(
        "--project", "p2", "--flavor", "m1.medium", "--hint", f"different_host={avoid}"
    )
    (p2,) = other["instances"]
    assert p2["state"] == "ACTIVE" and p2["host"] != hosts_of[avoid]
    record = cluster.store.get_instance(p2["uuid"])
    assert record.request_spec is not None and record.request_spec["project_id"] == "p2"

    # A bad value is one line, before anything is recorded.
    before = len(list(cluster.store.scan_instances()))
    code, out, err = cluster.conductor_stub("boot", "--extra-spec", "trait:CUSTOM_FAST=maybe")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "trait:CUSTOM_FAST" in err
    assert len(list(cluster.store.scan_instances())) == before

    # hosts: every row matches the store's providers.
    rows = admin_json(cluster, "hosts")
    providers = {p.uuid: p for p in cluster.store.list_providers()}
    assert len(rows) == 5
    for row in rows:
        provider = providers[row["uuid"]]
        assert row["host"] == provider.name and row["consumers"] == provider.consumers
        assert row["usage"] == {
            rc: {"used": provider.usages.get(rc, 0), "capacity": inv.capacity}
            for rc, inv in provider.inventories.items()
        }
        assert ("CUSTOM_FAST" in row["traits"]) == row["host"].startswith("fast-")
        assert row["aggregates"] == (["ssd"] if row["host"].startswith("fast-") else [])
    fullest = admin_json(
        cluster, "hosts", "--filter", "aggregate=ssd", "--sort", "fill:MEMORY_MB", "--reverse"
    )
    fills = [
        r["usage"]["MEMORY_MB"]["used"] / r["usage"]["MEMORY_MB"]["capacity"] for r in fullest
    ]
    assert len(fullest) == 3 and fills == sorted(fills, reverse=True) and fills[0] > 0
    text = admin_cli(cluster, "hosts", "--filter", "trait=CUSTOM_FAST", "--sort", "free:VCPU")
    assert text.returncode == 0 and "3 hosts: 3 up, 0 down, 0 disabled" in text.stdout
    assert "ssd" in text.stdout.splitlines()[1] and "CUSTOM_FAST" in text.stdout.splitlines()[1]
    bad = admin_cli(cluster, "hosts", "--filter", "zone=x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown filter" in bad.stderr

    # usage per provider, per aggregate, per project: the same sums as the store's.
    one = next(p for p in providers.values() if p.consumers)
    shown = admin_json(cluster, "usage", "provider", one.name)
    assert shown["uuid"] == one.uuid and shown["consumers"] == one.consumers
    assert {rc: u["used"] for rc, u in shown["usage"].items()} == {
        rc: one.usages.get(rc, 0) for rc in one.inventories
    }
    by_aggregate = admin_json(cluster, "usage", "aggregate")
    (ssd,) = by_aggregate["aggregates"]
    fast = [r for r in rows if r["host"].startswith("fast-")]
    assert ssd["name"] == "ssd" and ssd["hosts"] == 3
    assert ssd["usage"]["VCPU"]["used"] == sum(r["usage"]["VCPU"]["used"] for r in fast)
    assert by_aggregate["no_aggregate"]["hosts"] == 2
    projects = admin_json(cluster, "usage", "project")
    held: dict[str, Counter[str]] = {}
    for consumer in cluster.store.list_consumers():
        for amounts in consumer.allocations.values():
            held.setdefault(consumer.project_id, Counter()).update(amounts)
    assert {
        p["project_id"]: {rc: u["used"] for rc, u in p["usage"].items()}
        for p in projects["projects"]
    } == {p: dict(c) for p, c in held.items()}
    assert [p["consumers"] for p in projects["projects"]] == [3, 1]
    missing = admin_cli(cluster, "usage", "provider", "nope")
    assert missing.returncode == 2 and "not found" in missing.stderr

    # A resize to the flavor it has is refused, nothing changed.
    code, out, err = cluster.conductor_stub("resize", p2["uuid"], "--flavor", "m1.medium")
    assert code == 2 and "already has flavor m1.medium" in err and err.count("\n") == 1
    assert cluster.store.get_instance(p2["uuid"]).state == "ACTIVE"
