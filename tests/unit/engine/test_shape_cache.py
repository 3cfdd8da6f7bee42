"""The shape cache decides as the uncached engine: decision by decision, on the
same view, the same hosts, alternates, weights and trace, as claims of this
worker and of another one (through the change feed), releases, hosts
disabled, failing builds, going down with the clock and coming back change
the cloud."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scheduler.engine import Engine
from scheduler.engine.pipeline import InstanceTrace
from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, VCPU
from tests.unit.factories import NOW, HookedStore, host, settings, spec, uuid_of

#: (vCPUs, MB, extra specs): the five flavors of the catalog's shape, and one
#: asking for a trait only some hosts have.
FLAVORS = (
    (1, 512, {}),
    (1, 2048, {}),
    (2, 4096, {}),
    (4, 8192, {}),
    (8, 16384, {}),
    (2, 4096, {"trait:CUSTOM_FAST": "required"}),
)


def _cloud(kinds: list[int]) -> list:
    """A host per kind: 0 roomy, 1 nearly full, 2 disabled, 3 down, 4 small,
    5 roomy with the trait."""
    return [
        host(
            f"h{i:03d}",
            vcpus=4 if kind == 4 else 16,
            ram=16384 if kind == 4 else 65536,
            used={VCPU: 14, MEMORY_MB: 60000} if kind == 1 else {},
            disabled=kind == 2,
            up=kind != 3,
            traits=("CUSTOM_FAST",) if kind == 5 else (),
        )
        for i, kind in enumerate(kinds)
    ]


def _decision(trace: InstanceTrace) -> tuple[object, ...]:
    return trace.host, trace.stages, trace.reasons, trace.top, trace.conflicts


_STEP = st.one_of(
    st.tuples(st.just("decide"), st.integers(0, len(FLAVORS) - 1)),
    st.tuples(st.just("decide"), st.integers(0, len(FLAVORS) - 1)),
    st.tuples(st.just("other worker"), st.integers(0, len(FLAVORS) - 1)),
    st.tuples(st.just("release"), st.integers(0, 1000)),
    st.tuples(st.just("disable"), st.integers(0, 1000)),
    st.tuples(st.just("build failed"), st.integers(0, 1000)),
    st.tuples(st.just("build succeeded"), st.integers(0, 1000)),
    st.tuples(st.just("stop"), st.integers(0, 1000)),
    st.tuples(st.just("start"), st.integers(0, 1000)),
    st.tuples(st.just("clock"), st.integers(0, 90)),
)


#: Weighers scaled across the candidates and not (the defaults), and only
#: those whose values are shares of a host (each host's share patched alone),
#: there with disabled hosts removed by ComputeFilter after the cut rather
#: than before it (so a host of the cut changes its filter's verdict).
WEIGHINGS: tuple[dict[str, object], ...] = (
    {},
    {
        "compute_status_filter": False,
        "io_ops_weight_multiplier": 0.0,
        "build_failure_weight_multiplier": 0.0,
        "hypervisor_version_weight_multiplier": 0.0,
    },
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("weighing", WEIGHINGS, ids=("default", "shares only, disabled filtered"))
@hypothesis_settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(st.sampled_from((0, 1, 1, 2, 3, 4, 4, 5)), min_size=1, max_size=60),
    limit=st.integers(1, 8),
    instances=st.integers(1, 3),
    steps=st.lists(_STEP, min_size=10, max_size=40),
)
def test_a_cached_shape_decides_as_the_engine(
    weighing: dict[str, object],
    kinds: list[int],
    limit: int,
    instances: int,
    steps: list[tuple[str, int]],
) -> None:
    # Ranges of 4 x the cut (4 to 32 rows): the scan often stops early, and
    # the cache has to extend and shorten it as hosts fill and free.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler.engine.placement.FIRST_SPAN", 1)
        store = HookedStore(_cloud(kinds))
        clock = [NOW]
        names = [f"h{i:03d}" for i in range(len(kinds))]

        def built(cache: bool) -> Engine:
            options = settings(
                max_placement_results=limit,
                shape_cache=cache,
                # the largest flavor learned from the last 3 requests: it moves often
                headroom_window=3,
                **weighing,
            )
            return Engine(store, options, clock=lambda: clock[0])

        cached, uncached, other = built(True), built(False), built(False)
        claimed: list[str] = []
        disabled: set[str] = {n for n, kind in zip(names, kinds, strict=True) if kind == 2}
        # hosts whose compute no longer heartbeats: down once the clock has
        # moved service_down_time past their last beat (no feed entry says so)
        stopped: set[str] = {n for n, kind in zip(names, kinds, strict=True) if kind == 3}
        for n, (action, value) in enumerate(steps):
            request = f"req-{n}"
            uuids = [uuid_of(f"i{n}-{k}") for k in range(instances)]
            if action == "release":
                if claimed:
                    store.release(claimed.pop(value % len(claimed)))
            elif action == "disable":
                name = names[value % len(names)]
                disabled ^= {name}
                store.set_service_disabled(name, name in disabled)
            elif action == "build failed":  # weighed across the candidates, by range
                store.record_build_result(names[value % len(names)], success=False)
            elif action == "build succeeded":
                store.record_build_result(names[value % len(names)], success=True)
            elif action == "stop":
                stopped.add(names[value % len(names)])
            elif action == "start":
                stopped.discard(names[value % len(names)])
                store.heartbeat([names[value % len(names)]], clock[0])
            elif action == "clock":
                clock[0] += value
                store.heartbeat([n for n in names if n not in stopped], clock[0] - 1)
            elif action == "other worker":  # reaches the engines through the change feed
                vcpus, ram, extra = FLAVORS[value]
                try:
                    other.select(request, spec(vcpus=vcpus, ram=ram, extra_specs=extra), uuids)
                    claimed.extend(uuids)
                except NoValidHost:
                    pass
            else:
                vcpus, ram, extra = FLAVORS[value]
                asked = spec(vcpus=vcpus, ram=ram, extra_specs=extra, num_instances=instances)
                try:
                    expected = uncached.schedule(request, asked, uuids, claim=False)
                except NoValidHost as exc:
                    with pytest.raises(NoValidHost) as got:
                        cached.schedule(request, asked, uuids)
                    assert got.value.reasons == exc.reasons
                    assert [_decision(t) for t in got.value.traces] == [
                        _decision(t) for t in exc.traces
                    ]
                    continue
                result = cached.schedule(request, asked, uuids)
                claimed.extend(uuids)
                assert result.selections == expected.selections
                assert [_decision(t) for t in result.traces] == [
                    _decision(t) for t in expected.traces
                ]


def test_a_repeated_shape_is_decided_from_the_cache() -> None:
    """The cache serves decisions: from a shape's second request on, the
    decision comes from it (its hit count grows) and is the uncached one."""
    store = HookedStore(_cloud([0, 1, 0, 4, 2, 0, 3, 5, 0, 1]))
    options = {"max_placement_results": 4, "headroom_window": 3}
    cached = Engine(store, settings(shape_cache=True, **options), clock=lambda: NOW)
    uncached = Engine(store, settings(shape_cache=False, **options), clock=lambda: NOW)
    assert cached.shapes is not None
    assert uncached.shapes is None
    vcpus, ram, extra = FLAVORS[2]
    for n in range(4):
        request, uuids = f"req-{n}", [uuid_of(f"i{n}")]
        asked = spec(vcpus=vcpus, ram=ram, extra_specs=extra)
        hits = cached.shapes.hits
        expected = uncached.schedule(request, asked, uuids, claim=False)
        result = cached.schedule(request, asked, uuids)
        # the first sight of a shape is decided uncached; every later one from the cache
        assert cached.shapes.hits == hits + (n > 0)
        assert result.selections == expected.selections
        assert [_decision(t) for t in result.traces] == [_decision(t) for t in expected.traces]
    assert cached.shapes.stats() == {"hits": 3, "misses": 1, "shapes": 1}
