"""The benchmark's baseline decides like the engine, so the ratio compares like with like."""

from __future__ import annotations

import time
import uuid as uuidlib

import pytest

from bench import cloud, naive
from bench.cases.engine import ANTI, MULTI, SINGLE, request
from scheduler.engine import Engine, EngineSettings
from scheduler.store import MemoryStore


@pytest.mark.parametrize(
    ("kind", "hosts", "limit"),
    [
        pytest.param(SINGLE, 60, 1000, id="one-instance"),
        pytest.param(MULTI, 60, 1000, id="ten-instances"),
        pytest.param(ANTI, 60, 1000, id="ten-anti-affinity"),
        pytest.param(SINGLE, 60, 20, id="cut-to-max-placement-results"),
    ],
)
def test_naive_baseline_picks_the_engines_hosts(kind: str, hosts: int, limit: int) -> None:
    store = MemoryStore()
    cloud.populate(store, cloud.plan(hosts, seed=3))
    baseline = naive.NaiveScheduler(
        naive.host_states(store.list_providers(), store.list_aggregates(), store.list_services()),
        max_placement_results=limit,
    )
    # The baseline is Nova's loop: it picks what the Nova-identical profile picks.
    engine = Engine(store, EngineSettings(max_placement_results=limit, weigher_profile="nova"))
    spec = request(kind)
    uuids = [str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"i{n}")) for n in range(spec.num_instances)]

    chosen = engine.select("req-1", spec, uuids, claim=False)
    expected = baseline.select(spec, uuids, time.time())

    # Weights, not names: hosts of equal weight are ordered at random by both.
    assert [[s.weight for s in per] for per in chosen] == [
        [pytest.approx(w) for _, w in per] for per in expected
    ]


@pytest.mark.parametrize(
    ("fill_down", "fill_disabled", "kept"),
    [
        pytest.param(False, False, True, id="up-and-enabled"),
        pytest.param(True, False, False, id="down"),
        pytest.param(False, True, False, id="disabled"),
    ],
)
def test_naive_compute_filter(fill_down: bool, fill_disabled: bool, kept: bool) -> None:
    now = 1000.0
    host = naive.HostState(
        name="h",
        uuid="u",
        total={},
        reserved={},
        ratio={},
        max_unit={},
        min_unit={},
        step={},
        used={},
        zones=frozenset({"nova"}),
        last_seen=now - (120 if fill_down else 1),
        disabled=fill_disabled,
        failed_builds=0,
    )
    req = naive.Request(spec=request(SINGLE), now=now)
    assert naive.ComputeFilter(60.0).host_passes(host, req) is kept
