"""AggregateNumInstancesFilter and AggregateIoOpsFilter: per-host limits that
aggregate metadata overrides, the lowest winning."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.filters.aggregate_io_ops import AggregateIoOpsFilter
from scheduler.filters.aggregate_num_instances import AggregateNumInstancesFilter
from scheduler.store.base import Aggregate
from tests.unit.factories import Host, aggregate, host, spec, uuid_of
from tests.unit.filters.helpers import kept


def limited(name: str, value: str, key: str = "max_instances_per_host") -> Aggregate:
    return aggregate(name, **{key: value})


AGGREGATES = [
    limited("two", "2"),
    limited("four", " 4 "),
    limited("junk", "lots"),
    limited("float", "3.5"),
    aggregate("plain", ssd="true"),
]


def on(name: str, *aggregates: str, consumers: int) -> Host:
    return host(name, aggregates=[uuid_of(a) for a in aggregates], consumers=consumers)


@pytest.mark.parametrize(
    ("aggregates", "consumers", "kept_at"),
    [
        pytest.param((), 4, False, id="no-aggregate-option-applies"),
        pytest.param((), 3, True, id="no-aggregate-below-option"),
        pytest.param(("plain",), 4, False, id="aggregate-without-key-option-applies"),
        pytest.param(("two",), 1, True, id="aggregate-limit-below"),
        pytest.param(("two",), 2, False, id="aggregate-limit-at"),
        pytest.param(("four",), 3, True, id="aggregate-limit-above-option-spaces"),
        pytest.param(("four",), 4, False, id="aggregate-limit-above-option-at"),
        pytest.param(("two", "four"), 2, False, id="lowest-wins"),
        pytest.param(("four", "plain"), 3, True, id="key-in-one-aggregate-of-two"),
        pytest.param(("junk",), 3, True, id="not-a-number-falls-back"),
        pytest.param(("junk",), 4, False, id="not-a-number-falls-back-at"),
        pytest.param(("float",), 3, True, id="not-an-integer-falls-back"),
        pytest.param(("two", "junk"), 3, True, id="one-bad-value-falls-back-whole"),
    ],
)
def test_aggregate_num_instances(
    aggregates: tuple[str, ...], consumers: int, kept_at: bool
) -> None:
    hosts = [on("h", *aggregates, consumers=consumers)]
    got = kept(AggregateNumInstancesFilter, hosts, spec(), AGGREGATES, max_instances_per_host=4)
    assert got == (["h"] if kept_at else [])


def test_aggregate_num_instances_zero_in_metadata_rejects() -> None:
    hosts = [on("h", "zero", consumers=0), on("other", consumers=0)]
    got = kept(AggregateNumInstancesFilter, hosts, spec(), [limited("zero", "0")])
    assert got == ["other"]


IO_AGGREGATES = [
    limited("one", "1", "max_io_ops_per_host"),
    limited("five", "5", "max_io_ops_per_host"),
    limited("bad", "x", "max_io_ops_per_host"),
]
BUILDS = [
    host("one", aggregates=[uuid_of("one")], stats={"num_io_ops": 1}),
    host("five", aggregates=[uuid_of("five")], stats={"num_io_ops": 4}),
    host("one+five", aggregates=[uuid_of("one"), uuid_of("five")], stats={"num_io_ops": 2}),
    host("bad", aggregates=[uuid_of("bad")], stats={"num_io_ops": 2}),
    host("none", stats={"num_io_ops": 2}),
    host("silent", aggregates=[uuid_of("one")]),
]


def test_aggregate_io_ops() -> None:
    got = kept(AggregateIoOpsFilter, BUILDS, spec(), IO_AGGREGATES, max_io_ops_per_host=3)
    # one: 1 >= 1; five: 4 < 5; one+five: lowest is 1; bad and none: the option, 3;
    # silent: reports no count, so 0.
    assert got == ["five", "bad", "none", "silent"]


@settings(deadline=None, max_examples=100)
@given(
    option=st.integers(min_value=0, max_value=20),
    limits=st.lists(st.integers(min_value=0, max_value=20), max_size=4),
    hosts=st.lists(
        st.tuples(st.sets(st.integers(min_value=0, max_value=3)), st.integers(0, 25)),
        min_size=1,
        max_size=6,
    ),
)
def test_the_lowest_aggregate_limit_wins(
    option: int, limits: list[int], hosts: list[tuple[set[int], int]]
) -> None:
    aggregates = [limited(f"a{i}", str(n)) for i, n in enumerate(limits)]
    members = [sorted(i for i in subset if i < len(limits)) for subset, _ in hosts]
    made = [
        host(f"h{n}", aggregates=[aggregates[i].uuid for i in mine], consumers=consumers)
        for n, (mine, (_, consumers)) in enumerate(zip(members, hosts, strict=True))
    ]
    expected = [
        f"h{n}"
        for n, (mine, (_, consumers)) in enumerate(zip(members, hosts, strict=True))
        if consumers < min((limits[i] for i in mine), default=option)
    ]
    got = kept(
        AggregateNumInstancesFilter, made, spec(), aggregates, max_instances_per_host=option
    )
    assert got == expected
