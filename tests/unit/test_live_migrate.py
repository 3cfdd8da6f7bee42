"""A live migration on the conductor's side, on the in-memory store: start
and its refusals, the task's message order (park, select, pre-checks), a
pre-check failure onto the alternate or back to the source, the landing,
re-drives that never claim twice, a delete's hosts, and what ``show`` says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from conductor_stub import records
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.records import ConductorSettings
from conductor_stub.redrive import TIMED_OUT, Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import (
    Forbidden,
    InstanceNotFound,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
)
from scheduler.objects import (
    ACTIVE,
    LIVE_MIGRATING,
    MIGRATING,
    RESIZING,
    Destination,
    RequestSpec,
    ServerGroup,
    migration_uuid_for,
)
from scheduler.render import render_instance
from scheduler.rpc import RequestContext
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import (
    SPEC,
    active_on,
    ask,
    building,
    cloud,
    fill,
    holder,
    selection,
)
from tests.unit.factories import NOW, Recorded, uuid_of

SETTINGS = ConductorSettings(live_migration_timeout=30, max_redrives=2)
CTXT = RequestContext(request_id="req-lm")


class Scheduler(Recorded):
    """The scheduler's select_destinations, as the engine answers it: the first
    of ``hosts`` claimed for the instance (a claim it holds already reused,
    never doubled), the rest as alternates; or ``raises``."""

    def __init__(self, store: MemoryStore, *hosts: str, raises: Exception | None = None):
        super().__init__(select_destinations=self._select)
        self.store, self.hosts, self.raises = store, hosts, raises

    def _select(self, ctxt: Any, spec: RequestSpec, uuids: list[str], **kwargs: Any) -> Any:
        if self.raises is not None:
            raise self.raises
        [uuid] = uuids
        held = holder(self.store, uuid)
        hosts = [held] if held else list(self.hosts)
        if held is None:
            self.store.claim(uuid, ask(hosts[0]))
        return [[selection(h) for h in hosts]]


def migrator(
    store: MemoryStore, *hosts: str, raises: Exception | None = None
) -> tuple[LiveMigrator, Scheduler, Recorded]:
    scheduler, compute = Scheduler(store, *hosts, raises=raises), Recorded()
    return (
        LiveMigrator(store, scheduler, compute, SETTINGS, clock=lambda: NOW),  # type: ignore[arg-type]
        scheduler,
        compute,
    )


def endpoint(store: MemoryStore, **settings: Any) -> tuple[ConductorEndpoint, Recorded]:
    compute = Recorded()
    return (
        ConductorEndpoint(
            store,
            compute,  # type: ignore[arg-type]
            Scheduler(store, "h3"),  # type: ignore[arg-type]
            ConductorSettings(live_migration_timeout=30, **settings),
            clock=lambda: NOW,
        ),
        compute,
    )


def migrating(store: MemoryStore, *dests: str) -> tuple[str, str, Recorded]:
    """An instance ACTIVE on h1 whose live migration has started: its source
    parked on the migration, the first of ``dests`` claimed for it."""
    uuid = active_on(store, "h1")
    store.update_instance(uuid, availability_zone="east")
    live, _, compute = migrator(store, *dests)
    record = live.start(uuid)
    assert record.migration_uuid is not None
    return uuid, record.migration_uuid, compute


# --- start ------------------------------------------------------------------------------


def test_start_parks_the_source_selects_with_the_own_spec_and_casts_the_pre_checks() -> None:
    store = cloud("h1", "h2", "h3")
    uuid = active_on(store, "h1")
    group = ServerGroup(uuid="0c0c0c0c-0000-4000-8000-000000000001", policy="soft-affinity")
    spec = SPEC.replace(availability_zone="east", group=group, scheduler_hints={"k": "v"})
    store.update_instance(uuid, request_spec=spec.to_primitive(), availability_zone="east")
    live, scheduler, compute = migrator(store, "h2", "h3")

    started = live.start(uuid, block_migration=True)

    assert (started.state, started.task_state, started.host) == (MIGRATING, LIVE_MIGRATING, "h1")
    assert (started.source_host, started.source_availability_zone) == ("h1", "east")
    assert started.migration_uuid == migration_uuid_for(uuid, started.request_id or "")
    assert (started.deadline, started.block_migration) == (NOW + 30, True)
    # The source is the migration's; the destination is the instance's claim.
    assert holder(store, started.migration_uuid) == "h1" and holder(store, uuid) == "h2"
    (ctxt, asked, uuids), kwargs = scheduler.last("select_destinations")
    assert uuids == [uuid] and kwargs == {"return_alternates": True}
    assert ctxt.request_id == started.request_id  # type: ignore[attr-defined]
    assert isinstance(asked, RequestSpec)
    assert asked.flavor == SPEC.flavor and asked.group == group
    assert (asked.availability_zone, dict(asked.scheduler_hints)) == ("east", {"k": ("v",)})
    assert "h1" in asked.ignore_hosts and asked.requested_destination is None
    assert compute.names == ["check_can_live_migrate_destination"]
    (_, instance, migration, _, primary, alternates, source, block), _ = compute.last(
        "check_can_live_migrate_destination"
    )
    assert (instance, migration, source, block) == (uuid, started.migration_uuid, "h1", True)
    assert primary.host == "h2" and [a.host for a in alternates] == ["h3"]  # type: ignore[attr-defined]


def test_an_admin_names_the_destination_and_it_is_still_asked_of_the_scheduler() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    live, scheduler, _ = migrator(store, "h2")

    started = live.start(uuid, host="h2", admin=True)

    assert started.requested_destination == {"host": "h2", "node": None}
    (ctxt, asked, _), _ = scheduler.last("select_destinations")
    assert ctxt.is_admin is True  # type: ignore[attr-defined]
    assert asked.requested_destination == Destination(host="h2")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kwargs, error, says",
    [
        pytest.param({"host": "h2"}, Forbidden, "requires an admin context", id="non-admin-host"),
        pytest.param(
            {"host": "h1", "admin": True}, InvalidRequest, "needs another host", id="own-host"
        ),
    ],
)
def test_a_refused_start_changes_nothing(kwargs: Any, error: type[Exception], says: str) -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    live, scheduler, compute = migrator(store, "h2")
    with pytest.raises(error, match=says):
        live.start(uuid, **kwargs)
    record = store.get_instance(uuid)
    assert (record.state, record.migration_uuid, holder(store, uuid)) == (ACTIVE, None, "h1")
    assert scheduler.calls == [] and compute.calls == []


@pytest.mark.parametrize("state", ["BUILDING", RESIZING, MIGRATING, "ERROR", "DELETING"])
def test_only_an_active_instance_can_be_live_migrated(state: str) -> None:
    store = cloud("h1", "h2")
    uuid = building(store, state=state, host="h1")
    live, scheduler, _ = migrator(store, "h2")
    with pytest.raises(InvalidRequest, match="not ACTIVE"):
        live.start(uuid)
    assert scheduler.calls == [] and store.get_instance(uuid).state == state


def test_an_unknown_instance_is_not_found() -> None:
    live, scheduler, _ = migrator(cloud("h1"), "h1")
    with pytest.raises(InstanceNotFound):
        live.start("0c0c0c0c-0000-4000-8000-00000000dead")
    assert scheduler.calls == []


def test_no_valid_host_leaves_it_active_on_its_source_with_its_allocation() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    live, _, compute = migrator(store, raises=NoValidHost(details="0/1 hosts"))

    record = live.start(uuid)

    assert (record.state, record.host, record.fault) == (ACTIVE, "h1", NoValidHost.USER_MESSAGE)
    assert record.fault_details == "0/1 hosts"
    assert (record.migration_uuid, record.source_host, record.deadline) == (None, None, None)
    assert holder(store, uuid) == "h1" and len(store.list_consumers()) == 1
    assert compute.calls == []


# --- pre-check failures -----------------------------------------------------------------


def test_a_failed_pre_check_claims_the_next_alternate_and_casts_its_pre_checks() -> None:
    store = cloud("h1", "h2", "h3")
    uuid, migration, _ = migrating(store, "h2", "h3")
    store.release(uuid)  # the failed destination released its claim
    conductor, compute = endpoint(store)

    conductor.live_migration_precheck_failed(
        CTXT, uuid, migration, SPEC.to_primitive(), "h2", "boom", [selection("h3").to_primitive()]
    )

    record = store.get_instance(uuid)
    assert (record.state, record.attempts, record.tried_hosts) == (MIGRATING, 1, ("h2",))
    assert holder(store, uuid) == "h3" and holder(store, migration) == "h1"
    (_, instance, moved, _, primary, rest, source, _), _ = compute.last(
        "check_can_live_migrate_destination"
    )
    assert (instance, moved, primary.host, rest, source) == (uuid, migration, "h3", [], "h1")  # type: ignore[attr-defined]


def test_with_no_alternate_left_it_goes_back_active_on_its_source() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")
    store.release(uuid)
    store.update_instance(uuid, attempts=2, tried_hosts=("h4", "h5"))  # the last one left
    conductor, compute = endpoint(store)

    conductor.live_migration_precheck_failed(
        CTXT, uuid, migration, SPEC.to_primitive(), "h2", "boom", []
    )

    record = store.get_instance(uuid)
    assert (record.state, record.host, record.fault) == (
        ACTIVE,
        "h1",
        MaxRetriesExceeded.USER_MESSAGE,
    )
    assert "h2" in (record.fault_details or "") and "boom" in (record.fault_details or "")
    assert (record.migration_uuid, record.deadline, record.availability_zone) == (
        None,
        None,
        "east",
    )
    assert holder(store, uuid) == "h1" and store.get_consumer(migration) is None
    assert compute.calls == []


def test_alternates_off_asks_the_scheduler_again_with_the_hosts_tried_ignored() -> None:
    store = cloud("h1", "h2", "h3")
    uuid, migration, _ = migrating(store, "h2")
    store.release(uuid)
    conductor, compute = endpoint(store, return_alternates=False)

    conductor.live_migration_precheck_failed(
        CTXT, uuid, migration, SPEC.to_primitive(), "h2", "boom", []
    )

    assert holder(store, uuid) == "h3" and holder(store, migration) == "h1"
    assert conductor.scheduler is not None
    (_, asked, _), _ = conductor.scheduler.last("select_destinations")  # type: ignore[attr-defined]
    assert {"h1", "h2"} <= set(asked.ignore_hosts)
    assert compute.names == ["check_can_live_migrate_destination"]


def test_alternates_that_cannot_be_claimed_are_no_attempts_the_scheduler_is_asked_again() -> None:
    """The only alternate (h2) was taken meanwhile, one destination failed of
    max_attempts: the live migration is sent again through the scheduler."""
    store = cloud("h1", "h2", "h3", "h4")
    uuid, migration, _ = migrating(store, "h4")
    store.release(uuid)
    fill(store, "h2")
    conductor, compute = endpoint(store)

    conductor.live_migration_precheck_failed(
        CTXT, uuid, migration, SPEC.to_primitive(), "h4", "boom", [selection("h2").to_primitive()]
    )

    record = store.get_instance(uuid)
    assert (record.state, record.attempts, record.tried_hosts) == (MIGRATING, 1, ("h4",))
    assert holder(store, uuid) == "h3" and holder(store, migration) == "h1"
    (_, asked, _), _ = conductor.scheduler.last("select_destinations")  # type: ignore[union-attr]
    assert {"h1", "h4"} <= set(asked.ignore_hosts)
    assert compute.names == ["check_can_live_migrate_destination"]


@pytest.mark.parametrize("why", ["stale-migration", "placed-again", "not-migrating"])
def test_a_pre_check_failure_that_is_not_the_live_one_changes_nothing(why: str) -> None:
    store = cloud("h1", "h2", "h3")
    uuid, migration, _ = migrating(store, "h2")
    if why == "stale-migration":
        store.release(uuid)
        migration = migration_uuid_for(uuid, "req-other")
    elif why == "not-migrating":
        store.release(uuid)
        store.update_instance(uuid, state="DELETING")
    before = (store.get_instance(uuid), holder(store, uuid))
    conductor, compute = endpoint(store)

    conductor.live_migration_precheck_failed(
        CTXT, uuid, migration, SPEC.to_primitive(), "h2", "boom", [selection("h3").to_primitive()]
    )

    assert (store.get_instance(uuid), holder(store, uuid)) == before
    assert compute.calls == []


# --- landing ----------------------------------------------------------------------------


def test_landed_it_is_active_on_the_destination_and_the_source_is_dropped() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")
    conductor, _ = endpoint(store)

    conductor.live_migrated(CTXT, uuid, migration, "h2", "h2", "west")
    conductor.live_migrated(CTXT, uuid, migration, "h2", "h2", "west")  # a repeat

    record = store.get_instance(uuid)
    assert (record.state, record.task_state, record.host, record.node) == (
        ACTIVE,
        None,
        "h2",
        "h2",
    )
    assert (record.availability_zone, record.migration_uuid, record.source_host) == (
        "west",
        None,
        None,
    )
    assert record.attempts == 1  # the destination that worked, counted once despite the repeat
    assert record.deadline is None and record.fault is None
    assert holder(store, uuid) == "h2" and store.get_consumer(migration) is None
    assert store.get_provider(uuid_of("h1")).usages == {}


def test_a_landing_from_a_host_that_holds_no_claim_is_ignored() -> None:
    store = cloud("h1", "h2", "h3")
    uuid, migration, _ = migrating(store, "h2")
    conductor, _ = endpoint(store)

    conductor.live_migrated(CTXT, uuid, migration, "h3", "h3")

    assert store.get_instance(uuid).state == MIGRATING
    assert holder(store, uuid) == "h2" and holder(store, migration) == "h1"


# --- re-drives --------------------------------------------------------------------------


def sweeper(store: MemoryStore, *hosts: str) -> tuple[Sweeper, Scheduler, Recorded]:
    scheduler, compute = Scheduler(store, *hosts), Recorded()
    clock = lambda: NOW + 100  # noqa: E731 - past every deadline
    live = LiveMigrator(store, scheduler, compute, SETTINGS, clock=clock)  # type: ignore[arg-type]
    resizer = Resizer(store, scheduler, compute, SETTINGS, clock=clock)  # type: ignore[arg-type]
    return (
        Sweeper(store, scheduler, resizer, SETTINGS, clock=clock, migrator=live),  # type: ignore[arg-type]
        scheduler,
        compute,
    )


def test_a_redriven_live_migration_reuses_its_migration_and_claim() -> None:
    store = cloud("h1", "h2", "h3")
    uuid, migration, _ = migrating(store, "h2", "h3")
    sweep, scheduler, compute = sweeper(store, "h3")

    assert sweep.sweep() == 1

    record = store.get_instance(uuid)
    assert (record.state, record.redrives, record.migration_uuid) == (MIGRATING, 1, migration)
    # Never claimed twice: the one claim on h2 is the instance's, reused.
    assert holder(store, uuid) == "h2" and holder(store, migration) == "h1"
    assert len(store.list_consumers()) == 2
    assert store.get_provider(uuid_of("h3")).usages == {}
    (ctxt, _, _), _ = scheduler.last("select_destinations")
    assert ctxt.request_id == record.request_id  # type: ignore[attr-defined]
    (_, _, _, _, primary, _, _, _), _ = compute.last("check_can_live_migrate_destination")
    assert primary.host == "h2"  # type: ignore[attr-defined]
    assert sweep.counts["live_migrate"] == 1


def test_a_live_migration_redriven_out_goes_back_to_its_source() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")
    store.update_instance(uuid, redrives=SETTINGS.max_redrives)
    sweep, _, compute = sweeper(store, "h2")

    sweep.sweep()

    record = store.get_instance(uuid)
    assert (record.state, record.host, record.fault) == (ACTIVE, "h1", TIMED_OUT)
    assert "live migration" in (record.fault_details or "")
    assert holder(store, uuid) == "h1" and store.get_consumer(migration) is None
    assert compute.calls == [] and sweep.counts["timed_out"] == 1


# --- the rest of the lifecycle ------------------------------------------------------------


def test_fail_move_is_the_failure_of_a_resize_and_of_a_live_migration_alike() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")
    record = store.get_instance(uuid)
    assert not records.fail_move(store, replace(record, state=RESIZING), "x", "y")  # not a resize
    assert store.get_instance(uuid).state == MIGRATING
    assert records.fail_move(store, record, "x", "y")
    assert not records.fail_move(store, record, "x", "y")  # once
    assert holder(store, uuid) == "h1" and store.get_consumer(migration) is None


def test_a_delete_of_a_migrating_instance_reaches_source_and_destination() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")
    compute = Recorded()
    deleter = Deleter(store, compute, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]

    record = deleter.delete(uuid)

    assert set(record.pending_hosts) == {"h1", "h2"}
    for host in ("h1", "h2"):
        deleter.finish(uuid, host)
    assert store.get_instance(uuid).state == "DELETED"
    assert store.get_consumer(uuid) is None and store.get_consumer(migration) is None
    # A late landing changes nothing.
    conductor, _ = endpoint(store)
    conductor.live_migrated(CTXT, uuid, migration, "h2", "h2")
    assert store.get_instance(uuid).state == "DELETED" and store.list_consumers() == []


def test_show_says_a_live_migration_is_in_flight_and_only_an_admin_sees_where() -> None:
    store = cloud("h1", "h2")
    uuid, migration, _ = migrating(store, "h2")

    user = render_instance(store, uuid, admin=False)
    admin = render_instance(store, uuid, admin=True)

    assert f"live migration  from h1; migration {migration}" in user
    assert "h2" not in user
    assert "destination claimed: h2" in admin and "migration holds h1" in admin
