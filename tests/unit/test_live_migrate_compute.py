"""A live migration on the computes' side (the simulator on the in-memory
store, its casts to other hosts routed back into it): the walk's order, a
pre-check failing on either side (the claim released before the hand-back),
steps repeated, a delete in the middle; and the casts sent at RPC 1.5."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from compute_sim.hosts import HostShape, provider_uuid
from compute_sim.ledger import FAILED, LIVE, UNDER_WAY
from compute_sim.simulator import ComputeSimulator
from scheduler import rpc
from scheduler.objects import (
    DELETING,
    DELETING_TASK,
    MIGRATING,
    AllocationRequest,
    InstanceRecord,
    RequestSpec,
    Selection,
)
from tests.fixtures import rpc as rpc_fixtures
from tests.fixtures.rpc import spied
from tests.fixtures.simulator import CTXT, INSTANCE, MIGRATION, SPEC, selection
from tests.unit.factories import Recorded

#: The fake:// transport fixture, one per module.
transport = rpc_fixtures.transport


class Hosts:
    """A simulator of h1..h3 running INSTANCE on h1; its source parked on the
    migration and the instance's claim on h2, as the conductor leaves them."""

    def __init__(self, build_time: float = 0.0, **options: Any) -> None:
        from scheduler.store import MemoryStore

        self.store = MemoryStore()
        self.held_at_handback: list[bool] = []
        self.conductor = Recorded(live_migration_precheck_failed=self._note)
        self.compute = Recorded(
            check_can_live_migrate_source=self._to_source,
            post_live_migration_at_destination=self._to_destination,
        )
        self.sim = ComputeSimulator(
            self.store,
            self.conductor,  # type: ignore[arg-type]
            ["h1", "h2", "h3"],
            "sim",
            HostShape(),
            build_time=build_time,
            compute=self.compute,  # type: ignore[arg-type]
            **options,
        )
        self.sim.register()
        self.claim(INSTANCE, "h1")
        self.store.create_instances([InstanceRecord(INSTANCE, request_spec=SPEC.to_primitive())])
        self.sim.build_and_run_instance(
            CTXT, INSTANCE, SPEC.to_primitive(), selection("h1").to_primitive(), []
        )
        self.wait("build_succeeded")
        assert self.store.move_allocations(INSTANCE, MIGRATION)
        self.claim(INSTANCE, "h2")
        self.store.update_instance(
            INSTANCE, state=MIGRATING, migration_uuid=MIGRATION, host="h1", source_host="h1"
        )

    def claim(self, consumer: str, host: str) -> None:
        self.store.claim(
            consumer, AllocationRequest({provider_uuid(host): SPEC.resources}, "p", "u")
        )

    def _note(self, *args: Any, **kwargs: Any) -> None:
        self.held_at_handback.append(self.store.get_consumer(INSTANCE) is not None)

    def _to_source(
        self,
        ctxt: Any,
        source: str,
        uuid: str,
        migration: str,
        spec: RequestSpec,
        chosen: Selection,
        alternates: list[Selection],
        block: bool,
    ) -> None:
        self.sim.check_can_live_migrate_source(
            ctxt,
            uuid,
            migration,
            spec.to_primitive(),
            chosen.to_primitive(),
            [a.to_primitive() for a in alternates],
            source,
            block,
        )

    def _to_destination(self, ctxt: Any, chosen: Selection, uuid: str, migration: str) -> None:
        self.sim.post_live_migration_at_destination(ctxt, uuid, migration, chosen.to_primitive())

    def check(self, dest: str = "h2") -> None:
        self.sim.check_can_live_migrate_destination(
            CTXT,
            INSTANCE,
            MIGRATION,
            SPEC.to_primitive(),
            selection(dest).to_primitive(),
            [selection("h3").to_primitive()],
            "h1",
            False,
        )

    def wait_step(self, side: str, step: str) -> None:
        """Until the migration to h2 reached ``step`` on its ``side``."""
        deadline = time.monotonic() + 5
        while self.sim.ledger.get(INSTANCE, (LIVE, MIGRATION, "h2", side)) != step:
            assert time.monotonic() < deadline, self.sim.ledger.steps_of(INSTANCE)
            time.sleep(0.01)

    def wait(self, name: str, count: int = 1) -> None:
        deadline = time.monotonic() + 5
        while self.conductor.names.count(name) < count:
            assert time.monotonic() < deadline, f"no {name}: {self.conductor.names}"
            time.sleep(0.01)


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Hosts] = []

    def build(*args: Any, **kwargs: Any) -> Hosts:
        made.append(Hosts(*args, **kwargs))
        return made[-1]

    yield build
    for hosts in made:
        hosts.sim.stop()


def test_the_walk_checks_both_sides_then_moves_the_vm_and_tells_the_conductor(
    make: Any,
) -> None:
    hosts = make()
    assert hosts.sim.hosts_running(INSTANCE) == ["h1"]

    hosts.check()
    hosts.wait("live_migrated")

    assert hosts.compute.names == [
        "check_can_live_migrate_source",
        "post_live_migration_at_destination",
    ]
    assert hosts.conductor.names == ["build_succeeded", "live_migrated"]
    (_, uuid, migration, host, node, zone), _ = hosts.conductor.last("live_migrated")
    assert (uuid, migration, host, node, zone) == (INSTANCE, MIGRATION, "h2", "h2", None)
    assert hosts.sim.hosts_running(INSTANCE) == ["h2"]
    # The allocations are the conductor's to settle: nothing released here.
    assert hosts.store.get_consumer(INSTANCE) is not None
    assert hosts.store.get_consumer(MIGRATION) is not None


