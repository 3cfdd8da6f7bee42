"""NUMATopologyFilter (simplified): guest nodes onto distinct host cells."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.filters.numa_topology import NUMATopologyFilter, cells_fit, requested_cells
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept


def cells(*pairs: tuple[int, int]) -> dict[str, list[dict[str, int]]]:
    return {"numa_cells": [{"cpus": c, "memory_mb": m} for c, m in pairs]}


HOSTS = [
    host("two-big", capabilities=cells((8, 16384), (8, 16384))),
    host("two-small", capabilities=cells((4, 8192), (4, 8192))),
    host("one-big", capabilities=cells((16, 32768))),
    host("lopsided", capabilities=cells((8, 4096), (2, 16384))),
    host("flat"),
]


@pytest.mark.parametrize(
    ("vcpus", "ram", "extra_specs", "expected"),
    [
        pytest.param(
            8,
            8192,
            {},
            ["two-big", "two-small", "one-big", "lopsided", "flat"],
            id="no-topology-asked",
        ),
        pytest.param(
            8, 8192, {"hw:numa_nodes": "2"}, ["two-big", "two-small"], id="two-even-nodes"
        ),
        pytest.param(16, 16384, {"hw:numa_nodes": "2"}, ["two-big"], id="two-nodes-need-size"),
        pytest.param(
            8,
            8192,
            {"hw:numa_nodes": "1"},
            ["two-big", "one-big"],
            id="one-node-never-spans-cells",
        ),
        pytest.param(
            4,
            4096,
            {"hw:cpu_policy": "dedicated"},
            ["two-big", "two-small", "one-big", "lopsided"],
            id="dedicated-implies-one",
        ),
        pytest.param(
            8,
            12288,
            {
                "hw:numa_nodes": "2",
                "hw:numa_cpus.0": "0-5",
                "hw:numa_mem.0": "4096",
                "hw:numa_cpus.1": "6,7",
                "hw:numa_mem.1": "8192",
            },
            ["two-big", "lopsided"],
            id="asymmetric-needs-a-matching",
        ),
    ],
)
def test_numa_topology(
    vcpus: int, ram: int, extra_specs: dict[str, str], expected: list[str]
) -> None:
    request = spec(vcpus=vcpus, ram=ram, extra_specs=extra_specs)
    assert kept(NUMATopologyFilter, HOSTS, request) == expected


def test_image_asks_when_the_flavor_does_not() -> None:
    request = spec(vcpus=4, ram=4096, image_properties={"hw_numa_nodes": "2"})
    assert requested_cells(request) == ((2, 2048), (2, 2048))


@pytest.mark.parametrize(
    ("wanted", "host_cells", "fits"),
    [
        pytest.param(((4, 100), (2, 100)), [(4, 100), (2, 100)], True, id="exact"),
        pytest.param(((4, 100), (2, 100)), [(2, 100), (4, 100)], True, id="order-free"),
        pytest.param(((4, 100), (4, 100)), [(4, 100), (2, 100)], False, id="one-cell-each"),
        pytest.param(((4, 50), (1, 200)), [(4, 200), (1, 50)], False, id="hall-fails"),
        pytest.param(
            ((4, 50), (1, 200)),
            [(4, 200), (1, 50), (1, 50)],
            False,
            id="hall-fails-with-spare-small-cells",
        ),
        pytest.param(
            ((4, 50), (1, 200), (1, 10)),
            [(4, 60), (2, 300), (1, 10)],
            True,
            id="three-way-matching",
        ),
    ],
)
def test_cells_fit(
    wanted: tuple[tuple[int, int], ...], host_cells: list[tuple[int, int]], fits: bool
) -> None:
    array = np.array([host_cells])
    assert cells_fit(array[..., 0], array[..., 1], wanted).tolist() == [fits]


@pytest.mark.parametrize(
    ("vcpus", "ram", "extra_specs", "message"),
    [
        pytest.param(
            4, 4096, {"hw:numa_nodes": "two"}, "hw:numa_nodes = 'two'", id="not-a-number"
        ),
        pytest.param(
            2, 4096, {"hw:numa_nodes": "4"}, "at most one per vCPU", id="more-than-vcpus"
        ),
        pytest.param(3, 4096, {"hw:numa_nodes": "2"}, "does not divide", id="uneven"),
        pytest.param(
            4,
            4096,
            {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0,1", "hw:numa_mem.0": "2048"},
            "node 1 lacks one",
            id="incomplete",
        ),
        pytest.param(
            4,
            4096,
            {
                "hw:numa_nodes": "2",
                "hw:numa_cpus.0": "0-2",
                "hw:numa_mem.0": "2048",
                "hw:numa_cpus.1": "2,3",
                "hw:numa_mem.1": "2048",
            },
            "no other node names",
            id="overlapping-cpus",
        ),
        pytest.param(
            4,
            4096,
            {
                "hw:numa_nodes": "2",
                "hw:numa_cpus.0": "0,1",
                "hw:numa_mem.0": "1024",
                "hw:numa_cpus.1": "2,3",
                "hw:numa_mem.1": "1024",
            },
            "exactly the flavor's",
            id="memory-does-not-add-up",
        ),
        pytest.param(
            4,
            4096,
            {"hw:numa_nodes": "1", "hw:numa_cpus.0": "a-b", "hw:numa_mem.0": "4096"},
            "not a CPU list",
            id="bad-cpu-list",
        ),
    ],
)
def test_impossible_topologies_are_refused(
    vcpus: int, ram: int, extra_specs: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        requested_cells(spec(vcpus=vcpus, ram=ram, extra_specs=extra_specs))
    assert message in err.value.message


def test_cpu_list_exclusions() -> None:
    request = spec(
        vcpus=4,
        ram=4096,
        extra_specs={
            "hw:numa_nodes": "2",
            "hw:numa_cpus.0": "0-2,^1",
            "hw:numa_mem.0": "1024",
            "hw:numa_cpus.1": "1,3",
            "hw:numa_mem.1": "3072",
        },
    )
    assert requested_cells(request) == ((2, 1024), (2, 3072))
