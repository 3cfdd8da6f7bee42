"""The capability table: reports parsed into columns, fed by the host view."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from scheduler.engine.capabilities import CapabilityReport, NumaCell, PciPool
from scheduler.engine.hostview import HostView
from scheduler.objects import AllocationRequest
from scheduler.store.base import Inventory, Provider
from tests.unit.factories import NOW, HookedStore, host, settings, uuid_of, write_provider


def loaded(store: HookedStore) -> HostView:
    view = HostView(store, settings())  # type: ignore[arg-type]
    view.refresh(NOW)
    return view


def everyone(view: HostView) -> np.ndarray:
    return np.arange(view.size)


@pytest.mark.parametrize(
    ("raw", "report"),
    [
        pytest.param({}, CapabilityReport(), id="empty"),
        pytest.param(
            {"cpu_arch": "AMD64", "hypervisor_type": "QEMU", "hypervisor_version": "6002000"},
            # As reported (the capabilities filter compares them so, as Nova does);
            # the version is read as a number.
            CapabilityReport(cpu_arch="AMD64", hypervisor_type="QEMU", hypervisor_version=6002000),
            id="as-reported-and-numeric",
        ),
        pytest.param(
            {"supported_instances": [["amd64", "KVM", "hv"]]},
            CapabilityReport(supported_instances=(("x86_64", "kvm", "hvm"),)),
            id="triples-canonical",
        ),
        pytest.param(
            {
                "numa_cells": [{"cpus": 4, "memory_mb": 8192}],
                "pci_devices": [{"vendor_id": "8086", "product_id": "154D", "count": 2}],
            },
            CapabilityReport(
                numa_cells=(NumaCell(4, 8192),), pci_devices=(PciPool("8086", "154d", 2),)
            ),
            id="numa-and-pci",
        ),
        pytest.param(
            {"ssd": True, "cpu_info": {"vendor": "Intel"}},
            CapabilityReport(extra={"ssd": True, "cpu_info": {"vendor": "Intel"}}),
            id="anything-else-is-extra",
        ),
    ],
)
def test_report_parsing(raw: dict[str, Any], report: CapabilityReport) -> None:
    assert CapabilityReport.from_primitive(raw) == report
    assert CapabilityReport.from_primitive(report.to_primitive()) == report


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"hypervisor_version": "six"}, id="version-not-a-number"),
        pytest.param({"numa_cells": [{"cpus": 4}]}, id="cell-without-memory"),
        pytest.param(
            {"pci_devices": [{"vendor_id": "8086", "product_id": "1", "count": -1}]},
            id="negative-count",
        ),
        pytest.param({"supported_instances": [["x86_64"]]}, id="short-triple"),
    ],
)
def test_unreadable_reports_raise(raw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CapabilityReport.from_primitive(raw)


def test_attributes_are_flattened_leaves() -> None:
    report = CapabilityReport.from_primitive(
        {
            "cpu_arch": "x86_64",
            "cpu_info": {"vendor": "Intel", "topology": {"cores": 8}, "features": ["avx", "sse"]},
        }
    )
    assert report.attributes() == {
        "cpu_arch": "x86_64",
        "cpu_info:vendor": "Intel",
        "cpu_info:topology:cores": 8,
        "cpu_info:features": ("avx", "sse"),
    }


def test_an_unreadable_report_counts_as_none_and_the_host_stays() -> None:
    view = loaded(
        HookedStore(
            [
                host("bad", capabilities={"numa_cells": "many"}),
                host("good", capabilities={"hypervisor_version": 7}),
            ]
        )
    )
    assert view.capabilities.hypervisor_version(everyone(view)).tolist() == [0, 7]


def test_fed_reports_replace_what_a_row_held() -> None:
    store = HookedStore(
        [
            host("h1", capabilities={"ssd": "yes", "hypervisor_version": 5}, stats={"gpus": 1}),
            host("h2"),
        ]
    )
    view = loaded(store)
    caps, idx = view.capabilities, everyone(view)
    assert caps.reports_attribute("ssd", idx).tolist() == [True, False]
    assert caps.reports_stat("gpus", idx).tolist() == [True, False]
    service = store.services["h1"]
    store.put_service(replace(service, capabilities={"hypervisor_version": 6}, stats={}))
    store.put_service(replace(store.services["h2"], capabilities={"ssd": "no"}, stats={"gpus": 0}))
    view.refresh(NOW)
    assert caps.reports_attribute("ssd", idx).tolist() == [False, True]
    assert caps.attribute_mask("ssd", lambda v: v == "no", idx).tolist() == [False, True]
    assert caps.reports_stat("gpus", idx).tolist() == [False, True]
    assert caps.hypervisor_version(idx).tolist() == [6, 0]


def test_a_host_added_later_gets_its_report_and_the_table_grows() -> None:
    store = HookedStore([host(f"h{i}") for i in range(70)])
    view = loaded(store)
    store.put_provider(
        host("late", capabilities={"hypervisor_version": 9}, stats={"num_io_ops": 2})
    )
    view.refresh(NOW)
    idx = everyone(view)
    assert view.size == 71
    assert view.capabilities.hypervisor_version(idx)[-1] == 9
    assert view.capabilities.io_ops(idx)[-1] == 2


def test_local_placements_count_as_io_ops_until_the_next_report() -> None:
    store = HookedStore([host("reports", stats={"num_io_ops": 1}), host("silent")])
    view = loaded(store)
    idx = everyone(view)
    for i in (0, 1):
        view.consume(i, {"VCPU": 1})
    assert view.capabilities.io_ops(idx).tolist() == [2, 0]
    view.unconsume(0, {"VCPU": 1})
    assert view.capabilities.io_ops(idx).tolist() == [1, 0]
    view.consume(0, {"VCPU": 1})
    store.put_service(replace(store.services["reports"], stats={"num_io_ops": 0}))
    view.refresh(NOW)
    assert view.capabilities.io_ops(idx).tolist() == [0, 0]


def test_a_reload_rebuilds_the_table() -> None:
    store = HookedStore([host("h1", capabilities={"hypervisor_version": 3})])
    view = loaded(store)
    store.put_service(replace(store.services["h1"], capabilities={"hypervisor_version": 4}))
    store.truncate()
    view.refresh(NOW)
    assert view.capabilities.hypervisor_version(everyone(view)).tolist() == [4]


def test_numa_cells_are_padded_to_the_widest_host() -> None:
    view = loaded(
        HookedStore(
            [
                host("one", capabilities={"numa_cells": [{"cpus": 4, "memory_mb": 100}]}),
                host(
                    "two",
                    capabilities={
                        "numa_cells": [{"cpus": 2, "memory_mb": 50}, {"cpus": 2, "memory_mb": 60}]
                    },
                ),
                host("none"),
            ]
        )
    )
    cpus, memory = view.capabilities.numa_cells(everyone(view))
    assert cpus.tolist() == [[4, 0], [2, 2], [0, 0]]
    assert memory.tolist() == [[100, 0], [50, 60], [0, 0]]


def test_instance_rows_follow_allocations_to_the_root_host() -> None:
    store = HookedStore([host("h1"), host("h2")])
    child = Provider(
        uuid=uuid_of("h2-gpu"),
        name="h2-gpu",
        parent_uuid=uuid_of("h2"),
        root_uuid=uuid_of("h2"),
        inventories={"VGPU": Inventory(total=1)},
    )
    write_provider(store, child)
    store.claim(uuid_of("vm1"), AllocationRequest({uuid_of("h1"): {"VCPU": 1}}, "p", "u"))
    view = loaded(store)
    store.claim(uuid_of("vm2"), AllocationRequest({child.uuid: {"VGPU": 1}}, "p", "u"))
    rows = view.capabilities.instance_rows(
        [uuid_of("vm1"), uuid_of("vm2"), uuid_of("ghost")], view.index_of_uuid
    )
    assert sorted(view.names[r] for r in rows) == ["h1", "h2"]


def test_a_snapshot_load_and_fed_changes_give_the_same_columns() -> None:
    reports = [
        (
            {
                "hypervisor_version": 5,
                "ssd": "yes",
                "numa_cells": [{"cpus": 2, "memory_mb": 9}],
                "pci_devices": [{"vendor_id": "8086", "product_id": "1", "count": 3}],
            },
            {"num_io_ops": 2, "gpus": 1},
        ),
        ({"hypervisor_version": 6, "cpu_info": {"vendor": "AMD"}}, {}),
        ({}, {"gpus": 0}),
    ]
    hosts = [
        host(f"h{i}", capabilities=caps, stats=stats)
        for i, (caps, stats) in enumerate(reports * 3)
    ]
    snapshot = loaded(HookedStore(hosts))
    store = HookedStore()
    fed = loaded(store)
    for h in hosts:
        store.put_provider(h)
    fed.refresh(NOW)
    idx = everyone(snapshot)
    assert fed.names == snapshot.names
    for view in (snapshot, fed):
        view.consume(0, {"VCPU": 1})
    for question in (
        lambda v: v.capabilities.hypervisor_version(idx),
        lambda v: v.capabilities.io_ops(idx),
        lambda v: v.capabilities.reports_attribute("ssd", idx),
        lambda v: v.capabilities.attribute_mask("cpu_info:vendor", lambda x: x == "AMD", idx),
        lambda v: v.capabilities.stat("gpus", idx),
        lambda v: v.capabilities.reports_stat("gpus", idx),
        lambda v: v.capabilities.pci_free("8086", "1", idx),
        lambda v: v.capabilities.numa_cells(idx)[0],
    ):
        assert question(snapshot).tolist() == question(fed).tolist()
    assert snapshot.capabilities.io_ops(idx)[:3].tolist() == [3, 0, 0]


def test_a_host_that_stops_reporting_io_ops_stops_counting_them() -> None:
    store = HookedStore([host("h1", stats={"num_io_ops": 2}), host("h2", stats={"num_io_ops": 1})])
    view = loaded(store)
    idx = everyone(view)
    store.put_service(replace(store.services["h1"], stats={"gpus": 1}))
    view.refresh(NOW)
    for i in (0, 1):
        view.consume(i, {"VCPU": 1})
    assert view.capabilities.io_ops(idx).tolist() == [0, 2]
    assert view.capabilities.reports_stat("num_io_ops", idx).tolist() == [False, True]
