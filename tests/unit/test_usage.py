"""The operator views of :mod:`scheduler.usage` on the in-memory store: hosts
as columns (filtered, sorted, a row made when asked), the sums per aggregate,
per project and of one provider."""

from __future__ import annotations

import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.objects import AllocationRequest
from scheduler.store import Aggregate, MemoryStore
from scheduler.usage import HostTable, project_usage, provider_usage
from tests.unit.factories import NOW, child, host, populate, uuid_of

SSD = Aggregate(uuid_of("ssd"), "ssd-hosts")
GPU = Aggregate(uuid_of("gpu"), "gpu-hosts")


@pytest.fixture
def store() -> MemoryStore:
    """cmp-1 (ssd), cmp-2 (ssd and gpu, a GPU child), cmp-3 (down), cmp-4 (disabled)."""
    made = MemoryStore()
    populate(
        made,
        [
            host("cmp-1", aggregates=[SSD.uuid]),
            host(
                "cmp-2",
                aggregates=[SSD.uuid, GPU.uuid],
                children=[
                    child("cmp-2-gpu", inventory={"CUSTOM_VGPU": 4}, traits=["CUSTOM_A100"])
                ],
            ),
            host("cmp-3", up=False, traits=["CUSTOM_SLOW"]),
            host("cmp-4", disabled=True),
        ],
        [SSD, GPU],
    )
    claims = {
        "i1": ("p1", {uuid_of("cmp-1"): {"VCPU": 8, "MEMORY_MB": 4096}}),
        "i2": ("p2", {uuid_of("cmp-2"): {"VCPU": 2}, uuid_of("cmp-2-gpu"): {"CUSTOM_VGPU": 1}}),
        "i3": ("p1", {uuid_of("cmp-3"): {"MEMORY_MB": 16384}}),
    }
    for name, (project, allocations) in claims.items():
        made.claim(uuid_of(name), AllocationRequest(allocations, project, "u"))
    return made


def table(store: MemoryStore) -> HostTable:
    return HostTable.from_snapshot(store.compact_snapshot(), NOW, 60.0)


def names(hosts: HostTable, rows: object) -> list[str]:
    return [hosts.names[i] for i in rows]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "filters, expected",
    [
        pytest.param([], ["cmp-1", "cmp-2", "cmp-3", "cmp-4"], id="none"),
        pytest.param([("state", "down")], ["cmp-3"], id="down"),
        pytest.param([("state", "up"), ("status", "enabled")], ["cmp-1", "cmp-2"], id="both"),
        pytest.param([("status", "disabled")], ["cmp-4"], id="disabled"),
        pytest.param([("aggregate", "ssd-hosts")], ["cmp-1", "cmp-2"], id="aggregate-name"),
        pytest.param([("aggregate", GPU.uuid)], ["cmp-2"], id="aggregate-uuid"),
        pytest.param([("trait", "CUSTOM_A100")], ["cmp-2"], id="trait-of-a-child"),
        pytest.param([("trait", "CUSTOM_SLOW")], ["cmp-3"], id="trait-of-the-host"),
        pytest.param([("host", "cmp-[12]")], ["cmp-1", "cmp-2"], id="host-pattern"),
    ],
)
def test_filters(store: MemoryStore, filters: list[tuple[str, str]], expected: list[str]) -> None:
    hosts = table(store)
    assert names(hosts, hosts.select(filters)) == expected