@pytest.mark.parametrize(
    "options, side",
    [
        pytest.param({"live_migration_fail_hosts": ["h2"]}, "destination", id="destination"),
        pytest.param({"live_migration_fail_hosts": ["h1"]}, "source", id="source"),
        pytest.param({"live_migration_fail_rate": 1.0}, "destination", id="fail-rate"),
    ],
)
def test_a_failed_pre_check_releases_the_claim_then_hands_back(
    make: Any, options: dict[str, Any], side: str
) -> None:
    hosts = make(**options)

    hosts.check()
    hosts.wait("live_migration_precheck_failed")

    assert hosts.held_at_handback == [False]  # released before the hand-back
    (_, uuid, migration, _, failed, reason, alternates), _ = hosts.conductor.last(
        "live_migration_precheck_failed"
    )
    assert (uuid, migration, failed) == (INSTANCE, MIGRATION, "h2")
    assert side in str(reason)
    assert [a.host for a in alternates] == ["h3"]  # type: ignore[attr-defined]
    assert hosts.sim.hosts_running(INSTANCE) == ["h1"]
    assert hosts.store.get_consumer(MIGRATION) is not None  # the source is the conductor's
    assert "live_migrated" not in hosts.conductor.names


def test_a_repeated_check_under_way_is_ignored_and_one_landed_reports_again(
    make: Any,
) -> None:
    hosts = make(build_time=0.2)
    hosts.check()
    hosts.check()  # a duplicate while the first is under way
    hosts.wait("live_migrated")
    time.sleep(0.3)
    assert hosts.conductor.names.count("live_migrated") == 1

    hosts.check()  # a re-drive after it landed: the report may have been lost

    assert hosts.conductor.names.count("live_migrated") == 2
    assert hosts.sim.hosts_running(INSTANCE) == ["h2"]
    assert hosts.compute.names.count("check_can_live_migrate_source") == 1


def test_a_delete_in_the_middle_leaves_no_vm_and_reports_nothing(make: Any) -> None:
    hosts = make(build_time=0.2)
    hosts.check()
    hosts.store.update_instance(
        INSTANCE, state=DELETING, task_state=DELETING_TASK, pending_hosts=("h1", "h2")
    )
    for host in ("h1", "h2"):
        hosts.sim.terminate_instance(CTXT, INSTANCE, host)
    hosts.wait_step("dest", FAILED)  # the check in flight ended

    assert hosts.sim.hosts_running(INSTANCE) == []
    assert [n for n in hosts.conductor.names if n != "build_succeeded"] == [
        "instance_terminated",
        "instance_terminated",
    ]
    assert hosts.compute.names == []


def test_a_live_migration_step_for_a_foreign_host_is_refused(make: Any) -> None:
    hosts = make()
    hosts.check(dest="elsewhere")
    assert hosts.compute.names == [] and hosts.conductor.names == ["build_succeeded"]


def test_the_live_migration_casts_are_sent_at_1_5_alone(transport: Any) -> None:
    """So an older compute or conductor refuses them by their version, and still
    serves every other cast as before."""
    compute = rpc.ComputeClient(transport, lambda host: "sim-1")
    spy = spied(compute)
    spec, chosen = SPEC, selection("h2")
    compute.check_can_live_migrate_destination(
        CTXT, INSTANCE, MIGRATION, spec, chosen, [], "h1", False
    )
    compute.check_can_live_migrate_source(CTXT, "h1", INSTANCE, MIGRATION, spec, chosen, [], True)
    compute.post_live_migration_at_destination(CTXT, chosen, INSTANCE, MIGRATION)
    compute.terminate_instance(CTXT, "h1", INSTANCE)
    conductor = rpc.ConductorClient(transport)
    conductor_spy = spied(conductor)
    conductor.live_migration_precheck_failed(CTXT, INSTANCE, MIGRATION, spec, "h2", "r", [])
    conductor.live_migrated(CTXT, INSTANCE, MIGRATION, "h2", "h2", "east")
    conductor.instance_terminated(CTXT, INSTANCE, "h1")
    assert [(v, m) for v, m, _ in spy.sent] == [
        ("1.5", "check_can_live_migrate_destination"),
        ("1.5", "check_can_live_migrate_source"),
        ("1.5", "post_live_migration_at_destination"),
        ("1.3", "terminate_instance"),
    ]
    assert [(v, m) for v, m, _ in conductor_spy.sent] == [
        ("1.5", "live_migration_precheck_failed"),
        ("1.5", "live_migrated"),
        ("1.3", "instance_terminated"),
    ]
    assert ComputeSimulator.target.version == rpc.ComputeClient.VERSION


def test_a_live_migration_given_up_meanwhile_is_abandoned_on_the_source(make: Any) -> None:
    hosts = make(build_time=0.2)
    hosts.check()
    hosts.wait_step("source", UNDER_WAY)  # the source's check under way
    # The conductor gives it up: the source's allocation back to the instance.
    assert hosts.store.move_allocations(MIGRATION, INSTANCE, replace=True)
    hosts.wait_step("source", FAILED)

    assert hosts.sim.hosts_running(INSTANCE) == ["h1"]
    assert hosts.compute.names == ["check_can_live_migrate_source"]
    assert "live_migrated" not in hosts.conductor.names
