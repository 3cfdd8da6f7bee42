"""A delete end to end on the in-memory store: the conductor's Deleter and
endpoint, the compute simulator, and the casts between them held on a wire
so that each test delivers them in the order it is about (the delete before
the build reaches the compute, during it, after it; during a resize; twice;
an unknown uuid; a host that never answers)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from compute_sim.hosts import HostShape, provider_uuid
from compute_sim.simulator import ComputeSimulator
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.records import ConductorSettings
from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.resize import Resizer
from scheduler.engine.capabilities import IO_OPS_STAT
from scheduler.exceptions import ConsumerDeleted, InstanceNotFound
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    RESIZE_PREP,
    RESIZING,
    AllocationRequest,
    InstanceRecord,
    migration_uuid_for,
)
from scheduler.rpc import RequestContext
from scheduler.store import GroupClaim, MemoryStore
from tests.fixtures.simulator import SPEC, selection
from tests.unit.factories import NOW, Recorded, uuid_of

CTXT = RequestContext(request_id="req-build")
SETTINGS = ConductorSettings(delete_timeout=30, deleted_retention=600, max_redrives=2)
GROUP = uuid_of("group")


class Wire:
    """Holds every cast; :meth:`deliver` hands the first one of a method to its
    receiver (a test decides the order)."""

    def __init__(self) -> None:
        self.held: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.receivers: dict[str, Any] = {}

    def client(self) -> Any:
        wire = self

        class Client:
            def __getattr__(self, method: str) -> Any:
                return lambda *args, **kwargs: wire.held.append((method, args, kwargs))

        return Client()

    def pending(self) -> list[str]:
        return [method for method, _, _ in self.held]

    def deliver(self, method: str) -> None:
        index = self.pending().index(method)
        _, args, kwargs = self.held.pop(index)
        self.receivers[method](*args, **kwargs)

    def deliver_all(self, method: str) -> None:
        while method in self.pending():
            self.deliver(method)


class Cloud:
    """Hosts h1..h3 of one simulator, a conductor, and the wire between them."""

    def __init__(self, build_time: float = 0.05) -> None:
        self.store = MemoryStore(clock=lambda: NOW)
        self.wire = Wire()
        self.sim = ComputeSimulator(
            self.store,
            self.wire.client(),
            ["h1", "h2", "h3"],
            "sim",
            HostShape(),
            build_time=build_time,
            compute=self.wire.client(),
        )
        self.sim.register()
        compute = self.wire.client()
        self.endpoint = ConductorEndpoint(self.store, compute, None, SETTINGS, clock=lambda: NOW)
        self.deleter = Deleter(self.store, compute, SETTINGS, clock=lambda: NOW)
        self.wire.receivers = {
            # compute -> conductor
            "build_succeeded": self.endpoint.build_succeeded,
            "instance_terminated": self.endpoint.instance_terminated,
            "resize_result": self.endpoint.resize_result,
            "reschedule": self.endpoint.reschedule,
            # conductor or compute -> a compute (host first, as the client takes it)
            "terminate_instance": lambda ctxt, host, uuid: self.sim.terminate_instance(
                ctxt, uuid, host
            ),
            "resize_instance": lambda ctxt, source, *args: self.sim.resize_instance(ctxt, *args),
            "finish_resize": lambda ctxt, dest, node, uuid, migration: self.sim.finish_resize(
                ctxt, uuid, migration, dest, node
            ),
        }

    def booting(self, name: str = "i1") -> str:
        uuid = uuid_of(name)
        self.store.create_instances(
            [InstanceRecord(uuid=uuid, request_spec=SPEC.to_primitive(), deadline=NOW + 60)]
        )
        return uuid

    def claim(self, consumer: str, host: str) -> None:
        self.store.claim(
            consumer,
            AllocationRequest({provider_uuid(host): SPEC.resources}, "p", "u"),
            GroupClaim(GROUP, "anti-affinity", host),
        )

    def build(self, uuid: str, host: str) -> None:
        """The scheduler's cast reaches the compute."""
        self.sim.build_and_run_instance(
            CTXT, uuid, SPEC.to_primitive(), selection(host).to_primitive(), []
        )

    def io_ops(self, host: str) -> int:
        (service,) = [s for s in self.store.list_services() if s.host == host]
        return int(service.stats.get(IO_OPS_STAT, 0))

    def settle(self, host: str) -> None:
        """Wait until nothing is in progress on ``host`` (a build or prep finished)."""
        deadline = time.monotonic() + 5
        while self.io_ops(host):
            assert time.monotonic() < deadline, f"{host} still busy"
            time.sleep(0.01)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + 5
        while method not in self.wire.pending():
            assert time.monotonic() < deadline, f"no {method}: {self.wire.pending()}"
            time.sleep(0.01)

    def assert_gone(self, uuid: str) -> None:
        """DELETED, no claim for it or its migration, in no group, running nowhere."""
        record = self.store.get_instance(uuid)
        assert record.state == DELETED, record
        assert self.store.list_consumers() == []
        assert self.store.group_hosts(GROUP) == {}
        assert self.sim.hosts_running(uuid) == []
        for host in ("h1", "h2", "h3"):
            assert self.store.get_provider(provider_uuid(host)).usages == {}


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    made = Cloud()
    yield made
    made.sim.stop()


