"""Evacuate on the in-memory store with recorded RPC clients: the checks that
refuse (nothing changed), the transitions, the order of the messages, the
rebuild results, re-drives and a delete of a REBUILDING instance."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conductor_stub.manager import ConductorEndpoint
from conductor_stub.records import ConductorSettings
from conductor_stub.redrive import TIMED_OUT, Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import Evacuator, compute_is_up
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import Forbidden, InstanceNotFound, InvalidRequest, NoValidHost
from scheduler.objects import (
    ACTIVE,
    DELETED,
    REBUILD_SPAWNING,
    REBUILDING,
    RequestSpec,
    migration_uuid_for,
)
from scheduler.rpc import RequestContext
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import SPEC, active_on, ask, fill, holder, selection
from tests.unit.factories import NOW, Recorded, host, populate, uuid_of

DOWN = 60.0  # service_down_time
SETTINGS = ConductorSettings(build_timeout=30, max_redrives=2)


def cloud() -> MemoryStore:
    """``src`` (its compute down), ``h2`` and ``h3`` (up)."""
    store = MemoryStore()
    populate(store, [host("src", up=False), host("h2"), host("h3")])
    return store


class Scheduler(Recorded):
    """A scheduler that claims its answer (the primary) for the instance, and
    notes where the instance's allocation was when it was asked."""

    def __init__(self, store: MemoryStore, *hosts: str, fail: Exception | None = None) -> None:
        super().__init__(select_destinations=self._select)
        self.store, self.hosts, self.fail = store, hosts, fail
        self.seen: list[tuple[str | None, str | None]] = []

    def _select(self, ctxt: Any, spec: RequestSpec, uuids: list[str], **_: Any) -> Any:
        [uuid] = uuids
        migration = self.store.get_instance(uuid).migration_uuid or ""
        self.seen.append((holder(self.store, uuid), holder(self.store, migration)))
        if self.fail is not None:
            raise self.fail
        if self.store.get_consumer(uuid) is None:
            self.store.claim(uuid, ask(self.hosts[0]))
        return [[selection(h) for h in self.hosts]]


def evacuator(store: MemoryStore, scheduler: Recorded) -> tuple[Evacuator, Recorded]:
    compute = Recorded()
    return (
        Evacuator(store, scheduler, compute, SETTINGS, DOWN, clock=lambda: NOW),  # type: ignore[arg-type]
        compute,
    )


def test_compute_is_up_is_the_schedulers_rule() -> None:
    store = cloud()
    assert not compute_is_up(store, "src", DOWN, NOW)
    assert compute_is_up(store, "h2", DOWN, NOW)
    assert not compute_is_up(store, "nowhere", DOWN, NOW)  # no service record: down


@pytest.mark.parametrize(
    "where, kwargs, error, words",
    [
        pytest.param("h2", {}, InvalidRequest, "compute h2 is up", id="source-up"),
        pytest.param("src", {"host": "h2"}, Forbidden, "admin context", id="host-not-admin"),
        pytest.param(
            "src", {"host": "src", "admin": True}, InvalidRequest, "own (down)", id="to-source"
        ),
    ],
)
def test_refused_evacuations_change_nothing(
    where: str, kwargs: dict[str, Any], error: type, words: str
) -> None:
    store = cloud()
    uuid = active_on(store, where)
    scheduler = Scheduler(store, "h2")
    evacuate, compute = evacuator(store, scheduler)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        evacuate.start(uuid, **kwargs)
    assert store.get_instance(uuid).state == ACTIVE and holder(store, uuid) == where
    assert scheduler.calls == [] and compute.calls == []


def test_an_unknown_or_not_active_instance_is_refused() -> None:
    store = cloud()
    evacuate, _ = evacuator(store, Scheduler(store, "h2"))
    with pytest.raises(InstanceNotFound):
        evacuate.start(uuid_of("nobody"))
    uuid = active_on(store, "src")
    store.update_instance(uuid, state="ERROR")
    with pytest.raises(InvalidRequest, match="is ERROR"):
        evacuate.start(uuid)


