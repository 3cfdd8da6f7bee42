"""The candidate step stops at the max_placement_results cut: decision by
decision, what it decides is what a scan of every host decides on the same
view, as claims of this worker and of another one (through the change feed)
and releases change the cloud under it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scheduler.engine.pipeline import OVER_LIMIT, InstanceTrace
from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, VCPU
from tests.unit.factories import HookedStore, engine, host, spec, uuid_of

#: flavors a request is drawn from: (vCPUs, MB)
FLAVORS = ((1, 2048), (2, 4096), (4, 8192), (8, 16384), (16, 65536))


def _cloud(kinds: list[int]) -> list:
    """A host per kind: 0 roomy, 1 nearly full, 2 disabled, 3 down, 4 small."""
    out = []
    for i, kind in enumerate(kinds):
        out.append(
            host(
                f"h{i:03d}",
                vcpus=4 if kind == 4 else 16,
                ram=16384 if kind == 4 else 65536,
                used={VCPU: 14, MEMORY_MB: 60000} if kind == 1 else {},
                disabled=kind == 2,
                up=kind != 3,
            )
        )
    return out


def _decision(trace: InstanceTrace) -> tuple[object, ...]:
    candidates = next(s.survivors for s in trace.stages if s.stage == "candidates")
    return trace.host, tuple(trace.top), candidates


_STEP = st.one_of(
    st.tuples(st.just("decide"), st.integers(0, len(FLAVORS) - 1)),
    st.tuples(st.just("other worker"), st.integers(0, len(FLAVORS) - 1)),
    st.tuples(st.just("release"), st.integers(0, 1000)),
)


@pytest.mark.timeout(120)
@hypothesis_settings(max_examples=40, deadline=None)
@given(
    # few roomy hosts: a range of rows often holds fewer candidates than the cut
    kinds=st.lists(st.sampled_from((0, 1, 1, 2, 3, 4, 4, 4)), min_size=1, max_size=90),
    limit=st.integers(1, 8),
    randomize=st.booleans(),
    steps=st.lists(_STEP, min_size=1, max_size=12),
)
def test_an_early_stop_decides_as_a_whole_scan(
    kinds: list[int], limit: int, randomize: bool, steps: list[tuple[str, int]]
) -> None:
    # Ranges of 4 x the cut (4 to 32 rows) over up to 90 hosts: the scan often
    # stops early, and the dry run for all hosts examines every host.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler.engine.placement.FIRST_SPAN", 1)
        store = HookedStore(_cloud(kinds))
        options = {"max_placement_results": limit, "randomize_candidates": randomize}
        worker, other = engine(store, **options), engine(store, **options)
        claimed: list[str] = []
        for n, (action, value) in enumerate(steps):
            request, uuid = f"req-{n}", uuid_of(f"i{n}")
            if action == "release":
                if claimed:
                    store.release(claimed.pop(value % len(claimed)))
                continue
            vcpus, ram = FLAVORS[value]
            if action == "other worker":  # reaches `worker` through the change feed
                try:
                    other.select(request, spec(vcpus=vcpus, ram=ram), [uuid])
                    claimed.append(uuid)
                except NoValidHost:
                    pass
                continue
            asked = spec(vcpus=vcpus, ram=ram)
            try:
                whole = worker.schedule(request, asked, [uuid], claim=False, all_hosts=True)
            except NoValidHost as exc:
                with pytest.raises(NoValidHost) as early_exc:
                    worker.schedule(request, asked, [uuid])
                # Nothing fits: every host was examined either way.
                assert early_exc.value.reasons == exc.reasons
                continue
            early = worker.schedule(request, asked, [uuid])
            claimed.append(uuid)
            assert _decision(early.traces[0]) == _decision(whole.traces[0])
            assert early.selections == whole.selections
            # Every host counted once, the unexamined ones beyond the cut.
            counted, full = early.traces[0].reasons, whole.traces[0].reasons
            assert sum(counted.values()) == sum(full.values())
            assert counted.get(OVER_LIMIT, 0) >= full.get(OVER_LIMIT, 0)
