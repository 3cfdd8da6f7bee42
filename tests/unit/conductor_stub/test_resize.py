"""The API side of a resize: start, confirm, revert."""

from __future__ import annotations

import pytest

from conductor_stub.records import ConductorSettings
from conductor_stub.resize import Resizer
from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    ACTIVE,
    RESIZE_CONFIRMING,
    RESIZE_PREP,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    migration_uuid_for,
)
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import BIG, active_on, building, cloud, resizing
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


def test_confirm_needs_a_resized_instance() -> None:
    store = cloud("h1")
    uuid = active_on(store, "h1")
    resize, _, compute = resizer(store)
    with pytest.raises(InvalidRequest):
        resize.confirm(uuid)
    assert compute.calls == [] and store.get_instance(uuid).state == ACTIVE
