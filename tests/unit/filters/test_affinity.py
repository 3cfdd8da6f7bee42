"""Server-group affinity and anti-affinity filters."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.filters.affinity import ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter
from tests.unit.factories import context, group, host, settings, spec, view_of

HOSTS = ("h1", "h2", "h3")


def kept_by(
    filter_cls: type, policy: str, members: dict[str, int], max_per_host: int = 1
) -> list[str]:
    view = view_of(*(host(h) for h in HOSTS))
    idx = np.arange(view.size)
    ctx = context(spec(group=group(policy, max_per_host)), members=members)
    f = filter_cls(settings())
    state = f.prepare(ctx)
    if state is None:
        return list(HOSTS)
    return [view.names[i] for i in idx[f.passes(view, idx, ctx, state)]]


@pytest.mark.parametrize(
    ("members", "kept"),
    [
        pytest.param({}, ["h1", "h2", "h3"], id="first-member-goes-anywhere"),
        pytest.param({"h2": 1}, ["h2"], id="follows-the-group"),
        pytest.param({"h2": 0}, ["h1", "h2", "h3"], id="zero-count-is-no-member"),
        pytest.param({"gone": 1}, [], id="members-on-a-host-not-in-view"),
    ],
)
def test_affinity(members: dict[str, int], kept: list[str]) -> None:
    assert kept_by(ServerGroupAffinityFilter, "affinity", members) == kept


@pytest.mark.parametrize(
    ("members", "max_per_host", "kept"),
    [
        pytest.param({}, 1, ["h1", "h2", "h3"], id="no-members"),
        pytest.param({"h1": 1, "h3": 1}, 1, ["h2"], id="avoids-hosts-with-members"),
        pytest.param({"h1": 1, "h3": 2}, 2, ["h1", "h2"], id="max-server-per-host"),
        pytest.param({"h1": 1, "h2": 1, "h3": 1}, 1, [], id="every-host-taken"),
    ],
)
def test_anti_affinity(members: dict[str, int], max_per_host: int, kept: list[str]) -> None:
    assert kept_by(ServerGroupAntiAffinityFilter, "anti-affinity", members, max_per_host) == kept


@pytest.mark.parametrize(
    ("filter_cls", "policy"),
    [
        pytest.param(ServerGroupAffinityFilter, "soft-affinity", id="affinity-ignores-soft"),
        pytest.param(ServerGroupAffinityFilter, "anti-affinity", id="affinity-ignores-anti"),
        pytest.param(ServerGroupAntiAffinityFilter, "soft-anti-affinity", id="anti-ignores-soft"),
        pytest.param(ServerGroupAntiAffinityFilter, "affinity", id="anti-ignores-affinity"),
    ],
)
def test_only_the_strict_policy_it_names_applies(filter_cls: type, policy: str) -> None:
    ctx = context(spec(group=group(policy)), members={"h1": 1})
    assert filter_cls(settings()).prepare(ctx) is None


def test_no_group_does_not_apply() -> None:
    ctx = context(spec(), members={})
    assert ServerGroupAffinityFilter(settings()).prepare(ctx) is None
    assert ServerGroupAntiAffinityFilter(settings()).prepare(ctx) is None
