"""The engine's dry run (``Engine.explain``) host by host, its ties drawn as
``select`` draws them, and one filter run alone (``Engine.run_filter``)."""

from __future__ import annotations

import pytest

from scheduler.engine.plugins import UnknownPlugin
from scheduler.explain import CANDIDATE_STEP, HOST_FILTER, REQUEST_FILTER
from tests.unit.factories import HookedStore, engine, host, spec, uuid_of

#: Weighers off: every host that passes ties, and the pick is drawn.
FLAT = {"weighers": ()}

HOSTS = [
    host("big1", ram=65536),
    host("big2", ram=65536, used={"MEMORY_MB": 32768}),
    host("mid", ram=16384),
    host("small", ram=512),
    host("down", up=False),
    host("off", disabled=True),
]


def test_all_hosts_names_every_stage_survivors_and_every_removed_hosts_reason() -> None:
    eng = engine(HookedStore(HOSTS))
    report = eng.explain("req-1", spec(ram=2048, ignore_hosts=("mid",)), [uuid_of("i1")], True)
    (inst,) = report.instances
    detail = inst.detail
    assert detail is not None
    by_stage = {s.stage: s for s in detail.stages}
    # The request filters, the candidate step, each host filter in order.
    assert by_stage["DestinationRequestFilter"].kind == REQUEST_FILTER
    assert dict(by_stage["DestinationRequestFilter"].removed) == {"mid": "host already tried"}
    assert "mid" not in by_stage["DestinationRequestFilter"].survivors
    assert by_stage["DisabledComputesRequestFilter"].kind == REQUEST_FILTER
    assert dict(by_stage["DisabledComputesRequestFilter"].removed) == {"off": "disabled"}
    assert dict(by_stage["hosts up"].removed) == {"down": "host down"}
    assert by_stage["hosts up"].kind == by_stage["candidates"].kind == CANDIDATE_STEP
    assert dict(by_stage["candidates"].removed) == {"small": "insufficient MEMORY_MB"}
    assert by_stage["candidates"].survivors == ("big1", "big2")
    filters = [s.stage for s in detail.stages if s.kind == HOST_FILTER]
    assert filters == [name for name, _ in eng.filters]
    # A filter the request gives nothing to check keeps every host, said so.
    assert by_stage["ServerGroupAffinityFilter"].skipped
    assert not by_stage["ComputeFilter"].skipped
    # Every removed host once, by its first stage: the same counts as the summary.
    removed = [h for s in detail.stages for h in s.removed]
    assert sorted(removed) == ["down", "mid", "off", "small"]
    assert dict(inst.reasons) == {
        reason: sum(1 for s in detail.stages for r in s.removed.values() if r == reason)
        for reason in inst.reasons
    }
    # The counted stages and the named ones agree.
    assert [(s.stage, s.survivors) for s in inst.stages] == [
        (s.stage, len(s.survivors)) for s in detail.stages
    ]


def test_all_hosts_weighs_every_survivor_with_each_weighers_parts() -> None:
    # Nova's weighers (RAMWeigher's shares are checked below): the nova profile.
    eng = engine(HookedStore(HOSTS), weigher_profile="nova")
    report = eng.explain("req-1", spec(ram=2048), [uuid_of("i1")], all_hosts=True)
    (inst,) = report.instances
    assert inst.detail is not None
    weighed = inst.detail.weighed
    assert [w.host for w in weighed] == ["big1", "big2", "mid"]  # most free RAM first
    assert inst.host == weighed[0].host  # host_subset_size 1: the best
    assert [w.weight for w in weighed] == sorted((w.weight for w in weighed), reverse=True)
    for w in weighed:
        assert set(w.shares) == set(report.weighers)
        assert w.weight == pytest.approx(sum(s.contribution for s in w.shares.values()))
        for name, share in w.shares.items():
            # As applied: BuildFailureWeigher's is negated (its SIGN).
            assert share.multiplier == report.weighers[name] * dict(eng.weighers)[name].SIGN
            assert share.contribution == pytest.approx(share.multiplier * share.normalised)
            assert 0.0 <= share.normalised <= 1.0
    ram = {w.host: w.shares["RAMWeigher"].normalised for w in weighed}
    assert ram == {"big1": 1.0, "big2": 0.5, "mid": 0.25}  # free RAM / the most free
    # The top of the summary is the head of the full list.
    assert [t.host for t in inst.top] == [w.host for w in weighed][: len(inst.top)]