def test_start_parks_the_source_then_selects_then_casts_the_rebuild() -> None:
    store = cloud()
    uuid = active_on(store, "src")
    scheduler = Scheduler(store, "h2", "h3")
    evacuate, compute = evacuator(store, scheduler)

    record = evacuate.start(uuid)

    migration = migration_uuid_for(uuid, record.request_id or "")
    assert (record.state, record.task_state, record.migration_uuid, record.source_host) == (
        REBUILDING,
        REBUILD_SPAWNING,
        migration,
        "src",
    )
    assert record.host == "src" and record.deadline == NOW + 30
    # Asked with the source parked on the migration (the instance holding nothing).
    assert scheduler.seen == [(None, "src")]
    (ctxt, spec, uuids), kwargs = scheduler.last("select_destinations")
    assert "src" in spec.ignore_hosts and uuids == [uuid]  # type: ignore[attr-defined]
    assert ctxt.request_id == record.request_id  # type: ignore[attr-defined]
    (_, rebuilt, rebuilt_migration, _, primary, alternates), _ = compute.last("rebuild_instance")
    assert (rebuilt, rebuilt_migration, primary.host) == (uuid, migration, "h2")  # type: ignore[attr-defined]
    assert [a.host for a in alternates] == ["h3"]  # type: ignore[attr-defined]
    assert compute.names == ["rebuild_instance"]


def test_an_admin_names_the_destination_and_it_is_kept_for_re_drives_only() -> None:
    store = cloud()
    uuid = active_on(store, "src")
    scheduler = Scheduler(store, "h3")
    evacuate, _ = evacuator(store, scheduler)
    record = evacuate.start(uuid, host="h3", admin=True)
    (ctxt, spec, _), _ = scheduler.last("select_destinations")
    assert spec.requested_destination.host == "h3" and ctxt.is_admin  # type: ignore[attr-defined]
    endpoint = ConductorEndpoint(store, Recorded(), None, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]
    endpoint.rebuild_result(CTXT, uuid, record.migration_uuid or "", "h3", True, node="h3")
    assert "requested_destination" not in (store.get_instance(uuid).request_spec or {})


def test_no_valid_host_leaves_it_active_on_the_down_source_with_its_allocation() -> None:
    store = cloud()
    uuid = active_on(store, "src")
    evacuate, compute = evacuator(store, Scheduler(store, "h2", fail=NoValidHost(details="x")))

    record = evacuate.start(uuid)

    assert (record.state, record.host, record.fault) == (ACTIVE, "src", NoValidHost.USER_MESSAGE)
    assert record.migration_uuid is None and record.deadline is None
    assert holder(store, uuid) == "src" and compute.calls == []


CTXT = RequestContext(request_id="req-e")


def rebuilding(store: MemoryStore, to: str = "h2") -> tuple[str, str]:
    """An instance of src being evacuated: parked, and claimed on ``to``."""
    uuid = active_on(store, "src")
    evacuate, _ = evacuator(store, Scheduler(store, to))
    record = evacuate.start(uuid)
    assert record.migration_uuid is not None
    return uuid, record.migration_uuid


def test_a_rebuild_that_succeeded_releases_the_source_once() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    endpoint = ConductorEndpoint(store, Recorded(), None, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]

    endpoint.rebuild_result(CTXT, uuid, migration, "h2", True, node="h2", availability_zone="z")

    record = store.get_instance(uuid)
    assert (record.state, record.host, record.availability_zone, record.task_state) == (
        ACTIVE,
        "h2",
        "z",
        None,
    )
    assert (record.migration_uuid, record.source_host, record.deadline) == (None, None, None)
    assert store.get_consumer(migration) is None and holder(store, uuid) == "h2"
    endpoint.rebuild_result(CTXT, uuid, migration, "h2", True, node="h2")  # a duplicate
    assert store.get_instance(uuid) == record


def rebuild_failed(
    endpoint: ConductorEndpoint, uuid: str, migration: str, host: str, alternates: list[str]
) -> None:
    """The compute's answer that the rebuild failed on ``host``, with ``alternates`` left."""
    endpoint.rebuild_result(
        CTXT,
        uuid,
        migration,
        host,
        False,
        reason="boom",
        request_spec=SPEC.to_primitive(),
        host_list=[selection(h).to_primitive() for h in alternates],
    )


