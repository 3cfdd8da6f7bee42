"""RetryFilter: still loads by name, has nothing left to do (hosts already
tried are the destination request filter's), and says so at start-up."""

from __future__ import annotations

import pytest
import structlog.testing

from scheduler.engine.settings import DEFAULT_FILTERS
from scheduler.filters.retry import RetryFilter
from scheduler.objects import RequestSpec
from tests.unit.factories import HookedStore, context, engine, host, settings, spec, uuid_of


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(spec(), id="nothing-tried"),
        pytest.param(spec(ignore_hosts=("h1", "H2")), id="hosts-tried"),
    ],
)
def test_retry_filter_is_skipped_on_every_request(request_: RequestSpec) -> None:
    assert RetryFilter(settings()).prepare(context(request_)) is None


@pytest.mark.parametrize(
    ("enabled", "warned"),
    [
        pytest.param(DEFAULT_FILTERS, [], id="defaults-lack-it"),
        pytest.param(("ComputeFilter", "RetryFilter"), ["RetryFilter"], id="configured"),
    ],
)
def test_a_configured_retry_filter_is_warned_at_start_up(
    enabled: tuple[str, ...], warned: list[str]
) -> None:
    with structlog.testing.capture_logs() as logs:
        engine(HookedStore(), enabled_filters=enabled)
    events = [e for e in logs if e["event"] == "host_filter_not_needed"]
    assert [e["host_filter"] for e in events] == warned
    assert all(e["why"] == RetryFilter.NOT_NEEDED for e in events)
    assert "RetryFilter" not in DEFAULT_FILTERS


def test_configured_it_changes_nothing() -> None:
    """Listed or not, the hosts already tried go before the candidate step,
    counted by the destination request filter; RetryFilter is skipped."""
    hosts = [host("h1"), host("h2")]
    request = spec(ignore_hosts=("H1",))
    traces = [
        engine(HookedStore(hosts), enabled_filters=filters)
        .schedule("req", request, [uuid_of("i1")], claim=False)
        .traces[0]
        for filters in (("RetryFilter",), ())
    ]
    with_it, without = traces
    assert with_it.host == without.host == "h2"
    assert with_it.reasons == without.reasons == {"host already tried": 1}
    assert [s.stage for s in with_it.stages][-1] == "RetryFilter"
    assert with_it.stages[:-1] == without.stages
