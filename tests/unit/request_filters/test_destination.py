"""DestinationRequestFilter: forced hosts and nodes and a requested destination
narrow the request to the hosts they name; forced requests still claim."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.exceptions import NoValidHost
from scheduler.objects import Destination, RequestSpec
from scheduler.request_filters import DestinationRequestFilter
from scheduler.resource_request import HostConstraint
from tests.unit.factories import HookedStore, engine, group, host, spec, uuid_of
from tests.unit.request_filters.helpers import added


@pytest.mark.parametrize(
    ("request_", "constraint"),
    [
        pytest.param(spec(), None, id="nothing-forced"),
        pytest.param(
            spec(force_hosts=("h1", "H2")),
            HostConstraint(
                reasons.NOT_FORCED_HOST, hosts=frozenset({"h1", "H2"}), ignore_case=True
            ),
            id="forced-hosts-ignore-case",
        ),
        pytest.param(
            spec(force_nodes=("n1",)),
            HostConstraint(reasons.NOT_FORCED_NODE, hosts=frozenset({"n1"})),
            id="forced-nodes-exact",
        ),
        pytest.param(
            spec(requested_destination=Destination("h1")),
            HostConstraint(reasons.NOT_REQUESTED_DESTINATION, hosts=frozenset({"h1"})),
            id="destination-host",
        ),
        pytest.param(
            spec(requested_destination=Destination("h1", "h1")),
            HostConstraint(reasons.NOT_REQUESTED_DESTINATION, hosts=frozenset({"h1"})),
            id="destination-host-and-its-node",
        ),
        pytest.param(
            spec(requested_destination=Destination("h1", "other")),
            HostConstraint(reasons.NOT_REQUESTED_DESTINATION, hosts=frozenset()),
            id="destination-node-of-another-host-matches-nothing",
        ),
    ],
)
def test_destination_constraint(request_: RequestSpec, constraint: HostConstraint | None) -> None:
    assert added(DestinationRequestFilter, request_) == constraint


HOSTS = [host("h1"), host("h2"), host("h3", ram=2048)]


@pytest.mark.parametrize(
    ("request_", "chosen", "reasons_"),
    [
        pytest.param(
            spec(force_hosts=("H2",)),
            "h2",
            {reasons.NOT_FORCED_HOST: 2},
            id="forced-host-any-case",
        ),
        pytest.param(
            spec(force_nodes=("h1",)), "h1", {reasons.NOT_FORCED_NODE: 2}, id="forced-node"
        ),
        pytest.param(
            spec(requested_destination=Destination("h3")),
            "h3",
            {reasons.NOT_REQUESTED_DESTINATION: 2},
            id="requested-destination",
        ),
        pytest.param(
            spec(force_hosts=("h1", "h2"), force_nodes=("h2",)),
            "h2",
            {reasons.NOT_FORCED_HOST: 1, reasons.NOT_FORCED_NODE: 1},
            id="forced-hosts-and-nodes-both-hold",
        ),
    ],
)
def test_forced_requests_go_where_they_are_sent(
    request_: RequestSpec, chosen: str, reasons_: dict[str, int]
) -> None:
    store = HookedStore(HOSTS)
    [[primary, *_]] = engine(store).select("req", request_, [uuid_of("i1")])
    assert primary.host == chosen
    assert store.get_consumer(uuid_of("i1")) is not None, "a forced request is claimed"
    trace = (
        engine(HookedStore(HOSTS))
        .schedule("req", request_, [uuid_of("i1")], claim=False)
        .traces[0]
    )
    assert trace.reasons == reasons_


@pytest.mark.parametrize(
    ("request_", "details"),
    [
        pytest.param(
            spec(ram=4096, force_hosts=("h3",)),
            "0/3 hosts available: 2 not a forced host, 1 insufficient MEMORY_MB",
            id="forced-host-too-small-is-not-overcommitted",
        ),
        pytest.param(
            spec(force_hosts=("nowhere",)),
            "0/3 hosts available: 3 not a forced host",
            id="unknown-forced-host",
        ),
        pytest.param(
            spec(requested_destination=Destination("h1", "h2")),
            "0/3 hosts available: 3 not the requested destination",
            id="destination-node-elsewhere",
        ),
    ],
)
def test_a_forced_request_that_does_not_fit_finds_no_host(
    request_: RequestSpec, details: str
) -> None:
    store = HookedStore(HOSTS)
    with pytest.raises(NoValidHost) as err:
        engine(store).select("req", request_, [uuid_of("i1")])
    assert err.value.details == details
    assert err.value.message == NoValidHost.USER_MESSAGE
    assert store.get_consumer(uuid_of("i1")) is None


def test_forcing_does_not_skip_the_filters() -> None:
    """We differ from Nova, whose forced host skips every filter: here a forced
    second member of an anti-affinity group is refused on the first one's host."""
    store = HookedStore(HOSTS)
    request = spec(group=group("anti-affinity"))
    [[first, *_]] = engine(store).select("req-1", request, [uuid_of("i1")])
    with pytest.raises(NoValidHost) as err:
        engine(store).select("req-2", request.replace(force_hosts=(first.host,)), [uuid_of("i2")])
    assert "server group anti-affinity" in err.value.details