def test_the_summary_alone_lists_no_host() -> None:
    eng = engine(HookedStore(HOSTS))
    (inst,) = eng.explain("req-1", spec(ram=2048), [uuid_of("i1")]).instances
    assert inst.detail is None
    assert "detail" not in inst.to_primitive()
    # Nor do the traces of a real decision.
    (trace,) = eng.schedule("req-1", spec(ram=2048), [uuid_of("i1")]).traces
    assert trace.by_name is None and trace.weighed == []


def test_all_hosts_of_an_unplaceable_request_ends_where_the_hosts_ran_out() -> None:
    eng = engine(HookedStore(HOSTS))
    report = eng.explain("req-1", spec(ram=100000), [uuid_of("i1")], all_hosts=True)
    (inst,) = report.instances
    assert not report.placeable and inst.detail is not None
    candidates = inst.detail.stage("candidates")
    assert candidates.survivors == ()
    assert set(candidates.removed) == {"big1", "big2", "mid", "small"}
    assert inst.detail.weighed == ()


@pytest.mark.parametrize("count", [1, 3])
def test_explain_chooses_the_host_select_chooses_for_the_same_ids(count: int) -> None:
    """Twenty hosts tie: the pick is drawn from the request id and instance uuid,
    and the dry run draws it as the real decision does."""
    hosts = [host(f"h{i:02}") for i in range(20)]
    chosen: set[str] = set()
    for seed in range(12):
        request_id = f"req-{seed}"
        uuids = [uuid_of(f"i{seed}-{n}") for n in range(count)]
        eng = engine(HookedStore(hosts), host_subset_size=5, **FLAT)
        report = eng.explain(request_id, spec(num_instances=count), uuids, all_hosts=True)
        placed = eng.select(request_id, spec(num_instances=count), uuids)
        assert [i.host for i in report.instances] == [per[0].host for per in placed], seed
        assert [i.instance_uuid for i in report.instances] == uuids
        chosen.add(placed[0][0].host)
    assert len(chosen) > 3  # the ties really were drawn


def test_run_filter_runs_one_filter_on_every_host() -> None:
    eng = engine(HookedStore(HOSTS))
    run = eng.run_filter("ComputeFilter", spec(ram=100000))
    # A down host is said to be down, as the candidate step says it, not
    # "disabled" (which it said before, though the host was enabled).
    assert dict(run.removed) == {"down": "host down", "off": "disabled"}
    # Every other host is asked, also those earlier stages would remove.
    assert run.survivors == ("big1", "big2", "mid", "small")
    assert run.hosts == len(HOSTS) and not run.skipped


def test_run_filter_with_nothing_to_check_keeps_every_host() -> None:
    run = engine(HookedStore(HOSTS)).run_filter("ServerGroupAffinityFilter", spec())
    assert run.skipped and run.removed == {} and len(run.survivors) == len(HOSTS)


def test_retry_filter_has_nothing_left_to_check() -> None:
    """Hosts already tried are the destination request filter's: RetryFilter,
    still loadable by name, is skipped even for a request that ignores hosts."""
    run = engine(HookedStore(HOSTS)).run_filter("RetryFilter", spec(ignore_hosts=("mid",)))
    assert run.skipped and run.removed == {} and len(run.survivors) == len(HOSTS)


def test_run_filter_builds_a_registered_filter_that_is_not_configured() -> None:
    eng = engine(HookedStore(HOSTS), enabled_filters=())
    run = eng.run_filter("ComputeFilter", spec())
    assert set(run.removed) == {"down", "off"}


def test_run_filter_refuses_an_unknown_name() -> None:
    with pytest.raises(UnknownPlugin, match="NoSuchFilter"):
        engine(HookedStore(HOSTS)).run_filter("NoSuchFilter", spec())
