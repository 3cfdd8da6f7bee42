"""A delete end to end on the in-memory store: the conductor's Deleter and
endpoint, the compute simulator, and the casts between them held on a wire
so that each test delivers them in the order it is about (the delete before
the build reaches the compute, during it, after it; during a resize; twice;
an unknown uuid; a host that never answers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import ConsumerDeleted, InstanceNotFound
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    RESIZE_PREP,
    RESIZING,
    migration_uuid_for,
)
from tests.fixtures.cloud import CTXT, SETTINGS, Cloud
from tests.fixtures.simulator import SPEC, selection
from tests.unit.factories import NOW, Recorded, uuid_of


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
