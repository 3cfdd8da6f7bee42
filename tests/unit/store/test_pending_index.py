"""The pending index (requests waiting for capacity), on both stores."""

from __future__ import annotations

import pytest

from scheduler.priority import MAX_PRIORITY
from scheduler.store import Store
from scheduler.store.base import pending_member, pending_uuid
from tests.unit.store.test_contract import make_store, store  # noqa: F401 - fixtures


def test_entries_come_by_priority_then_age_then_uuid(store: Store) -> None:  # noqa: F811
    store.add_pending("c-young-low", -5, 30.0)
    store.add_pending("b-old-high", 100, 10.0)
    store.add_pending("a-young-high", 100, 20.0)
    store.add_pending("d-old-zero", 0, 1.0)
    store.add_pending("e-same-as-d", 0, 1.0)
    assert store.list_pending() == [
        "b-old-high",
        "a-young-high",
        "d-old-zero",
        "e-same-as-d",
        "c-young-low",
    ]
    assert store.list_pending(2) == ["b-old-high", "a-young-high"]
    assert store.list_pending(0) == []


def test_adding_again_replaces_the_entry_and_removing_is_idempotent(
    store: Store,  # noqa: F811
) -> None:
    store.add_pending("x", 1, 5.0)
    store.add_pending("y", 1, 6.0)
    store.add_pending("x", 1, 7.0)  # re-indexed: now after y
    assert store.list_pending() == ["y", "x"]
    assert store.remove_pending("y") is True
    assert store.remove_pending("y") is False
    assert store.list_pending() == ["x"]


@pytest.mark.parametrize(
    "higher, lower",
    [
        pytest.param((MAX_PRIORITY, 9e9), (MAX_PRIORITY - 1, 0.0), id="extremes-priority"),
        pytest.param((-MAX_PRIORITY, 0.0), (-MAX_PRIORITY, 1.5), id="lowest-by-age"),
        pytest.param((1, 1e9), (0, 0.0), id="priority-beats-age"),
        pytest.param((0, 0.000001), (0, 0.000002), id="microseconds"),
    ],
)
def test_member_text_sorts_in_retry_order(
    higher: tuple[int, float], lower: tuple[int, float]
) -> None:
    first, second = pending_member("u1", *higher), pending_member("u2", *lower)
    assert first < second
    assert pending_uuid(first) == "u1"
