"""compute-sim reports providers, traits, aggregates and GPU children, and on a
generation conflict re-reads and decides (never repeats blindly)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compute_sim.hosts import (
    AggregateSpec,
    HostShape,
    Topology,
    aggregate_uuid,
    gpu_name,
    provider_uuid,
    traits_to_write,
)
from compute_sim.simulator import ComputeSimulator
from scheduler.exceptions import GenerationConflict
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.store import Inventory, MemoryStore, Service, Store


class RacingStore(MemoryStore):
    """A store where another writer strikes just before chosen writes.

    ``races[method]`` is a list of callables; each call of that method first
    pops and runs one (the other writer), then does the write itself, which
    then meets the other writer's newer generation.
    """

    def __init__(self) -> None:
        super().__init__()
        self.races: dict[str, list[Callable[[Store], Any]]] = {}
        self.calls: dict[str, list[int]] = {}

    def _write(self, method: str, uuid: str, generation: int, value: Any) -> int:
        self.calls.setdefault(method, []).append(generation)
        if self.races.get(method):
            self.races[method].pop(0)(self)
        return getattr(super(), method)(uuid, generation, value)

    def set_inventory(self, uuid: str, generation: int, inventories: Any) -> int:
        return self._write("set_inventory", uuid, generation, inventories)

    def set_traits(self, uuid: str, generation: int, traits: Any) -> int:
        return self._write("set_traits", uuid, generation, traits)

    def set_aggregates(self, uuid: str, generation: int, aggregates: Any) -> int:
        return self._write("set_aggregates", uuid, generation, aggregates)


@pytest.fixture
def sims() -> Iterator[Callable[..., ComputeSimulator]]:
    made: list[ComputeSimulator] = []

    def make(store: Store, hosts: int = 1, **topology: Any) -> ComputeSimulator:
        sim = ComputeSimulator(
            store,
            None,
            [f"c-{i}" for i in range(hosts)],  # type: ignore[arg-type]
            "sim",
            HostShape(),
            topology=Topology(**topology),
        )
        made.append(sim)
        return sim

    yield make
    for sim in made:
        sim.stop()


def disable(host: str) -> Callable[[Store], None]:
    def strike(store: Store) -> None:
        store.register_services([Service(host=host, rpc_server="sim")])
        store.set_service_disabled(host, True, "maintenance")

    return strike


def test_registers_traits_aggregates_and_gpu_children(
    sims: Callable[..., ComputeSimulator],
) -> None:
    store = MemoryStore()
    sims(
        store,
        hosts=3,
        traits=("HW_CPU_X86_AVX512F",),
        traits_on=2,
        aggregates=(AggregateSpec.parse("gold:filter_tenant_id=p1, ssd=true"),),
        vgpus_per_gpu=4,
        gpus_per_host=2,
        gpu_traits=("CUSTOM_NVIDIA_11",),
    ).register()
    roots = [store.get_provider(provider_uuid(f"c-{i}")) for i in range(3)]
    assert [r.traits for r in roots] == [{"HW_CPU_X86_AVX512F"}] * 2 + [frozenset()]
    assert all(r.aggregates == {aggregate_uuid("gold")} for r in roots)
    [gold] = store.list_aggregates()
    assert dict(gold.metadata) == {"filter_tenant_id": "p1", "ssd": "true"}
    gpu = store.get_provider(provider_uuid(gpu_name("c-0", 1)))
    assert (gpu.parent_uuid, gpu.root_uuid) == (roots[0].uuid, roots[0].uuid)
    assert dict(gpu.inventories) == {"VGPU": Inventory(total=4)}
    assert gpu.traits == {"CUSTOM_NVIDIA_11"}


def test_a_restarted_simulator_leaves_a_host_an_admin_disabled_disabled(
    sims: Callable[..., ComputeSimulator],
) -> None:
    store = MemoryStore()
    sims(store, traits=("HW_CPU_X86_AVX2",)).register()
    store.set_service_disabled("c-0", True, "maintenance")
    sims(store, traits=("HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F")).register()  # restarted
    service = store.get_service("c-0")
    assert service is not None
    assert (service.disabled, service.disabled_reason) == (True, "maintenance")
    p = store.get_provider(provider_uuid("c-0"))
    assert p.traits == {"HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F", COMPUTE_STATUS_DISABLED}


def test_a_conflict_on_traits_rereads_and_keeps_the_other_writers_change(
    sims: Callable[..., ComputeSimulator],
) -> None:
    store = RacingStore()
    store.races["set_traits"] = [disable("c-0")]
    sims(store, traits=("HW_CPU_X86_AVX2",)).register()
    p = store.get_provider(provider_uuid("c-0"))
    assert p.traits == {"HW_CPU_X86_AVX2", COMPUTE_STATUS_DISABLED}
    stale, fresh = store.calls["set_traits"]
    assert fresh == stale + 1  # the second write was on the re-read generation


def test_a_conflict_with_a_writer_who_wrote_the_same_is_not_repeated(
    sims: Callable[..., ComputeSimulator],
) -> None:
    store = RacingStore()
    same = HostShape().inventories()

    def operator(s: Store) -> None:
        p = s.get_provider(provider_uuid("c-0"))
        MemoryStore.set_inventory(s, p.uuid, p.generation, same)  # type: ignore[arg-type]

    store.races["set_inventory"] = [operator]
    sims(store).register()
    assert len(store.calls["set_inventory"]) == 1  # re-read: nothing left to write
    assert dict(store.get_provider(provider_uuid("c-0")).inventories) == same


@pytest.mark.parametrize(
    ("current", "reported", "written"),
    [
        pytest.param(set(), {"HW_A"}, {"HW_A"}, id="fresh"),
        pytest.param({"HW_OLD", "HW_A"}, {"HW_A"}, {"HW_A"}, id="drops-a-standard-trait-it-owned"),
        pytest.param(
            {"CUSTOM_OPERATOR"},
            {"HW_A"},
            {"HW_A", "CUSTOM_OPERATOR"},
            id="keeps-an-operator's-custom-trait",
        ),
        pytest.param(
            {COMPUTE_STATUS_DISABLED},
            {"HW_A"},
            {"HW_A", COMPUTE_STATUS_DISABLED},
            id="keeps-the-status-trait",
        ),
    ],
)
def test_traits_to_write(current: set[str], reported: set[str], written: set[str]) -> None:
    assert traits_to_write(frozenset(current), frozenset(reported)) == written


def test_gives_up_after_bounded_conflicts(sims: Callable[..., ComputeSimulator]) -> None:
    store = RacingStore()

    def bump(s: Store) -> None:
        p = s.get_provider(provider_uuid("c-0"))
        MemoryStore.set_aggregates(s, p.uuid, p.generation, ["someone-else"])  # type: ignore[arg-type]

    store.races["set_aggregates"] = [bump] * 10
    sim = sims(store, aggregates=(AggregateSpec("gold", {}),))
    with pytest.raises(GenerationConflict):
        sim.register()
    assert len(store.calls["set_aggregates"]) == 5


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        pytest.param("gold", AggregateSpec("gold", {}), id="name"),
        pytest.param(
            "t:filter_tenant_id=p1,x=y",
            AggregateSpec("t", {"filter_tenant_id": "p1", "x": "y"}),
            id="metadata",
        ),
        pytest.param(
            "gpu:trait:CUSTOM_GPU=required",
            AggregateSpec("gpu", {"trait:CUSTOM_GPU": "required"}),
            id="trait-key",
        ),
    ],
)
def test_aggregate_spec(text: str, parsed: AggregateSpec) -> None:
    assert AggregateSpec.parse(text) == parsed


@pytest.mark.parametrize("text", [":a=b", "x:novalue"], ids=["no-name", "no-equals"])
def test_aggregate_spec_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        AggregateSpec.parse(text)