def test_a_failed_rebuild_goes_to_the_next_alternate_then_gives_up() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    compute = Recorded()
    settings = dataclasses.replace(SETTINGS, max_attempts=2)
    endpoint = ConductorEndpoint(store, compute, None, settings, clock=lambda: NOW)  # type: ignore[arg-type]
    store.release(uuid)  # the destination released its claim before answering

    rebuild_failed(endpoint, uuid, migration, "h2", ["h3"])

    assert holder(store, uuid) == "h3" and store.get_instance(uuid).tried_hosts == ("h2",)
    (_, _, _, _, primary, rest), _ = compute.last("rebuild_instance")
    assert (primary.host, rest) == ("h3", [])  # type: ignore[attr-defined]
    store.release(uuid)
    rebuild_failed(endpoint, uuid, migration, "h3", [])
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.tried_hosts) == (ACTIVE, "src", ("h2", "h3"))
    assert "max retries" in (record.fault_details or "") and holder(store, uuid) == "src"
    assert store.get_consumer(migration) is None


def test_a_rebuild_whose_alternates_were_taken_asks_the_scheduler_again() -> None:
    """One destination failed of max_attempts and its only alternate was
    filled meanwhile (no attempt): the scheduler is asked again, the failed
    destination and the source ignored, and the rebuild cast there."""
    store = cloud()
    populate(store, [host("h4")])
    uuid, migration = rebuilding(store)
    store.release(uuid)  # the destination released its claim before answering
    fill(store, "h3")
    scheduler, compute = Scheduler(store, "h4"), Recorded()
    endpoint = ConductorEndpoint(store, compute, scheduler, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]

    rebuild_failed(endpoint, uuid, migration, "h2", ["h3"])

    record = store.get_instance(uuid)
    assert (record.state, record.attempts, record.tried_hosts) == (REBUILDING, 1, ("h2",))
    assert holder(store, uuid) == "h4" and holder(store, migration) == "src"
    (_, asked, _), _ = scheduler.last("select_destinations")
    assert {"src", "h2"} <= set(asked.ignore_hosts)  # type: ignore[attr-defined]
    (_, _, _, _, primary, rest), _ = compute.last("rebuild_instance")
    assert (primary.host, rest) == ("h4", [])  # type: ignore[attr-defined]


def test_a_result_from_another_migration_or_state_is_ignored() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    endpoint = ConductorEndpoint(store, Recorded(), None, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]
    before = store.get_instance(uuid)
    endpoint.rebuild_result(CTXT, uuid, uuid_of("other"), "h2", True)
    endpoint.rebuild_result(CTXT, uuid, migration, "h3", True)  # h3 holds no claim of it
    assert store.get_instance(uuid) == before and holder(store, migration) == "src"


def sweeper(store: MemoryStore, scheduler: Recorded, compute: Recorded, now: float) -> Sweeper:
    settings = SETTINGS
    return Sweeper(
        store,
        scheduler,  # type: ignore[arg-type]
        Resizer(store, scheduler, compute, settings),  # type: ignore[arg-type]
        settings,
        clock=lambda: now,
    )


def test_a_re_drive_reuses_the_destination_and_never_parks_twice() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    scheduler, compute = Scheduler(store, "h2"), Recorded()

    sweeper(store, scheduler, compute, NOW + 31).sweep()

    assert scheduler.seen == [("h2", "src")]  # the destination claim and the parked source
    assert compute.names == ["rebuild_instance"] and store.get_instance(uuid).redrives == 1
    assert holder(store, uuid) == "h2" and holder(store, migration) == "src"


def test_an_evacuation_re_driven_max_times_times_out_back_on_its_source() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    store.update_instance(uuid, redrives=SETTINGS.max_redrives)
    sweeper(store, Recorded(), Recorded(), NOW + 31).sweep()
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.fault) == (ACTIVE, "src", TIMED_OUT)
    assert holder(store, uuid) == "src" and store.get_consumer(migration) is None


def test_deleting_a_rebuilding_instance_reaches_both_hosts_and_releases_both() -> None:
    store = cloud()
    uuid, migration = rebuilding(store)
    compute = Recorded()
    deleter = Deleter(store, compute, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]

    record = deleter.delete(uuid)

    assert set(record.pending_hosts) == {"src", "h2"}
    assert sorted(args[1] for name, args, _ in compute.calls) == ["h2", "src"]
    endpoint = ConductorEndpoint(store, compute, None, SETTINGS, clock=lambda: NOW)  # type: ignore[arg-type]
    endpoint.rebuild_result(CTXT, uuid, migration, "h2", True, node="h2")  # late: ignored
    for h in ("h2", "src"):
        deleter.finish(uuid, h)
    assert store.get_instance(uuid).state == DELETED
    assert store.get_consumer(uuid) is None and store.get_consumer(migration) is None
