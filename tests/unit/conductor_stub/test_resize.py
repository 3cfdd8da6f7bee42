"""The API side of a resize: start, confirm, revert."""

from __future__ import annotations

import pytest

from conductor_stub.records import ConductorSettings, finish_confirm, finish_revert
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import CannotResizeToSameFlavor, Forbidden, InvalidRequest
from scheduler.objects import (
    ACTIVE,
    RESIZE_CONFIRMING,
    RESIZE_PREP,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    Destination,
    migration_uuid_for,
)
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import (
    BIG,
    SPEC,
    active_on,
    building,
    cloud,
    holder,
    resizing,
)
from tests.unit.factories import NOW, Recorded


def resizer(store: MemoryStore) -> tuple[Resizer, Recorded, Recorded]:
    scheduler, compute = Recorded(), Recorded()
    return (
        Resizer(
            store,
            scheduler,
            compute,  # type: ignore[arg-type]
            ConductorSettings(resize_timeout=30),
            clock=lambda: NOW,
        ),
        scheduler,
        compute,
    )


def test_start_marks_the_record_and_casts_the_resize() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    store.update_instance(uuid, availability_zone="east")
    resize, scheduler, _ = resizer(store)

    started = resize.start(uuid, BIG)

    assert (
        started.state,
        started.task_state,
        started.source_host,
        started.source_availability_zone,
        started.new_flavor,
        started.deadline,
    ) == (RESIZING, RESIZE_PREP, "h1", "east", BIG.to_primitive(), NOW + 30)
    assert started.migration_uuid == migration_uuid_for(uuid, started.request_id or "")
    (ctxt, resized, source, flavor, spec), _ = scheduler.last("resize")
    assert (ctxt.request_id, resized, source, flavor, spec.flavor) == (  # type: ignore[attr-defined]
        started.request_id,
        uuid,
        "h1",
        BIG,
        BIG,
    )


@pytest.mark.parametrize("state", ["BUILDING", RESIZING, RESIZED, "ERROR"])
def test_only_an_active_instance_can_start_a_resize(state: str) -> None:
    store = cloud("h1")
    uuid = building(store, state=state, host="h1")
    resize, scheduler, _ = resizer(store)
    with pytest.raises(InvalidRequest):
        resize.start(uuid, BIG)
    assert scheduler.calls == [] and store.get_instance(uuid).state == state


@pytest.mark.parametrize(
    "confirm, task_state, method, host",
    [
        pytest.param(True, RESIZE_CONFIRMING, "confirm_resize", "h1", id="confirm-to-source"),
        pytest.param(False, RESIZE_REVERTING, "revert_resize", "h2", id="revert-to-destination"),
    ],
)
def test_confirm_or_revert_is_cast_to_the_host_that_acts(
    confirm: bool, task_state: str, method: str, host: str
) -> None:
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", "h2")
    store.update_instance(uuid, state=RESIZED, task_state=None, host="h2", node="h2")
    resize, _, compute = resizer(store)

    record = (resize.confirm if confirm else resize.revert)(uuid)

    assert (record.task_state, record.deadline) == (task_state, NOW + 30)
    (_, target, instance, moved), _ = compute.last(method)
    assert (target, instance, moved) == (host, uuid, migration)


@pytest.mark.parametrize("confirm, word", [(True, "confirm"), (False, "revert")])
def test_confirm_or_revert_needs_a_resized_instance(confirm: bool, word: str) -> None:
    store = cloud("h1")
    uuid = active_on(store, "h1")
    resize, _, compute = resizer(store)
    with pytest.raises(InvalidRequest) as caught:
        (resize.confirm if confirm else resize.revert)(uuid)
    assert caught.value.message == (
        f"invalid request: instance {uuid} is ACTIVE, not RESIZED: nothing to {word}"
    )
    assert compute.calls == [] and store.get_instance(uuid).state == ACTIVE


def test_a_resize_to_the_instance_s_own_flavor_is_refused_as_nova_does() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    resize, scheduler, _ = resizer(store)
    own = SPEC.flavor
    with pytest.raises(CannotResizeToSameFlavor) as caught:
        resize.resize(uuid, own)
    assert f"already has flavor {own.name}" in caught.value.message
    assert scheduler.calls == [] and store.get_instance(uuid).state == ACTIVE
    # Another flavor is a resize; the own flavor is a cold migration, still allowed.
    assert resize.resize(uuid, BIG).state == RESIZING


# --- cold migration ---------------------------------------------------------------


def test_a_migration_is_a_resize_to_the_instance_s_own_flavor() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    resize, scheduler, _ = resizer(store)

    started = resize.migrate(uuid)

    assert (started.state, started.new_flavor, started.requested_destination) == (
        RESIZING,
        SPEC.flavor.to_primitive(),
        None,
    )
    (ctxt, _, source, flavor, spec), _ = scheduler.last("resize")
    assert (source, flavor, spec.requested_destination, ctxt.is_admin) == (  # type: ignore[attr-defined]
        "h1",
        SPEC.flavor,
        None,
        False,
    )


def test_an_admin_s_named_host_steers_the_migration_and_its_re_drives() -> None:
    store = cloud("h1", "h2", "h3")
    uuid = active_on(store, "h1")
    resize, scheduler, _ = resizer(store)

    started = resize.migrate(uuid, host="h3", admin=True)

    (ctxt, *_, spec), _ = scheduler.last("resize")
    assert spec.requested_destination == Destination(host="h3")
    assert ctxt.is_admin is True  # type: ignore[attr-defined]
    # The re-drive (send_resize from the record alone) is steered the same way,
    # with the same rights.
    resize.send_resize(store.get_instance(uuid))
    (ctxt, *_, spec), _ = scheduler.last("resize")
    assert (spec.requested_destination, ctxt.is_admin) == (Destination(host="h3"), True)  # type: ignore[attr-defined]
    # Never written into the instance's own request spec.
    assert "requested_destination" not in (started.request_spec or {})


@pytest.mark.parametrize(
    "host, admin, error",
    [
        pytest.param("h2", False, Forbidden, id="host-needs-admin"),
        pytest.param("h1", True, InvalidRequest, id="host-is-the-source"),
    ],
)
def test_a_bad_migration_changes_nothing(host: str, admin: bool, error: type) -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    before = store.get_instance(uuid)
    resize, scheduler, _ = resizer(store)
    with pytest.raises(error):
        resize.migrate(uuid, host=host, admin=admin)
    assert scheduler.calls == [] and store.get_instance(uuid) == before
    assert holder(store, uuid) == "h1"


def test_forced_boot_hosts_do_not_steer_a_move() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    forced = SPEC.replace(force_hosts=("h1",), requested_destination=Destination(host="h1"))
    store.update_instance(uuid, request_spec=forced.to_primitive())
    resize, scheduler, _ = resizer(store)
    resize.migrate(uuid)
    (*_, spec), _ = scheduler.last("resize")
    assert (spec.force_hosts, spec.requested_destination) == ((), None)


@pytest.mark.parametrize("finish", ["confirm", "revert"])
def test_the_named_host_is_dropped_when_the_move_ends(finish: str) -> None:
    store = cloud("h1", "h2")
    uuid, _ = resizing(
        store, "h1", "h2", requested_destination=Destination(host="h2").to_primitive()
    )
    store.update_instance(uuid, state=RESIZED, task_state=None, host="h2", node="h2")
    record = store.get_instance(uuid)
    done = (finish_confirm if finish == "confirm" else finish_revert)(store, record)
    assert done and store.get_instance(uuid).requested_destination is None
