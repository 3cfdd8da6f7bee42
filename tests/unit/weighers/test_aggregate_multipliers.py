"""Per-aggregate multiplier overrides in the weigher framework."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.hostview import HostView
from scheduler.objects import MEMORY_MB
from scheduler.store.base import Aggregate
from scheduler.weighers.ram import RAMWeigher
from tests.unit.factories import (
    NOW,
    HookedStore,
    aggregate,
    context,
    host,
    settings,
    uuid_of,
    view_of,
)

HOSTS = [
    host("packed", used={MEMORY_MB: 16384}, aggregates=[uuid_of("pack")]),
    host("both", used={MEMORY_MB: 16384}, aggregates=[uuid_of("pack"), uuid_of("half")]),
    host("plain", used={MEMORY_MB: 16384}),
    host("idle"),
]


@pytest.mark.parametrize(
    ("aggregates", "multipliers"),
    [
        pytest.param([], [2.0, 2.0, 2.0, 2.0], id="no-override"),
        pytest.param(
            [
                aggregate("pack", ram_weight_multiplier="-1.0"),
                aggregate("half", ram_weight_multiplier="0.5"),
            ],
            [-1.0, -1.0, 2.0, 2.0],
            id="lowest-wins-per-host",
        ),
        pytest.param(
            [
                aggregate("pack", ram_weight_multiplier="lots"),
                aggregate("half", ram_weight_multiplier="0.5"),
            ],
            [2.0, 2.0, 2.0, 2.0],
            id="unreadable-value-keeps-the-configured-one",
        ),
        pytest.param(
            [aggregate("pack", cpu_weight_multiplier="-1.0")],
            [2.0, 2.0, 2.0, 2.0],
            id="other-weighers-option",
        ),
    ],
)
def test_aggregate_overrides(aggregates: list[Aggregate], multipliers: list[float]) -> None:
    view = view_of(*HOSTS, aggregates=aggregates)
    weigher = RAMWeigher(settings(), RAMWeigher.Args(ram_weight_multiplier=2.0))
    idx = np.arange(view.size)
    got = weigher.multipliers(view, idx)
    assert np.broadcast_to(got, idx.shape).tolist() == multipliers
    # The override multiplies the normalised score, host by host.
    scaled = np.array([16384 / 32768, 16384 / 32768, 16384 / 32768, 1.0])
    assert weigher.weigh(view, idx, context(), True).tolist() == pytest.approx(
        (np.array(multipliers) * scaled).tolist()
    )


def test_an_aggregate_change_is_seen() -> None:
    store = HookedStore(HOSTS)
    view = HostView(store, settings())
    view.refresh(NOW)
    weigher = RAMWeigher(settings())
    idx = np.arange(view.size)
    assert weigher.multipliers(view, idx) == 1.0
    store.put_aggregate(aggregate("pack", ram_weight_multiplier="-3"))
    view.refresh(NOW)
    assert weigher.multipliers(view, idx).tolist() == [-3.0, -3.0, 1.0, 1.0]
