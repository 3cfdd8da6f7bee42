"""The scheduler's resize on the in-memory store: park, claim, cast; hand back
when nothing fits; the same request again changes nothing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.engine.settings import DEFAULT_FILTERS
from scheduler.exceptions import NoValidHost
from scheduler.manager import SchedulerEndpoint
from scheduler.notifier import Notifier
from scheduler.objects import AllocationRequest, Flavor, RequestSpec, migration_uuid_for
from scheduler.rpc import RequestContext
from scheduler.store import GroupClaim, MemoryStore
from tests.unit.factories import GROUP_UUID, Recorded, engine, group, host, populate, spec, uuid_of

SMALL = spec(vcpus=1, ram=1024, disk=10)
BIG = Flavor(name="big", vcpus=2, memory_mb=2048, root_gb=20)
CTXT = RequestContext(request_id="req-resize")
INSTANCE = uuid_of("instance")
MIGRATION = migration_uuid_for(INSTANCE, "req-resize")


def setup(
    hosts: tuple[str, ...],
    same_host: bool = False,
    held: bool = True,
    filters: tuple[str, ...] = DEFAULT_FILTERS,
) -> tuple[MemoryStore, SchedulerEndpoint, Recorded, Recorded]:
    store = MemoryStore()
    populate(store, [host(name, ram=8192) for name in hosts])
    if held:
        store.claim(INSTANCE, AllocationRequest({uuid_of("h1"): SMALL.resources}, "p", "u"))
    compute, conductor = Recorded(), Recorded()
    endpoint = SchedulerEndpoint(
        engine(store, enabled_filters=filters),
        compute,
        conductor,  # type: ignore[arg-type]
        Notifier(None, "test"),
        allow_resize_to_same_host=same_host,
    )
    return store, endpoint, compute, conductor


def hosts_of(store: MemoryStore) -> dict[str, tuple[str, dict[str, int]]]:
    names = {p.uuid: p.name for p in store.list_providers()}
    return {
        c.uuid: next((names[rp], dict(res)) for rp, res in c.allocations.items())
        for c in store.list_consumers()
    }


def resize(endpoint: SchedulerEndpoint, request: RequestSpec = SMALL) -> None:
    endpoint.resize(CTXT, INSTANCE, "h1", BIG.to_primitive(), request.to_primitive())


BIG_AMOUNTS = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}


@dataclass(frozen=True)
class ResizeCase:
    name: str
    hosts: tuple[str, ...]
    same_host: bool
    dest: str | None  # where the instance's new claim is (None: not placed)


CASES = [
    ResizeCase("source-excluded", ("h1", "h2"), False, "h2"),
    ResizeCase("source-excluded-and-no-other-host", ("h1",), False, None),
    ResizeCase("same-host-allowed", ("h1",), True, "h1"),
]


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param(DEFAULT_FILTERS, id="default-filters"),
        # The source is excluded by the request's own ignore_hosts, whatever
        # host filters an operator enables (none at all here).
        pytest.param((), id="no-host-filters"),
    ],
)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_resize(case: ResizeCase, filters: tuple[str, ...]) -> None:
    store, endpoint, compute, conductor = setup(case.hosts, case.same_host, filters=filters)

    resize(endpoint)

    if case.dest is None:
        # Handed back: the instance keeps its source allocation, the conductor is told.
        assert hosts_of(store) == {INSTANCE: ("h1", SMALL.resources)}
        args, _ = conductor.last("resize_result")
        assert args[1:5] == (INSTANCE, MIGRATION, None, False)
        assert args[5] == NoValidHost.USER_MESSAGE and "1 host already tried" in str(args[6])
        assert compute.calls == []
        return
    assert hosts_of(store) == {
        INSTANCE: (case.dest, BIG_AMOUNTS),
        MIGRATION: ("h1", SMALL.resources),
    }
    args, _ = compute.last("prep_resize")
    assert args[1:4] == (INSTANCE, MIGRATION, BIG)
    assert args[5].host == case.dest  # type: ignore[attr-defined]
    assert conductor.calls == []


def test_the_same_request_again_reuses_the_move_and_the_destination() -> None:
    store, endpoint, compute, _ = setup(("h1", "h2", "h3"))
    resize(endpoint)
    first = hosts_of(store)
    resize(endpoint)  # a re-drive: same request id, so the same migration
    assert hosts_of(store) == first
    assert [args[5].host for name, args, _ in compute.calls] == [  # type: ignore[attr-defined]
        first[INSTANCE][0]
    ] * 2


def test_alternates_go_with_the_destination_and_exclude_the_source() -> None:
    store, endpoint, compute, _ = setup(("h1", "h2", "h3", "h4"))
    resize(endpoint)
    args, _ = compute.last("prep_resize")
    hosts = [args[5].host, *(a.host for a in args[6])]  # type: ignore[attr-defined]
    assert sorted(hosts) == ["h2", "h3", "h4"]


def test_an_instance_holding_nothing_cannot_be_resized() -> None:
    store, endpoint, compute, conductor = setup(("h1", "h2"), held=False)
    resize(endpoint)
    args, _ = conductor.last("resize_result")
    assert args[4] is False and str(args[5]).startswith("invalid request")
    assert compute.calls == [] and store.list_consumers() == []


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param(DEFAULT_FILTERS, id="default-filters"),
        # No host filter: the store's claim alone judges the group.
        pytest.param((), id="no-host-filters"),
    ],
)
def test_an_anti_affinity_member_resizes_in_place_beside_its_own_membership(
    filters: tuple[str, ...],
) -> None:
    # The instance on h1 and another member on h2 fill the group's hosts; the
    # migration keeps the instance's membership on h1, which is its own.
    store, endpoint, compute, conductor = setup(
        ("h1", "h2"), same_host=True, held=False, filters=filters
    )
    request = SMALL.replace(group=group("anti-affinity"))
    other = uuid_of("other-member")
    for consumer, name in ((INSTANCE, "h1"), (other, "h2")):
        store.claim(
            consumer,
            AllocationRequest({uuid_of(name): SMALL.resources}, "p", "u"),
            GroupClaim.for_spec(request, name),
        )

    resize(endpoint, request)

    assert conductor.calls == []
    assert hosts_of(store) == {
        INSTANCE: ("h1", BIG_AMOUNTS),
        MIGRATION: ("h1", SMALL.resources),
        other: ("h2", SMALL.resources),
    }
    args, _ = compute.last("prep_resize")
    assert args[5].host == "h1"  # type: ignore[attr-defined]
    assert store.group_hosts(GROUP_UUID) == {"h1": 2, "h2": 1}


def test_an_affinity_member_resizes_where_its_group_is() -> None:
    # The group's one member is the instance: its own membership on h1 ties
    # it there, though h2 has room too.
    store, endpoint, compute, _ = setup(("h1", "h2"), same_host=True, held=False)
    request = SMALL.replace(group=group("affinity"))
    store.claim(
        INSTANCE,
        AllocationRequest({uuid_of("h1"): SMALL.resources}, "p", "u"),
        GroupClaim.for_spec(request, "h1"),
    )

    resize(endpoint, request)

    args, _ = compute.last("prep_resize")
    assert args[5].host == "h1" and args[6] == []  # type: ignore[attr-defined]
    assert store.group_hosts(GROUP_UUID) == {"h1": 2}
