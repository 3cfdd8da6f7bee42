"""A build's success written to the store by the compute itself
(``build_results = store``): the record goes ACTIVE by the conductor's rule
with no cast, and a store that cannot be written loses nothing (the
re-driven build reports again)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from compute_sim.hosts import HostShape
from compute_sim.ops.build import RESULTS_BY_CAST, RESULTS_IN_STORE
from compute_sim.simulator import ComputeSimulator
from scheduler.engine.capabilities import IO_OPS_STAT
from scheduler.engine.hostview import HostView
from scheduler.exceptions import StoreError
from scheduler.objects import ACTIVE, BUILDING, InstanceRecord
from scheduler.rpc import RequestContext
from scheduler.store import MemoryStore
from tests.fixtures.simulator import selection
from tests.unit.factories import Recorded, settings, spec, uuid_of

SPEC = spec(vcpus=1, ram=1024, disk=10)
CTXT = RequestContext(request_id="req-results")
INSTANCE = uuid_of("instance")


class FlakyStore(MemoryStore):
    """Refuses the record's updates (a build's result among them) while ``down``."""

    down = False

    def update_instance(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StoreError("store unreachable")
        return super().update_instance(*args, **kwargs)

    def mark_built(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StoreError("store unreachable")
        return super().mark_built(*args, **kwargs)


class Hosts:
    def __init__(self) -> None:
        self.store = FlakyStore()
        self.conductor = Recorded()
        self.sim = ComputeSimulator(
            self.store,
            self.conductor,  # type: ignore[arg-type]
            ["h1", "h2"],
            "sim",
            HostShape(),
            build_time=0.0,
            build_results=RESULTS_IN_STORE,
        )
        self.sim.register()
        self.store.create_instances(
            [InstanceRecord(INSTANCE, request_spec=SPEC.to_primitive(), request_id="req-results")]
        )

    def claim(self, host: str) -> None:
        self.store.claim(INSTANCE, selection(host, "east").allocation_request)

    def build(self, host: str) -> None:
        self.sim.build_and_run_instance(
            CTXT, INSTANCE, SPEC.to_primitive(), selection(host, "east").to_primitive(), []
        )

    def wait_built(self, count: int) -> None:
        deadline = time.monotonic() + 5
        while self.sim.builds_ok < count:
            assert time.monotonic() < deadline, "the build did not finish"
            time.sleep(0.01)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    made = Hosts()
    yield made
    made.sim.stop()


def test_the_record_goes_active_with_no_cast(hosts: Hosts) -> None:
    hosts.claim("h1")
    with capture_logs() as logs:
        hosts.build("h1")
        hosts.wait_built(1)
    record = hosts.store.get_instance(INSTANCE)
    assert (record.state, record.host, record.node) == (ACTIVE, "h1", "h1")
    assert record.availability_zone == "east" and record.attempts == 1
    assert record.deadline is None
    assert hosts.conductor.names == []
    assert [e["event"] for e in logs if e["event"] == "instance_active"] == ["instance_active"]


def test_an_unwritable_store_loses_nothing(hosts: Hosts) -> None:
    hosts.claim("h1")
    hosts.store.down = True
    with capture_logs() as logs:
        hosts.build("h1")
        hosts.wait_built(1)
    assert any(e["event"] == "build_result_not_recorded" for e in logs)
    assert hosts.store.get_instance(INSTANCE).state == BUILDING
    hosts.store.down = False
    hosts.build("h1")  # the conductor's re-drive: the same request, the same host
    deadline = time.monotonic() + 5
    while hosts.store.get_instance(INSTANCE).state != ACTIVE:
        assert time.monotonic() < deadline, "the repeated build did not report"
        time.sleep(0.01)
    assert hosts.sim.builds_ok == 1 and hosts.conductor.names == []


def test_results_by_cast_still_reach_the_conductor() -> None:
    store = MemoryStore()
    conductor = Recorded()
    sim = ComputeSimulator(
        store,
        conductor,  # type: ignore[arg-type]
        ["h1"],
        "sim",
        HostShape(),
        build_time=0.0,
        build_results=RESULTS_BY_CAST,
    )
    try:
        sim.register()
        store.create_instances([InstanceRecord(INSTANCE, request_spec=SPEC.to_primitive())])
        store.claim(INSTANCE, selection("h1").allocation_request)
        sim.build_and_run_instance(
            CTXT, INSTANCE, SPEC.to_primitive(), selection("h1").to_primitive(), []
        )
        deadline = time.monotonic() + 5
        while "build_succeeded" not in conductor.names:
            assert time.monotonic() < deadline, "no build_succeeded cast"
            time.sleep(0.01)
        assert store.get_instance(INSTANCE).state == BUILDING  # the conductor's to change
    finally:
        sim.stop()


# --- the hosts' stats, reported together ---------------------------------------------


class CountingStore(MemoryStore):
    """Records the hosts of each stats report."""

    def __init__(self) -> None:
        super().__init__()
        self.stats_reports: list[list[str]] = []

    def report_services(self, reports: Any) -> None:
        reports = list(reports)
        if all(r.stats is not None and r.capabilities is None for r in reports):
            self.stats_reports.append([r.host for r in reports])
        super().report_services(reports)


def io_ops(store: MemoryStore, host: str) -> int:
    (service,) = [s for s in store.list_services() if s.host == host]
    return int(service.stats.get(IO_OPS_STAT, 0))


@pytest.mark.parametrize("interval", [0.0, 0.3])
def test_stats_changed_within_the_interval_go_in_one_write(interval: float) -> None:
    store = CountingStore()
    sim = ComputeSimulator(
        store,
        Recorded(),  # type: ignore[arg-type]
        ["h1", "h2"],
        "sim",
        HostShape(),
        build_time=0.05,
        stats_interval=interval,
    )
    try:
        sim.register()
        store.stats_reports.clear()  # the registration's
        for n, host in enumerate(["h1", "h2"]):
            uuid = uuid_of(f"instance-{n}")
            store.create_instances([InstanceRecord(uuid, request_spec=SPEC.to_primitive())])
            store.claim(uuid, selection(host).allocation_request)
            sim.build_and_run_instance(
                CTXT, uuid, SPEC.to_primitive(), selection(host).to_primitive(), []
            )
        if interval:  # both builds under way, nothing said yet
            assert store.stats_reports == [] and io_ops(store, "h1") == 0
        else:
            assert store.stats_reports == [["h1"], ["h2"]] and io_ops(store, "h1") == 1
        deadline = time.monotonic() + 5
        while len(store.stats_reports) < (1 if interval else 4) or sim.builds_ok < 2:
            assert time.monotonic() < deadline, f"stats not reported: {store.stats_reports}"
            time.sleep(0.01)
        time.sleep(interval)
        # Each build's start and end: one write for both hosts, or four.
        assert store.stats_reports == (
            [["h1", "h2"]] if interval else [["h1"], ["h2"], ["h1"], ["h2"]]
        )
        assert (io_ops(store, "h1"), io_ops(store, "h2")) == (0, 0)
    finally:
        sim.stop()


def test_a_build_started_and_ended_within_the_interval_still_reaches_the_workers() -> None:
    """A worker counts a build it placed on a host as in progress until the
    host's next report reaches its view (Nova's consume_from_request). A build
    that starts and ends within one interval leaves the counters as they were,
    and the store feeds only a report that changed: the report must still
    change, or the worker counts the build as in progress for ever (and its
    I/O ops weigher steers every later boot away from the host)."""
    store = MemoryStore()
    sim = ComputeSimulator(
        store,
        Recorded(),  # type: ignore[arg-type]
        ["h1", "h2"],
        "sim",
        HostShape(),
        build_time=0.0,
        stats_interval=0.05,
    )
    try:
        sim.register()
        view = HostView(store, settings())
        view.refresh(time.time())
        row = view.index_of("h1")
        assert row is not None
        both = view.indices_of(["h1", "h2"])
        # Twice: the second build's report must differ from the first's too.
        for n in range(2):
            uuid = uuid_of(f"instance-{n}")
            store.create_instances([InstanceRecord(uuid, request_spec=SPEC.to_primitive())])
            store.claim(uuid, selection("h1").allocation_request)
            view.consume(row, {"VCPU": 1})  # the worker placed it there
            assert view.capabilities.io_ops(both).tolist() == [1, 0]
            sim.build_and_run_instance(
                CTXT, uuid, SPEC.to_primitive(), selection("h1").to_primitive(), []
            )
            deadline = time.monotonic() + 5
            while view.capabilities.io_ops(both).tolist() != [0, 0]:
                assert time.monotonic() < deadline, (
                    f"the view still counts the build: {view.capabilities.io_ops(both)}"
                )
                time.sleep(0.01)
                view.refresh(time.time())
            assert sim.builds_ok == n + 1
    finally:
        sim.stop()
