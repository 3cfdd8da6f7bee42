"""The placement rules: the array forms answer as the scalar forms do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import rules
from scheduler.exceptions import GroupPolicyViolation

amounts = st.integers(min_value=-3, max_value=40)
units = st.integers(min_value=1, max_value=12)


@given(amount=amounts, rows=st.lists(st.tuples(units, units, units), min_size=1, max_size=8))
def test_units_allow_is_unit_rule_broken_over_arrays(
    amount: int, rows: list[tuple[int, int, int]]
) -> None:
    min_unit, max_unit, step = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    mask = rules.units_allow(amount, min_unit, max_unit, step)
    assert mask.tolist() == [rules.unit_rule_broken(amount, *row) is None for row in rows]


@pytest.mark.parametrize(
    ("amount", "limits", "broken"),
    [
        pytest.param(1, (1, 8, 1), None, id="keeps-all"),
        pytest.param(0, (1, 8, 1), ("min_unit", 1), id="below-min-unit"),
        pytest.param(9, (1, 8, 1), ("max_unit", 8), id="above-max-unit"),
        pytest.param(3, (2, 8, 2), ("step_size", 2), id="off-step"),
        pytest.param(1, (2, 0, 3), ("min_unit", 2), id="min-unit-checked-first"),
    ],
)
def test_unit_rule_broken(
    amount: int, limits: tuple[int, int, int], broken: tuple[str, int] | None
) -> None:
    assert rules.unit_rule_broken(amount, *limits) == broken


@pytest.mark.parametrize(
    ("max_unit", "total", "effective"),
    [
        pytest.param(None, 16, 16, id="unset-is-total"),
        pytest.param(4, 16, 4, id="below-total"),
        pytest.param(64, 16, 16, id="never-above-total"),
    ],
)
def test_effective_max_unit(max_unit: int | None, total: int, effective: int) -> None:
    assert rules.effective_max_unit(total, max_unit) == effective


@pytest.mark.parametrize(
    ("policy", "members", "host", "limit", "allowed"),
    [
        pytest.param("anti-affinity", {}, "h1", 1, True, id="anti-empty"),
        pytest.param("anti-affinity", {"h1": 1}, "h1", 1, False, id="anti-taken"),
        pytest.param("anti-affinity", {"h1": 1}, "h2", 1, True, id="anti-elsewhere"),
        pytest.param("anti-affinity", {"h1": 1}, "h1", 2, True, id="anti-relaxed"),
        pytest.param("affinity", {}, "h1", 1, True, id="affinity-empty"),
        pytest.param("affinity", {"h1": 2}, "h1", 1, True, id="affinity-with-members"),
        pytest.param("affinity", {"h1": 2}, "h2", 1, False, id="affinity-elsewhere"),
        pytest.param("soft-anti-affinity", {"h1": 3}, "h1", 1, True, id="soft-anti-never-refuses"),
        pytest.param("soft-affinity", {"h1": 3}, "h2", 1, True, id="soft-never-refuses"),
    ],
)
def test_group_policy(
    policy: str, members: dict[str, int], host: str, limit: int, allowed: bool
) -> None:
    if allowed:
        rules.check_group("g", policy, host, members, limit)
    else:
        with pytest.raises(GroupPolicyViolation):
            rules.check_group("g", policy, host, members, limit)
    # The array form (one count per host) answers the same for the host.
    hosts = ["h1", "h2", "h3"]
    here = np.array([members.get(h, 0) for h in hosts])
    mask = rules.group_allows(policy, here, bool(members), limit)
    assert bool(mask[hosts.index(host)]) is allowed


@pytest.mark.parametrize(
    ("now", "last_seen", "up"),
    [
        pytest.param(100.0, 40.0, True, id="at-the-limit"),
        pytest.param(100.0, 39.9, False, id="past-the-limit"),
        pytest.param(100.0, 150.0, True, id="clock-went-back-within-limit"),
        pytest.param(100.0, float("-inf"), False, id="never-seen"),
    ],
)
def test_is_up(now: float, last_seen: float, up: bool) -> None:
    assert rules.is_up(now, last_seen, 60.0) is up
    assert rules.is_up(now, np.array([last_seen]), 60.0).tolist() == [up]
