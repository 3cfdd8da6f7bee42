"""ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.weighers.base import BaseWeigher
from scheduler.weighers.soft_affinity import ServerGroupSoftAffinityWeigher
from scheduler.weighers.soft_anti_affinity import ServerGroupSoftAntiAffinityWeigher
from tests.unit.factories import context, group, host, settings, spec, view_of

HOSTS = ("h1", "h2", "h3", "h4")


def weights(
    weigher_cls: type[BaseWeigher], policy: str | None, members: dict[str, int]
) -> list[float]:
    view = view_of(*(host(h) for h in HOSTS))
    request = spec(group=group(policy)) if policy else spec()
    idx = np.arange(view.size)
    weigher, ctx = weigher_cls(settings()), context(request, members=members)
    return weigher.weigh(view, idx, ctx, weigher.prepare(ctx)).tolist()


@pytest.mark.parametrize(
    ("weigher_cls", "policy", "members", "expected"),
    [
        pytest.param(
            ServerGroupSoftAffinityWeigher,
            "soft-affinity",
            {"h1": 1, "h3": 3},
            [1 / 3, 0.0, 1.0, 0.0],
            id="affinity-more-members-better",
        ),
        pytest.param(
            ServerGroupSoftAntiAffinityWeigher,
            "soft-anti-affinity",
            {"h1": 1, "h3": 3},
            [2 / 3, 1.0, 0.0, 1.0],
            id="anti-affinity-fewer-members-better",
        ),
        pytest.param(
            ServerGroupSoftAntiAffinityWeigher,
            "soft-anti-affinity",
            {"h1": 1, "h2": 1, "h3": 1, "h4": 2},
            [1.0, 1.0, 1.0, 0.0],
            id="anti-affinity-never-rejects",
        ),
        pytest.param(
            ServerGroupSoftAntiAffinityWeigher,
            "soft-anti-affinity",
            {"gone": 2, "h2": 1},
            [1.0, 0.0, 1.0, 1.0],
            id="members-off-view-ignored",
        ),
        pytest.param(
            ServerGroupSoftAffinityWeigher,
            "soft-anti-affinity",
            {"h1": 1},
            [0.0] * 4,
            id="affinity-ignores-other-policy",
        ),
        pytest.param(
            ServerGroupSoftAntiAffinityWeigher,
            "anti-affinity",
            {"h1": 1},
            [0.0] * 4,
            id="anti-ignores-strict-policy",
        ),
        pytest.param(
            ServerGroupSoftAntiAffinityWeigher, None, {"h1": 1}, [0.0] * 4, id="no-group"
        ),
        pytest.param(
            ServerGroupSoftAffinityWeigher, "soft-affinity", {}, [0.0] * 4, id="no-members-yet"
        ),
    ],
)
def test_soft_group_weighers(
    weigher_cls: type[BaseWeigher],
    policy: str | None,
    members: dict[str, int],
    expected: list[float],
) -> None:
    assert weights(weigher_cls, policy, members) == pytest.approx(expected)
