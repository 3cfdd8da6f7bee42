"""NumInstancesFilter and IoOpsFilter: per-host limits."""

from __future__ import annotations

import pytest

from scheduler.filters.io_ops import IoOpsFilter
from scheduler.filters.num_instances import NumInstancesFilter
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept

INSTANCES = [host("empty"), host("some", consumers=4), host("full", consumers=5)]
BUILDS = [
    host("quiet", stats={"num_io_ops": 0}),
    host("busy", stats={"num_io_ops": 2}),
    host("swamped", stats={"num_io_ops": 3}),
    host("silent"),
]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        pytest.param(5, ["empty", "some"], id="at-limit-rejected"),
        pytest.param(6, ["empty", "some", "full"], id="below-limit-kept"),
        pytest.param(0, [], id="zero-rejects-all"),
    ],
)
def test_num_instances(limit: int, expected: list[str]) -> None:
    assert kept(NumInstancesFilter, INSTANCES, spec(), max_instances_per_host=limit) == expected


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        pytest.param(3, ["quiet", "busy", "silent"], id="at-limit-rejected"),
        pytest.param(1, ["quiet", "silent"], id="unreported-counts-zero"),
        pytest.param(0, [], id="zero-rejects-all"),
    ],
)
def test_io_ops(limit: int, expected: list[str]) -> None:
    assert kept(IoOpsFilter, BUILDS, spec(), max_io_ops_per_host=limit) == expected