@pytest.mark.parametrize(
    "filters, message",
    [
        pytest.param([("zone", "x")], "unknown filter 'zone'", id="unknown-key"),
        pytest.param([("state", "sideways")], "must be up or down", id="bad-state"),
        pytest.param([("aggregate", "nope")], "no aggregate named 'nope'", id="no-aggregate"),
    ],
)
def test_bad_filters_are_refused(
    store: MemoryStore, filters: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        table(store).select(filters)


@pytest.mark.parametrize(
    "key, reverse, expected",
    [
        pytest.param("host", True, ["cmp-4", "cmp-3", "cmp-2", "cmp-1"], id="host-reversed"),
        pytest.param("fill:VCPU", True, ["cmp-1", "cmp-2", "cmp-3", "cmp-4"], id="fullest-vcpu"),
        pytest.param(
            "free:MEMORY_MB", False, ["cmp-3", "cmp-1", "cmp-2", "cmp-4"], id="least-ram"
        ),
        pytest.param("used:VCPU", False, ["cmp-3", "cmp-4", "cmp-2", "cmp-1"], id="ties-by-name"),
        # Only cmp-2 has the class: the others sort last, whichever way.
        pytest.param("used:CUSTOM_VGPU", True, ["cmp-2", "cmp-1", "cmp-3", "cmp-4"], id="absent"),
        pytest.param("consumers", True, ["cmp-1", "cmp-2", "cmp-3", "cmp-4"], id="consumers"),
    ],
)
def test_order(store: MemoryStore, key: str, reverse: bool, expected: list[str]) -> None:
    hosts = table(store)
    assert names(hosts, hosts.order(hosts.select([]), key, reverse)) == expected


@pytest.mark.parametrize("key", ["bogus", "fill:", "size:VCPU", "used:CUSTOM_NONE"])
def test_bad_sort_keys_are_refused(store: MemoryStore, key: str) -> None:
    hosts = table(store)
    with pytest.raises(InvalidRequest):
        hosts.order(hosts.select([]), key)


def test_a_row_folds_its_children_in(store: MemoryStore) -> None:
    hosts = table(store)
    row = hosts.row(names(hosts, range(len(hosts))).index("cmp-2"))
    assert row["usage"] == {
        "VCPU": {"used": 2, "capacity": 16},
        "MEMORY_MB": {"used": 0, "capacity": 32768},
        "DISK_GB": {"used": 0, "capacity": 1000},
        "CUSTOM_VGPU": {"used": 1, "capacity": 4},
    }
    assert row["traits"] == ["CUSTOM_A100"] and row["aggregates"] == ["gpu-hosts", "ssd-hosts"]
    assert (row["up"], row["disabled"], row["consumers"]) == (True, False, 1)


def test_by_aggregate_sums_each_aggregate_s_hosts(store: MemoryStore) -> None:
    found = table(store).by_aggregate()
    assert [(a["name"], a["hosts"]) for a in found["aggregates"]] == [
        ("gpu-hosts", 1),
        ("ssd-hosts", 2),
    ]
    ssd = found["aggregates"][1]["usage"]
    assert ssd["VCPU"] == {"used": 10, "capacity": 32}
    assert ssd["CUSTOM_VGPU"] == {"used": 1, "capacity": 4}
    assert found["no_aggregate"]["hosts"] == 2
    assert found["no_aggregate"]["usage"]["MEMORY_MB"] == {"used": 16384, "capacity": 65536}


def test_project_usage_sums_what_each_project_holds(store: MemoryStore) -> None:
    assert project_usage(store.scan_consumers()) == {
        "projects": [
            {
                "project_id": "p1",
                "consumers": 2,
                "usage": {"VCPU": {"used": 8}, "MEMORY_MB": {"used": 20480}},
            },
            {
                "project_id": "p2",
                "consumers": 1,
                "usage": {"VCPU": {"used": 2}, "CUSTOM_VGPU": {"used": 1}},
            },
        ]
    }
    assert [p["project_id"] for p in project_usage(store.scan_consumers(), "p2")["projects"]] == [
        "p2"
    ]


def test_provider_usage_is_its_inventory_and_usage(store: MemoryStore) -> None:
    view = provider_usage(store.get_provider_by_name("cmp-2-gpu"))
    assert (view["name"], view["root_uuid"], view["consumers"]) == (
        "cmp-2-gpu",
        uuid_of("cmp-2"),
        1,
    )
    assert view["usage"]["CUSTOM_VGPU"] == {
        "used": 1,
        "capacity": 4,
        "total": 4,
        "reserved": 0,
        "allocation_ratio": 1.0,
        "min_unit": 1,
        "max_unit": 4,
        "step_size": 1,
    }
