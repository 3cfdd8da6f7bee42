"""Shelve and unshelve on the in-memory store: the conductor's Shelver and
endpoint, the compute simulator, and the casts between them held on a wire
(delivered in the order a test is about: late, twice, never)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compute_sim.hosts import provider_uuid
from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.resize import Resizer
from conductor_stub.tasks.shelve import Shelver
from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    SCHEDULING,
    SHELVED_OFFLOADED,
    SHELVING,
    Destination,
    RequestSpec,
)
from scheduler.rpc import RequestContext
from tests.fixtures.cloud import GROUP, SETTINGS, Cloud
from tests.fixtures.simulator import SPEC, selection
from tests.unit.factories import NOW, Recorded


class ShelveCloud(Cloud):
    """The delete tests' cloud (:class:`Cloud`), with a shelver and its two casts wired."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        # The scheduler's answer to an unshelve: h1, claimed.
        self.scheduler = Recorded(select_destinations=[[selection("h1")]])
        self.shelver = Shelver(
            self.store,
            self.scheduler,  # type: ignore[arg-type]
            self.wire.client(),
            SETTINGS,
            clock=lambda: clock[0],
        )
        self.endpoint.shelver = self.shelver
        self.wire.receivers["shelve_offload_instance"] = lambda ctxt, host, uuid: (
            self.sim.shelve_offload_instance(ctxt, uuid, host)
        )
        self.wire.receivers["instance_shelved"] = self.endpoint.instance_shelved

    def active_on(self, host: str, name: str = "i1") -> str:
        uuid = self.booting(name)
        self.claim(uuid, host)
        self.build(uuid, host)
        self.wait_for("build_succeeded")
        self.wire.deliver("build_succeeded")
        assert self.store.get_instance(uuid).state == ACTIVE
        return uuid


@pytest.fixture
def now() -> list[float]:
    return [NOW]


@pytest.fixture
def cloud(now: list[float]) -> Iterator[ShelveCloud]:
    made = ShelveCloud(now)
    yield made
    made.sim.stop()


def test_shelve_destroys_the_vm_then_releases_then_offloads(cloud: ShelveCloud) -> None:
    uuid = cloud.active_on("h1")

    started = cloud.shelver.shelve(uuid)

    assert (started.state, cloud.wire.pending()) == (SHELVING, ["shelve_offload_instance"])
    assert cloud.store.get_consumer(uuid) is not None  # held until the host answers
    cloud.wire.deliver("shelve_offload_instance")
    assert cloud.sim.hosts_running(uuid) == []
    cloud.wire.deliver("instance_shelved")
    record = cloud.store.get_instance(uuid)
    assert (record.state, record.host, record.task_state, record.deadline) == (
        SHELVED_OFFLOADED,
        None,
        None,
        None,
    )
    assert cloud.store.list_consumers() == [] and cloud.store.group_hosts(GROUP) == {}
    assert cloud.store.get_provider(provider_uuid("h1")).usages == {}


def test_a_late_or_repeated_answer_changes_nothing(cloud: ShelveCloud) -> None:
    uuid = cloud.active_on("h1")
    cloud.shelver.shelve(uuid)
    cloud.wire.deliver("shelve_offload_instance")
    cloud.sim.shelve_offload_instance(RequestContext(), uuid, "h1")  # a re-drive's copy
    cloud.wire.deliver("instance_shelved")
    offloaded = cloud.store.get_instance(uuid)
    cloud.wire.deliver("instance_shelved")
    assert cloud.store.get_instance(uuid) == offloaded
    # An answer from a host the instance is not on is ignored too.
    other = cloud.active_on("h2", "i2")
    cloud.shelver.shelve(other)
    cloud.wire.held.clear()
    cloud.endpoint.instance_shelved(RequestContext(), other, "h3")
    assert cloud.store.get_instance(other).state == SHELVING
    assert cloud.store.get_consumer(other) is not None


