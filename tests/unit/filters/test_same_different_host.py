"""SameHostFilter and DifferentHostFilter: the same_host / different_host hints."""

from __future__ import annotations

import pytest

from scheduler.filters.base import BaseFilter
from scheduler.filters.different_host import DifferentHostFilter
from scheduler.filters.same_host import SameHostFilter
from scheduler.objects import AllocationRequest
from tests.unit.factories import HookedStore, host, spec, uuid_of
from tests.unit.filters.helpers import kept

HOSTS = ["h1", "h2", "h3"]


def store_with(instances: dict[str, str]) -> HookedStore:
    """Hosts h1..h3 and each named instance claimed on its host."""
    store = HookedStore([host(h) for h in HOSTS])
    for instance, on in instances.items():
        store.claim(uuid_of(instance), AllocationRequest({uuid_of(on): {"VCPU": 1}}, "p", "u"))
    return store


PLACED = {"web1": "h1", "web2": "h3", "db1": "h3"}


@pytest.mark.parametrize(
    ("filter_cls", "hint", "instances", "expected"),
    [
        pytest.param(SameHostFilter, "same_host", ["web1"], ["h1"], id="same-one"),
        pytest.param(
            SameHostFilter, "same_host", ["web1", "web2"], ["h1", "h3"], id="same-any-listed"
        ),
        pytest.param(SameHostFilter, "same_host", ["ghost"], [], id="same-unknown-instance"),
        pytest.param(SameHostFilter, "same_host", [], HOSTS, id="same-empty-hint"),
        pytest.param(
            DifferentHostFilter, "different_host", ["web1"], ["h2", "h3"], id="different-one"
        ),
        pytest.param(
            DifferentHostFilter,
            "different_host",
            ["web1", "db1"],
            ["h2"],
            id="different-all-listed",
        ),
        pytest.param(
            DifferentHostFilter,
            "different_host",
            ["ghost"],
            HOSTS,
            id="different-unknown-instance",
        ),
        pytest.param(
            SameHostFilter, "different_host", ["web1"], HOSTS, id="same-ignores-other-hint"
        ),
    ],
)
def test_hints(
    filter_cls: type[BaseFilter], hint: str, instances: list[str], expected: list[str]
) -> None:
    request = spec(scheduler_hints={hint: tuple(uuid_of(i) for i in instances)})
    assert kept(filter_cls, [], request, store=store_with(PLACED)) == expected