# --- the orders of a delete and a build ------------------------------------------------


def test_delete_before_the_instance_is_claimed_finishes_at_once_and_fences(cloud: Cloud) -> None:
    uuid = cloud.booting()
    record = cloud.deleter.delete(uuid)
    assert record.state == DELETED and cloud.wire.pending() == []  # no host to ask
    with pytest.raises(ConsumerDeleted):  # the scheduler's claim, arriving late
        cloud.claim(uuid, "h1")
    cloud.assert_gone(uuid)


def test_delete_before_the_build_reaches_the_compute(cloud: Cloud) -> None:
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")  # the scheduler claimed; its build cast is on its way
    record = cloud.deleter.delete(uuid)
    assert (record.state, record.pending_hosts) == (DELETING, ("h1",))
    cloud.wire.deliver("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    cloud.assert_gone(uuid)
    cloud.build(uuid, "h1")  # the build arrives last: ignored
    cloud.settle("h1")
    assert "build_succeeded" not in cloud.wire.pending()
    cloud.assert_gone(uuid)


def test_delete_while_the_compute_builds() -> None:
    slow = Cloud(build_time=0.3)
    try:
        uuid = slow.booting()
        slow.claim(uuid, "h1")
        slow.build(uuid, "h1")  # under way
        slow.deleter.delete(uuid)
        slow.wire.deliver("terminate_instance")
        slow.wire.deliver("instance_terminated")
        slow.settle("h1")  # the build ends, cancelled: no VM, no report
        assert slow.wire.pending() == []
        slow.assert_gone(uuid)
    finally:
        slow.sim.stop()


@pytest.mark.parametrize("reported_first", [True, False], ids=["active", "result-in-flight"])
def test_delete_after_the_build(cloud: Cloud, reported_first: bool) -> None:
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")
    cloud.build(uuid, "h1")
    cloud.wait_for("build_succeeded")
    assert cloud.sim.hosts_running(uuid) == ["h1"]
    if reported_first:
        cloud.wire.deliver("build_succeeded")
        assert cloud.store.get_instance(uuid).state == ACTIVE
    cloud.deleter.delete(uuid)
    cloud.wire.deliver("terminate_instance")
    assert cloud.sim.hosts_running(uuid) == []  # the VM destroyed
    cloud.wire.deliver("instance_terminated")
    cloud.wire.deliver_all("build_succeeded")  # a late result changes nothing
    cloud.assert_gone(uuid)


def test_answers_in_any_order_and_repeated_finish_the_delete_once(cloud: Cloud) -> None:
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")
    cloud.store.update_instance(uuid, host="h2")  # a reschedule's last host
    cloud.deleter.delete(uuid)
    assert cloud.store.get_instance(uuid).pending_hosts == ("h2", "h1")
    cloud.wire.deliver("terminate_instance")  # h2 first
    cloud.wire.deliver("instance_terminated")
    assert cloud.store.get_instance(uuid).state == DELETING
    assert cloud.store.get_consumer(uuid) is not None  # h1 has not answered
    cloud.wire.deliver("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    cloud.assert_gone(uuid)
    # A re-sent terminate, late: refused (the record waits on no host), no answer.
    cloud.sim.terminate_instance(CTXT, uuid, "h1")
    assert "instance_terminated" not in cloud.wire.pending()
    cloud.assert_gone(uuid)


# --- during a resize -------------------------------------------------------------------


def resizing(cloud: Cloud) -> tuple[str, str]:
    """i1 ACTIVE on h1 (its VM there), being resized to h2: the source parked on
    the migration, h2 claimed for the instance, prep_resize on its way to h2."""
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")
    cloud.build(uuid, "h1")
    cloud.wait_for("build_succeeded")
    cloud.wire.deliver("build_succeeded")
    migration = migration_uuid_for(uuid, "req-resize")
    cloud.store.update_instance(
        uuid,
        state=RESIZING,
        task_state=RESIZE_PREP,
        migration_uuid=migration,
        source_host="h1",
        source_node="h1",
    )
    assert cloud.store.move_allocations(uuid, migration)
    cloud.claim(uuid, "h2")
    return uuid, migration


def prep(cloud: Cloud, uuid: str, migration: str) -> None:
    cloud.sim.prep_resize(
        CTXT,
        uuid,
        migration,
        SPEC.flavor.to_primitive(),
        SPEC.to_primitive(),
        selection("h2").to_primitive(),
        [],
    )


@pytest.mark.parametrize("step", ["before-prep", "after-prep", "after-finish"])
def test_delete_during_a_resize_cancels_it_and_releases_both_claims(
    cloud: Cloud, step: str
) -> None:
    uuid, migration = resizing(cloud)
    if step != "before-prep":
        prep(cloud, uuid, migration)
        cloud.wait_for("resize_instance")
        cloud.wire.deliver("resize_instance")  # the source hands over
        cloud.wait_for("finish_resize")
    if step == "after-finish":
        cloud.wire.deliver("finish_resize")
        assert cloud.sim.hosts_running(uuid) == ["h2"]
    record = cloud.deleter.delete(uuid)
    assert set(record.pending_hosts) == {"h1", "h2"}
    cloud.wire.deliver_all("terminate_instance")
    cloud.wire.deliver_all("instance_terminated")
    cloud.assert_gone(uuid)
    # Whatever of the resize was still in flight arrives now: it makes nothing.
    if step == "before-prep":
        prep(cloud, uuid, migration)
        cloud.settle("h2")
    cloud.wire.deliver_all("finish_resize")
    cloud.wire.deliver_all("resize_result")
    assert cloud.wire.pending() == []
    cloud.assert_gone(uuid)


# --- twice, unknown, a host that never answers --------------------------------------------


def test_deleting_twice_is_a_no_op(cloud: Cloud) -> None:
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")
    first = cloud.deleter.delete(uuid)
    assert cloud.deleter.delete(uuid) == first  # DELETING: nothing sent again
    assert cloud.wire.pending() == ["terminate_instance"]
    cloud.wire.deliver("terminate_instance")
    cloud.wire.deliver("instance_terminated")
    deleted = cloud.store.get_instance(uuid)
    assert cloud.deleter.delete(uuid) == deleted and cloud.wire.pending() == []


def test_deleting_an_unknown_instance_is_an_error_and_changes_nothing(cloud: Cloud) -> None:
    live = cloud.booting()
    before = (cloud.store.list_instances(), cloud.store.list_consumers())
    with pytest.raises(InstanceNotFound):
        cloud.deleter.delete(uuid_of("nobody"))
    assert (cloud.store.list_instances(), cloud.store.list_consumers()) == before
    assert cloud.store.get_instance(live).state == BUILDING and cloud.wire.pending() == []


def test_the_sweeper_resends_the_terminate_then_finishes_without_the_host(
    cloud: Cloud,
) -> None:
    now = [NOW]
    uuid = cloud.booting()
    cloud.claim(uuid, "h1")
    cloud.deleter.delete(uuid)
    cloud.wire.held.clear()  # the terminate is lost
    sweeper = Sweeper(
        cloud.store,
        Recorded(),  # type: ignore[arg-type]
        Resizer(cloud.store, Recorded(), Recorded()),  # type: ignore[arg-type]
        SETTINGS,
        clock=lambda: now[0],
        deleter=Deleter(cloud.store, cloud.wire.client(), SETTINGS, clock=lambda: now[0]),
    )
    for redrive in range(SETTINGS.max_redrives):
        now[0] += SETTINGS.delete_timeout + 1
        assert sweeper.sweep() == 1
        assert cloud.wire.pending() == ["terminate_instance"]
        cloud.wire.held.clear()
        assert cloud.store.get_instance(uuid).redrives == redrive + 1
    now[0] += SETTINGS.delete_timeout + 1
    sweeper.sweep()
    assert sweeper.counts["delete_done_here"] == 1
    assert cloud.store.get_instance(uuid).state == DELETED
    assert cloud.store.list_consumers() == []