@pytest.mark.parametrize("state", [BUILDING, SHELVING, SHELVED_OFFLOADED])
def test_only_an_active_instance_can_be_shelved(cloud: ShelveCloud, state: str) -> None:
    uuid = cloud.booting()
    cloud.store.update_instance(uuid, state=state, host="h1")
    before = cloud.store.get_instance(uuid)
    with pytest.raises(InvalidRequest, match="cannot be shelved now"):
        cloud.shelver.shelve(uuid)
    assert cloud.store.get_instance(uuid) == before and cloud.wire.pending() == []


def test_unshelve_schedules_a_boot_with_the_original_spec_unforced(cloud: ShelveCloud) -> None:
    uuid = cloud.active_on("h1")
    forced = RequestSpec.from_primitive(SPEC.to_primitive()).replace(
        force_hosts=("h1",), requested_destination=Destination(host="h1")
    )
    cloud.store.update_instance(uuid, request_spec=forced.to_primitive())
    cloud.shelver.shelve(uuid)
    cloud.wire.deliver("shelve_offload_instance")
    cloud.wire.deliver("instance_shelved")
    old_request = cloud.store.get_instance(uuid).request_id

    started = cloud.shelver.unshelve(uuid)

    assert (started.state, started.task_state, started.attempts) == (BUILDING, SCHEDULING, 0)
    assert started.request_id != old_request
    # Asked as every move asks (select_destinations is published), then built.
    (ctxt, spec, uuids), _ = cloud.scheduler.last("select_destinations")
    assert (uuids, ctxt.request_id) == ([uuid], started.request_id)  # type: ignore[attr-defined]
    assert cloud.wire.pending() == ["build_and_run_instances"]
    assert (spec.flavor, spec.force_hosts, spec.requested_destination) == (SPEC.flavor, (), None)
    with pytest.raises(InvalidRequest, match="nothing to unshelve"):
        cloud.shelver.unshelve(uuid)


def test_an_unshelve_builds_again_on_the_host_it_was_built_on(cloud: ShelveCloud) -> None:
    uuid = cloud.active_on("h1")
    cloud.shelver.shelve(uuid)
    cloud.wire.deliver("shelve_offload_instance")
    cloud.wire.deliver("instance_shelved")
    cloud.store.update_instance(uuid, state=BUILDING, task_state=SCHEDULING)
    cloud.claim(uuid, "h1")

    # A new request (a new id): a new build, not a duplicate of the first one.
    cloud.sim.build_and_run_instance(
        RequestContext(request_id="req-unshelve"),
        uuid,
        SPEC.to_primitive(),
        selection("h1").to_primitive(),
        [],
    )
    cloud.wait_for("build_succeeded")
    assert cloud.sim.hosts_running(uuid) == ["h1"] and cloud.sim.builds_ok == 2


def test_the_sweeper_resends_the_offload_then_finishes_it_here(
    cloud: ShelveCloud, now: list[float]
) -> None:
    uuid = cloud.active_on("h1")
    cloud.shelver.shelve(uuid)
    cloud.wire.held.clear()  # the offload is lost
    sweeper = Sweeper(
        cloud.store,
        Recorded(),  # type: ignore[arg-type]
        Resizer(cloud.store, Recorded(), Recorded()),  # type: ignore[arg-type]
        SETTINGS,
        clock=lambda: now[0],
        shelver=cloud.shelver,
    )
    for redrive in range(SETTINGS.max_redrives):
        now[0] += SETTINGS.delete_timeout + 1
        assert sweeper.sweep() == 1
        assert cloud.wire.pending() == ["shelve_offload_instance"]
        cloud.wire.held.clear()
        assert cloud.store.get_instance(uuid).redrives == redrive + 1
    now[0] += SETTINGS.delete_timeout + 1
    sweeper.sweep()
    assert sweeper.counts["shelve_done_here"] == 1
    assert cloud.store.get_instance(uuid).state == SHELVED_OFFLOADED
    assert cloud.store.list_consumers() == []
