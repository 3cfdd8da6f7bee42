"""DestinationRequestFilter: forced hosts and nodes and a requested destination
narrow the request to the hosts they name; forced requests still claim. Hosts
already tried are removed, before the cut, whatever host filters are enabled."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.engine.settings import DEFAULT_FILTERS
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
        pytest.param(
            spec(ignore_hosts=("h1", "H2")),
            HostConstraint(
                reasons.ALREADY_TRIED, forbidden_hosts=frozenset({"h1", "H2"}), ignore_case=True
            ),
            id="hosts-tried-ignore-case",
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
        pytest.param(
            spec(force_hosts=("h1", "h2"), ignore_hosts=("H1",)),
            "h2",
            {reasons.NOT_FORCED_HOST: 1, reasons.ALREADY_TRIED: 1},
            id="forced-host-already-tried-is-not-chosen",
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
        pytest.param(
            spec(force_hosts=("h1",), ignore_hosts=("h1",)),
            "0/3 hosts available: 2 not a forced host, 1 host already tried",
            id="the-forced-host-already-tried",
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


# --- hosts already tried ------------------------------------------------------------

TRIED_HOSTS = [host("h1"), host("H2"), host("h3", ram=2048), host("h4", ram=2048)]


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param(DEFAULT_FILTERS, id="default-filters"),
        pytest.param(("ComputeFilter", "ServerGroupAffinityFilter"), id="some-filters"),
        pytest.param((), id="no-host-filters"),
    ],
)
@pytest.mark.parametrize(
    ("ignore", "left"),
    [
        pytest.param(("h1",), {"H2", "h3", "h4"}, id="one-tried"),
        pytest.param(("h2", "H1", "h3"), {"h4"}, id="names-ignoring-case"),
        pytest.param(("elsewhere",), {"h1", "H2", "h3", "h4"}, id="unknown-name-changes-nothing"),
    ],
)
def test_hosts_already_tried_are_never_chosen_whatever_filters_are_enabled(
    filters: tuple[str, ...], ignore: tuple[str, ...], left: set[str]
) -> None:
    # Weighers off: every host left ties and the pick is drawn, over many requests.
    chosen = set()
    for n in range(20):
        eng = engine(HookedStore(TRIED_HOSTS), enabled_filters=filters, weighers=())
        [hosts] = eng.select(f"req-{n}", spec(ignore_hosts=ignore), [uuid_of("i1")])
        chosen |= {s.host for s in hosts}
    assert chosen <= left
    assert chosen & left


def test_hosts_already_tried_do_not_use_up_the_cut() -> None:
    """The first two hosts in store order are ignored; a cut of two still finds
    a third: they are removed before the candidate step, never counted in it."""
    store = HookedStore(TRIED_HOSTS)
    eng = engine(store, max_placement_results=2, randomize_candidates=False, weighers=())
    result = eng.schedule("req", spec(ignore_hosts=("h1", "h2")), [uuid_of("i1")], claim=False)
    [trace] = result.traces
    assert trace.host in {"h3", "h4"}
    assert trace.reasons == {reasons.ALREADY_TRIED: 2}
    assert reasons.OVER_LIMIT not in trace.reasons
    assert [(s.stage, s.survivors) for s in trace.stages[:4]] == [
        ("DestinationRequestFilter", 2),
        ("DisabledComputesRequestFilter", 2),
        ("hosts up", 2),
        ("candidates", 2),
    ]
