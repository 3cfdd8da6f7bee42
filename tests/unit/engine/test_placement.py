"""The candidate step: traits, aggregates, nested providers, granular groups."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from scheduler.engine import reasons
from scheduler.engine.placement import place
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import MEMORY_MB
from scheduler.store.base import Aggregate, Inventory
from tests.unit.factories import (
    HookedStore,
    Host,
    child,
    engine,
    host,
    spec,
    uuid_of,
    view_of,
)

GPU = "VGPU"
AGG1, AGG2, AGG3 = uuid_of("agg1"), uuid_of("agg2"), uuid_of("agg3")
GOLD = Aggregate(uuid=uuid_of("gold-agg"), name="gold", metadata={})


def gpus(host_name: str, *types: str, vgpus: int = 2, used: int = 0) -> list:
    """One GPU child per type, each with ``vgpus`` VGPU and the type as a trait."""
    return [
        child(
            f"{host_name}-gpu{i}",
            inventory={GPU: vgpus},
            traits=[t],
            used={GPU: used} if used else None,
        )
        for i, t in enumerate(types)
    ]


@dataclass
class Case:
    name: str
    hosts: list[Host]
    extra_specs: dict[str, str]
    placed: dict[str, dict[str, dict[str, int]]]  # host -> provider name -> amounts
    reasons: dict[str, int] = field(default_factory=dict)
    aggregates: list[Aggregate] = field(default_factory=list)


BASE = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def flat(name: str, **more: int) -> dict[str, dict[str, int]]:
    """The allocation of a request taken whole from the root ``name``."""
    return {name: {**BASE, **more}}


CASES = [
    Case(
        "required-trait",
        [host("avx", traits=["HW_CPU_X86_AVX512F"]), host("plain")],
        {"trait:HW_CPU_X86_AVX512F": "required"},
        {"avx": flat("avx")},
        {"missing trait HW_CPU_X86_AVX512F": 1},
    ),
    Case(
        "trait-no-host-has",
        [host("a"), host("b")],
        {"trait:CUSTOM_NOWHERE": "required"},
        {},
        {"missing trait CUSTOM_NOWHERE": 2},
    ),
    Case(
        "forbidden-trait",
        [host("slow", traits=["CUSTOM_SLOW"]), host("fast")],
        {"trait:CUSTOM_SLOW": "forbidden"},
        {"fast": flat("fast")},
        {"has forbidden trait CUSTOM_SLOW": 1},
    ),
    Case(
        "any-of-traits",
        [host("a", traits=["CUSTOM_A"]), host("b", traits=["CUSTOM_B"]), host("c")],
        {"required": "in:CUSTOM_A,CUSTOM_B"},
        {"a": flat("a"), "b": flat("b")},
        {"none of traits CUSTOM_A,CUSTOM_B": 1},
    ),
    Case(
        "member-of-any",
        [host("a", aggregates=[AGG1]), host("b", aggregates=[AGG2]), host("c")],
        {"member_of": f"in:{AGG1},{AGG2}"},
        {"a": flat("a"), "b": flat("b")},
        {reasons.NOT_IN_AGGREGATE: 1},
    ),
    Case(
        "member-of-all",
        [host("both", aggregates=[AGG1, AGG2]), host("one", aggregates=[AGG1])],
        {"member_of": f"{AGG1}&{AGG2}"},
        {"both": flat("both")},
        {reasons.NOT_IN_AGGREGATE: 1},
    ),
    Case(
        "forbidden-aggregates",
        [host("a", aggregates=[AGG1]), host("b", aggregates=[AGG3]), host("c")],
        {"member_of": f"!in:{AGG1},{AGG3}"},
        {"c": flat("c")},
        {reasons.IN_FORBIDDEN_AGGREGATE: 2},
    ),
    Case(
        "member-of-by-name",
        [host("a", aggregates=[GOLD.uuid]), host("b")],
        {"member_of": "gold"},
        {"a": flat("a")},
        {reasons.NOT_IN_AGGREGATE: 1},
        [GOLD],
    ),
    Case(
        "resource-override-and-custom-class",
        [host("fpga", extra={"CUSTOM_FPGA": Inventory(total=1)}), host("none")],
        {"resources:CUSTOM_FPGA": "1", "resources:DISK_GB": "0"},
        {"fpga": {"fpga": {"VCPU": 1, "MEMORY_MB": 1024, "CUSTOM_FPGA": 1}}},
        {"insufficient CUSTOM_FPGA": 1},
    ),
    Case(
        "unsuffixed-split-across-the-tree",
        [host("gpu-host", children=gpus("gpu-host", "CUSTOM_T4")), host("plain")],
        {"resources:VGPU": "1"},
        {"gpu-host": {"gpu-host": BASE, "gpu-host-gpu0": {GPU: 1}}},
        {"insufficient VGPU": 1},
    ),
    Case(
        "unsuffixed-trait-picks-the-child-that-has-it",
        [host("h", children=gpus("h", "CUSTOM_NVIDIA_12", "CUSTOM_NVIDIA_11"))],
        {"resources:VGPU": "1", "trait:CUSTOM_NVIDIA_11": "required"},
        {"h": {"h": BASE, "h-gpu1": {GPU: 1}}},
    ),
    Case(
        "unsuffixed-trait-on-a-child-that-is-full",
        [
            host(
                "h",
                children=[
                    *gpus("h", "CUSTOM_NVIDIA_12"),
                    child(
                        "h-gpu1", inventory={GPU: 1}, used={GPU: 1}, traits=["CUSTOM_NVIDIA_11"]
                    ),
                ],
            )
        ],
        {"resources:VGPU": "1", "trait:CUSTOM_NVIDIA_11": "required"},
        {},
        {"missing trait CUSTOM_NVIDIA_11": 1},
    ),
    Case(
        "numbered-group-lands-on-one-provider",
        [
            host("h", children=gpus("h", "CUSTOM_NVIDIA_12", "CUSTOM_NVIDIA_11")),
            host("other", children=gpus("other", "CUSTOM_NVIDIA_12")),
        ],
        {"resources1:VGPU": "1", "trait1:CUSTOM_NVIDIA_11": "required"},
        {"h": {"h": BASE, "h-gpu1": {GPU: 1}}},
        {"missing trait CUSTOM_NVIDIA_11 (group 1)": 1},
    ),
    Case(
        "numbered-group-member-of-inherits-the-root's-aggregates",
        [
            host("in", aggregates=[AGG1], children=gpus("in", "CUSTOM_T4")),
            host("out", children=gpus("out", "CUSTOM_T4")),
        ],
        {"resources1:VGPU": "1", "member_of1": AGG1},
        {"in": {"in": BASE, "in-gpu0": {GPU: 1}}},
        {"not in a required aggregate (group 1)": 1},
    ),
    Case(
        "isolate-needs-distinct-providers",
        [
            host("one-gpu", children=gpus("one-gpu", "CUSTOM_T4", vgpus=4)),
            host("two-gpus", children=gpus("two-gpus", "CUSTOM_T4", "CUSTOM_T4")),
        ],
        {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "isolate"},
        {"two-gpus": {"two-gpus": BASE, "two-gpus-gpu0": {GPU: 1}, "two-gpus-gpu1": {GPU: 1}}},
        {reasons.GROUPS_DO_NOT_FIT: 1},
    ),
    Case(
        "isolate-places-the-particular-group-first",
        [host("h", children=gpus("h", "CUSTOM_A", "CUSTOM_B"))],
        {
            "resources1:VGPU": "1",
            "resources2:VGPU": "1",
            "trait2:CUSTOM_A": "required",
            "group_policy": "isolate",
        },
        {"h": {"h": BASE, "h-gpu0": {GPU: 1}, "h-gpu1": {GPU: 1}}},
    ),
    Case(
        "policy-none-shares-a-provider",
        [host("one-gpu", children=gpus("one-gpu", "CUSTOM_T4", vgpus=4))],
        {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "none"},
        {"one-gpu": {"one-gpu": BASE, "one-gpu-gpu0": {GPU: 2}}},
    ),
    Case(
        "policy-none-adds-up-the-shared-amounts",
        [host("small-gpu", children=gpus("small-gpu", "CUSTOM_T4", vgpus=1))],
        {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "none"},
        {},
        {reasons.GROUPS_DO_NOT_FIT: 1},
    ),
    Case(
        "numbered-group-of-root-resources-adds-to-the-unsuffixed",
        [host("h", vcpus=2), host("big", vcpus=4)],
        {"resources1:VCPU": "2"},
        {"big": {"big": {**BASE, "VCPU": 3}}},
        {reasons.GROUPS_DO_NOT_FIT: 1},
    ),
    Case(
        "numbered-group-insufficient-is-named",
        [host("h", children=gpus("h", "CUSTOM_T4", used=2))],
        {"resources1:VGPU": "1"},
        {},
        {"insufficient VGPU (group 1)": 1},
    ),
]


def by_name(view, placement) -> dict[str, dict[str, dict[str, int]]]:  # type: ignore[no-untyped-def]
    names = {uuid: name for name, uuid in zip(view.names, view.uuids, strict=True)}
    names.update({uuid_of(f"{n}-gpu{i}"): f"{n}-gpu{i}" for n in view.names for i in range(4)})
    return {
        view.names[int(h)]: {
            names[rp]: amounts for rp, amounts in placement.allocations(view, at).items()
        }
        for at, h in enumerate(placement.hosts)
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_candidate_step(case: Case) -> None:
    view = view_of(*case.hosts, aggregates=case.aggregates)
    counted: dict[str, int] = {}
    request = spec(extra_specs=case.extra_specs).resource_request
    placement = place(
        view,
        request,
        reject=lambda r, n: counted.__setitem__(r, counted.get(r, 0) + n) if n else None,
    )
    assert by_name(view, placement) == case.placed
    assert counted == case.reasons


def test_a_subset_of_hosts_keeps_its_order() -> None:
    view = view_of(*(host(f"h{i}") for i in range(5)))
    placement = place(view, spec().resource_request, np.array([4, 1, 3]))
    assert placement.hosts.tolist() == [4, 1, 3]


# --- through the engine: the cut, disabled hosts, nested claims ----------------------


def test_randomised_cut_never_starves_the_few_hosts_that_can_serve() -> None:
    hosts = [host(f"plain{i}") for i in range(500)] + [
        host(f"avx{i}", traits=["HW_CPU_X86_AVX512F"]) for i in range(3)
    ]
    eng = engine(HookedStore(hosts), max_placement_results=10, randomize_candidates=True)
    for n in range(20):
        result = eng.schedule(
            f"req{n}",
            spec(extra_specs={"trait:HW_CPU_X86_AVX512F": "required"}),
            [uuid_of(f"i{n}")],
            claim=False,
        )
        assert result.traces[0].host in {"avx0", "avx1", "avx2"}
        assert result.traces[0].reasons == {"missing trait HW_CPU_X86_AVX512F": 500}


@pytest.mark.parametrize("randomize", [False, True], ids=["in-order", "randomised"])
def test_disabled_hosts_go_before_the_cut(randomize: bool) -> None:
    # The trap: the first 50 hosts are disabled; a cut of 5 taken before
    # removing them would leave no host at all.
    hosts = [host(f"off{i:02d}", disabled=True) for i in range(50)] + [host("on")]
    result = engine(
        HookedStore(hosts), max_placement_results=5, randomize_candidates=randomize
    ).schedule("req", spec(), [uuid_of("i1")], claim=False)
    assert result.traces[0].host == "on"
    assert result.traces[0].reasons == {reasons.DISABLED: 50}


def test_without_the_status_filter_disabled_hosts_reach_the_compute_filter() -> None:
    hosts = [host(f"off{i:02d}", disabled=True) for i in range(50)] + [host("on")]
    eng = engine(HookedStore(hosts), max_placement_results=5, compute_status_filter=False)
    with pytest.raises(NoValidHost) as err:
        eng.select("req", spec(), [uuid_of("i1")])
    # Counted as "disabled", as the request filter would have counted them.
    assert err.value.reasons == {reasons.OVER_LIMIT: 46, reasons.DISABLED: 5}


def test_nested_claim_lists_every_provider_and_the_root_is_the_selection() -> None:
    store = HookedStore([host("h", children=gpus("h", "CUSTOM_T4"))])
    [[selection]] = engine(store, max_attempts=1).select(
        "req", spec(extra_specs={"resources1:VGPU": "1"}), [uuid_of("i1")]
    )
    assert selection.provider_uuid == uuid_of("h")
    assert selection.allocation_request.allocations == {
        uuid_of("h"): BASE,
        uuid_of("h-gpu0"): {GPU: 1},
    }
    assert store.providers[uuid_of("h-gpu0")].usages == {GPU: 1}


def test_instances_of_one_request_see_each_other_on_children() -> None:
    # Each GPU child has room for one VGPU: the second instance must take the
    # other child, the third finds none.
    store = HookedStore([host("h", children=gpus("h", "CUSTOM_T4", "CUSTOM_T4", vgpus=1))])
    eng = engine(store, max_attempts=1)
    two = eng.select(
        "req",
        spec(extra_specs={"resources:VGPU": "1"}, num_instances=2),
        [uuid_of("i1"), uuid_of("i2")],
    )
    children = {rp for [s] in two for rp in s.allocation_request.allocations} - {uuid_of("h")}
    assert children == {uuid_of("h-gpu0"), uuid_of("h-gpu1")}
    with pytest.raises(NoValidHost) as err:
        eng.select("req2", spec(extra_specs={"resources:VGPU": "1"}), [uuid_of("i3")])
    assert err.value.reasons == {"insufficient VGPU": 1}


def test_dry_run_leaves_children_as_they_were() -> None:
    store = HookedStore([host("h", children=gpus("h", "CUSTOM_T4", vgpus=1))])
    eng = engine(store)
    eng.schedule("req", spec(extra_specs={"resources:VGPU": "1"}), [uuid_of("i1")], claim=False)
    assert eng.view.kid_used[eng.view.resource_classes.index(GPU)].tolist() == [0]
    assert store.consumers == {}


def test_alternates_carry_their_own_tree_allocations() -> None:
    store = HookedStore(
        [
            host(f"h{i}", used={MEMORY_MB: 1000 * i}, children=gpus(f"h{i}", "CUSTOM_T4"))
            for i in range(3)
        ]
    )
    [[primary, *alternates]] = engine(store, weighers=("RAMWeigher",)).select(
        "req", spec(extra_specs={"resources1:VGPU": "1"}), [uuid_of("i1")]
    )
    assert [s.host for s in (primary, *alternates)] == ["h0", "h1", "h2"]
    for s in alternates:
        assert set(s.allocation_request.allocations) == {
            uuid_of(s.host),
            uuid_of(f"{s.host}-gpu0"),
        }


def test_invalid_extra_specs_are_refused_before_anything_is_claimed() -> None:
    store = HookedStore([host("h")])
    with pytest.raises(InvalidRequest):
        engine(store).select("req", spec(extra_specs={"resources:VCPUS": "1"}), [uuid_of("i1")])
    assert store.consumers == {}


def test_a_claim_refused_on_a_child_rereads_the_child() -> None:
    store = HookedStore(
        [
            host("best", children=gpus("best", "CUSTOM_T4", vgpus=1)),
            host("second", used={MEMORY_MB: 1000}, children=gpus("second", "CUSTOM_T4", vgpus=1)),
        ]
    )
    eng = engine(store, weighers=("RAMWeigher",))
    eng.view.refresh(0.0)
    store.use("best-gpu0", {GPU: 1}, fed=False)  # another worker took it, unseen yet
    result = eng.schedule("req", spec(extra_specs={"resources1:VGPU": "1"}), [uuid_of("i1")])
    assert result.traces[0].host == "second"
    assert result.traces[0].conflicts == [("best", "CapacityExceeded")]
    assert len(result.selections[0]) == 1  # "best" is known to be full now: no alternate


@pytest.mark.parametrize(
    "extra_specs",
    [{"resources:VGPU": "1"}, {"resources1:VGPU": "1", "trait1:CUSTOM_A100": "required"}],
    ids=["split-over-the-tree", "numbered-group"],
)
def test_a_scan_stopped_at_the_cut_places_on_children_as_a_whole_scan(
    extra_specs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranges of 8 rows over 40 hosts, GPUs (used up on some) on every other
    # host: the trees' allocations, kid rows included, are those of a whole scan.
    monkeypatch.setattr("scheduler.engine.placement.FIRST_SPAN", 1)
    hosts = [
        host(f"h{i:02d}", children=gpus(f"h{i:02d}", "CUSTOM_T4", "CUSTOM_A100", used=i % 3))
        if i % 2
        else host(f"h{i:02d}")
        for i in range(40)
    ]
    eng = engine(HookedStore(hosts), max_placement_results=2, max_attempts=3)
    for n in range(6):
        asked, uuids = spec(extra_specs=extra_specs), [uuid_of(f"i{n}")]
        whole = eng.schedule(f"req{n}", asked, uuids, claim=False, all_hosts=True)
        early = eng.schedule(f"req{n}", asked, uuids)
        assert early.selections == whole.selections
        assert reasons.OVER_LIMIT in early.traces[0].reasons
