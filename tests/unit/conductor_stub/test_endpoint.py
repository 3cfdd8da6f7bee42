"""The conductor endpoint on the in-memory store: build results, reschedules
(alternates, taken alternates, alternates off), resize results."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog

from conductor_stub.manager import ConductorEndpoint
from conductor_stub.records import ConductorSettings
from scheduler.exceptions import Forbidden, InvalidRequest, MaxRetriesExceeded, NoValidHost
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    ERROR,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    SPAWNING,
    RequestSpec,
)
from scheduler.rpc import RequestContext
from scheduler.store import GroupClaim, MemoryStore
from tests.unit.conductor_stub.helpers import (
    BIG,
    SPEC,
    active_on,
    ask,
    building,
    cloud,
    fill,
    holder,
    resizing,
    selection,
)
from tests.unit.factories import GROUP_UUID, NOW, Recorded, group
from tests.unit.metering import Growth

CTXT = RequestContext(request_id="req-1")


def endpoint(
    store: MemoryStore, scheduler: Recorded | None = None, **settings: Any
) -> tuple[ConductorEndpoint, Recorded]:
    compute = Recorded()
    return ConductorEndpoint(
        store,
        compute,
        scheduler or Recorded(),  # type: ignore[arg-type]
        ConductorSettings(**settings),
        clock=lambda: NOW,
    ), compute


# --- build results --------------------------------------------------------------------


@dataclass(frozen=True)
class ResultCase:
    name: str
    state: str
    claim_on: str | None  # where the instance's claim is when the result arrives
    state_after: str
    claim_after: str | None


BUILD_RESULT_CASES = [
    ResultCase("live-attempt", BUILDING, "h1", ACTIVE, "h1"),
    ResultCase("stale-attempt-the-claim-is-elsewhere", BUILDING, "h2", BUILDING, "h2"),
    ResultCase("given-up-then-built-late", ERROR, "h1", ERROR, None),
    ResultCase("duplicate-report", ACTIVE, "h1", ACTIVE, "h1"),
]


@pytest.mark.parametrize("case", BUILD_RESULT_CASES, ids=lambda c: c.name)
def test_build_succeeded(case: ResultCase) -> None:
    store = cloud("h1", "h2")
    uuid = building(store, state=case.state)
    if case.claim_on:
        store.claim(uuid, ask(case.claim_on))
    conductor, _ = endpoint(store)
    conductor.build_succeeded(CTXT, uuid, "h1", "h1")
    record = store.get_instance(uuid)
    assert (record.state, holder(store, uuid)) == (case.state_after, case.claim_after)
    if case.state == BUILDING and case.state_after == ACTIVE:
        assert (record.host, record.task_state, record.deadline) == ("h1", None, None)


def test_a_build_records_the_zone_it_was_built_in_and_an_older_compute_none() -> None:
    store = cloud("h1", "h2")
    zoned, unzoned = building(store, "i1"), building(store, "i2")
    store.claim(zoned, ask("h1"))
    store.claim(unzoned, ask("h2"))
    conductor, _ = endpoint(store)
    conductor.build_succeeded(CTXT, zoned, "h1", "h1", availability_zone="east")
    conductor.build_succeeded(CTXT, unzoned, "h2", "h2")  # as a compute older than 1.2
    assert (store.get_instance(zoned).host, store.get_instance(zoned).availability_zone) == (
        "h1",
        "east",
    )
    assert store.get_instance(unzoned).availability_zone is None


def test_a_reschedule_records_the_alternates_zone_and_no_zone_outlives_its_host() -> None:
    store = cloud("h1", "h2", "h3")
    uuid = building(store, host="h1", node="h1", availability_zone="east")
    fill(store, "h2")
    conductor, compute = endpoint(store)
    alternates = [selection("h2", availability_zone="west"), selection("h3")]
    conductor.reschedule(
        CTXT, uuid, SPEC.to_primitive(), "h1", "boom", [a.to_primitive() for a in alternates]
    )
    # h2 was taken: built on h3, whose Selection (from an older worker) named no zone.
    record = store.get_instance(uuid)
    assert (record.host, record.availability_zone) == ("h3", None)
    (_, _, _, chosen, _), _ = compute.last("build_and_run_instance")
    assert chosen == alternates[1]

    uuid2 = building(store, "i2", host="h1", node="h1")
    conductor.reschedule(
        CTXT,
        uuid2,
        SPEC.to_primitive(),
        "h1",
        "boom",
        [selection("h3", availability_zone="west").to_primitive()],
    )
    assert store.get_instance(uuid2).availability_zone == "west"


def test_a_failed_build_keeps_no_zone() -> None:
    store = cloud("h1")
    uuid = building(store, host="h1", node="h1", availability_zone="east")
    conductor, _ = endpoint(store, Recorded(select_destinations=no_valid_host))
    conductor.reschedule(CTXT, uuid, SPEC.to_primitive(), "h1", "boom", [])
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.availability_zone) == (ERROR, None, None)


@pytest.mark.parametrize(
    "held, state",
    [
        pytest.param(False, ERROR, id="nothing-held"),
        pytest.param(True, BUILDING, id="a-re-driven-copy-placed-it"),
    ],
)
def test_schedule_failed(held: bool, state: str) -> None:
    store = cloud("h1")
    uuid = building(store)
    if held:
        store.claim(uuid, ask("h1"))
    conductor, _ = endpoint(store)
    conductor.schedule_failed(CTXT, [uuid], NoValidHost.USER_MESSAGE, "0/1 hosts available")
    assert store.get_instance(uuid).state == state


# --- reschedule of a build ------------------------------------------------------------


def select_on(store: MemoryStore, host: str) -> Any:
    """A scheduler that places the instance on ``host`` (claimed, as the real one does)."""

    def select(ctxt: Any, spec: RequestSpec, uuids: list[str], return_alternates: bool) -> Any:
        store.claim(uuids[0], ask(host))
        return [[selection(host)]]

    return select


def no_valid_host(*args: Any, **kwargs: Any) -> Any:
    raise NoValidHost(details="0/4 hosts available: 4 host already tried")


def refused(exc: Exception) -> Any:
    """A scheduler that refuses the retry (its spec fails validation or policy)."""

    def select(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return select


INVALID = InvalidRequest(
    reason="flavor.extra_specs 'pci_passthrough:alias' names PCI alias "
    "'gpu', which is not configured"
)
FORBIDDEN = Forbidden(reason="forcing a host requires an admin context")


@dataclass(frozen=True)
class RescheduleCase:
    name: str
    alternates: tuple[str, ...] = ("h2", "h3")
    taken: tuple[str, ...] = ()  # alternates filled by someone else meanwhile
    held_on: str | None = None  # the instance holds a claim here already
    attempts: int = 0  # before this failure
    return_alternates: bool = True
    scheduler: Any = None  # select_destinations answer (alternates off)
    built_on: str | None = None  # where the next build is cast
    remaining: tuple[str, ...] = ()  # with these alternates
    state: str = BUILDING
    fault: str | None = None
    asks_scheduler: bool = False
    #: The attempt is recorded and another host tried (a reschedule counted).
    rescheduled: bool = True


RESCHEDULE_CASES = [
    RescheduleCase("next-alternate", built_on="h2", remaining=("h3",)),
    RescheduleCase("alternate-taken-meanwhile-is-skipped", taken=("h2",), built_on="h3"),
    # Alternates that cannot be claimed are no attempts: fewer than
    # max_attempts builds failed, the scheduler is asked again.
    RescheduleCase(
        "every-alternate-taken-asks-the-scheduler-again",
        taken=("h2", "h3"),
        scheduler="h4",
        built_on="h4",
        asks_scheduler=True,
    ),
    RescheduleCase(
        "no-alternates-left-asks-the-scheduler-again",
        alternates=(),
        scheduler=no_valid_host,
        state=ERROR,
        fault=NoValidHost.USER_MESSAGE,
        asks_scheduler=True,
    ),
    RescheduleCase(
        "every-alternate-taken-after-max-attempts",
        taken=("h2", "h3"),
        attempts=2,
        scheduler="h4",
        state=ERROR,
        fault=MaxRetriesExceeded.USER_MESSAGE,
    ),
    RescheduleCase(
        "no-alternates-left-after-max-attempts",
        alternates=(),
        attempts=2,
        scheduler="h4",
        state=ERROR,
        fault=MaxRetriesExceeded.USER_MESSAGE,
    ),
    RescheduleCase(
        "alternates-left-after-max-attempts-are-still-tried",
        attempts=2,
        built_on="h2",
        remaining=("h3",),
    ),
    RescheduleCase(
        "alternates-off-max-attempts-reached",
        attempts=2,
        return_alternates=False,
        scheduler="h4",
        state=ERROR,
        fault=MaxRetriesExceeded.USER_MESSAGE,
        rescheduled=False,
    ),
    RescheduleCase("superseded-by-a-re-driven-copy", held_on="h4", rescheduled=False),
    RescheduleCase(
        "alternates-off-asks-the-scheduler",
        return_alternates=False,
        scheduler="h4",
        built_on="h4",
        asks_scheduler=True,
    ),
    RescheduleCase(
        "alternates-off-no-valid-host",
        return_alternates=False,
        scheduler=no_valid_host,
        state=ERROR,
        fault=NoValidHost.USER_MESSAGE,
        asks_scheduler=True,
    ),
    RescheduleCase(
        "alternates-off-retry-refused-at-validation",
        return_alternates=False,
        scheduler=refused(INVALID),
        state=ERROR,
        fault=INVALID.message,
        asks_scheduler=True,
    ),
    RescheduleCase(
        "alternates-off-retry-forbidden",
        return_alternates=False,
        scheduler=refused(FORBIDDEN),
        state=ERROR,
        fault=FORBIDDEN.message,
        asks_scheduler=True,
    ),
]


@pytest.mark.parametrize("case", RESCHEDULE_CASES, ids=lambda c: c.name)
def test_reschedule_of_a_build(case: RescheduleCase) -> None:
    store = cloud("h1", "h2", "h3", "h4")
    uuid = building(store, attempts=case.attempts, tried_hosts=("h0",) * case.attempts)
    for name in case.taken:
        fill(store, name)
    if case.held_on:
        store.claim(uuid, ask(case.held_on))
    answer = (
        select_on(store, case.scheduler) if isinstance(case.scheduler, str) else case.scheduler
    )
    scheduler = Recorded(select_destinations=answer)
    conductor, compute = endpoint(store, scheduler, return_alternates=case.return_alternates)
    reschedules, exhausted = Growth("conductor_reschedules"), Growth("conductor_retries_exhausted")

    conductor.reschedule(
        CTXT,
        uuid,
        SPEC.to_primitive(),
        "h1",
        "boom",
        [selection(h).to_primitive() for h in case.alternates],
    )

    record = store.get_instance(uuid)
    assert (record.state, record.fault) == (case.state, case.fault), record
    assert reschedules() == ({"build": 1} if case.rescheduled else {})
    assert exhausted() == ({"build": 1} if case.fault == MaxRetriesExceeded.USER_MESSAGE else {})
    if case.built_on is None:
        assert "build_and_run_instance" not in compute.names
        assert holder(store, uuid) == case.held_on
    else:
        (_, _, _, chosen, remaining), _ = compute.last("build_and_run_instance")
        assert chosen.host == case.built_on  # type: ignore[attr-defined]
        assert [s.host for s in remaining] == list(case.remaining)  # type: ignore[attr-defined]
        assert holder(store, uuid) == case.built_on
        assert (
            record.host,
            record.task_state,
            record.attempts,
            record.tried_hosts,
            record.deadline,
        ) == (
            case.built_on,
            SPAWNING,
            case.attempts + 1,
            ("h0",) * case.attempts + ("h1",),
            NOW + ConductorSettings().build_timeout,
        )
    if case.held_on is None and case.state == ERROR:
        assert store.get_consumer(uuid) is None
    assert ("select_destinations" in scheduler.names) is case.asks_scheduler
    if case.asks_scheduler:
        (_, spec, _), kwargs = scheduler.last("select_destinations")
        assert spec.ignore_hosts == ("h0",) * case.attempts + ("h1",)
        assert kwargs == {"return_alternates": False}


def test_a_build_forced_to_a_host_that_failed_has_nothing_else_to_ask_for() -> None:
    """Its one forced host failed: the scheduler could only say no valid host,
    so it is not asked, and the build ends as the alternates ran out."""
    store = cloud("h1", "h2")
    uuid = building(store)
    scheduler = Recorded(select_destinations=select_on(store, "h2"))
    conductor, compute = endpoint(store, scheduler)
    forced = SPEC.replace(force_hosts=("H1",))

    conductor.reschedule(CTXT, uuid, forced.to_primitive(), "h1", "boom", [])

    record = store.get_instance(uuid)
    assert (record.state, record.fault) == (ERROR, MaxRetriesExceeded.USER_MESSAGE)
    assert scheduler.calls == [] and compute.calls == []


def test_a_reschedule_for_an_instance_no_longer_building_is_ignored() -> None:
    store = cloud("h1", "h2")
    uuid = active_on(store, "h1")
    conductor, compute = endpoint(store)
    conductor.reschedule(
        CTXT, uuid, SPEC.to_primitive(), "h2", "boom", [selection("h2").to_primitive()]
    )
    assert compute.calls == [] and holder(store, uuid) == "h1"


# --- resizes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResizeResultCase:
    name: str
    success: bool
    dest: str | None = "h2"  # the instance's claim when the result arrives
    state: str = RESIZING  # the record's state
    current: bool = True  # the result is for the record's migration
    state_after: str = RESIZED
    host_after: str = "h2"
    holders_after: dict[str, str | None] = field(default_factory=dict)


RESIZE_RESULT_CASES = [
    ResizeResultCase("finished", True, holders_after={"instance": "h2", "migration": "h1"}),
    ResizeResultCase(
        "cannot-be-placed",
        False,
        dest=None,
        state_after=ACTIVE,
        host_after="h1",
        holders_after={"instance": "h1", "migration": None},
    ),
    ResizeResultCase(
        "duplicate-after-resized",
        True,
        state=RESIZED,
        holders_after={"instance": "h2", "migration": "h1"},
    ),
    ResizeResultCase(
        "late-copy-of-a-finished-resize-is-undone",
        True,
        current=False,
        state=ACTIVE,
        state_after=ACTIVE,
        host_after="h1",
        holders_after={"instance": "h1", "migration": None},
    ),
]


@pytest.mark.parametrize("case", RESIZE_RESULT_CASES, ids=lambda c: c.name)
def test_resize_result(case: ResizeResultCase) -> None:
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", case.dest)
    if not case.success:  # the scheduler handed the allocation back before saying so
        store.move_allocations(migration, uuid)
    store.update_instance(
        uuid,
        state=case.state,
        host="h2" if case.state == RESIZED else "h1",
        **({} if case.current else {"migration_uuid": None}),
    )
    conductor, _ = endpoint(store)

    conductor.resize_result(
        CTXT,
        uuid,
        migration,
        case.dest,
        case.success,
        None if case.success else NoValidHost.USER_MESSAGE,
        "details",
    )

    record = store.get_instance(uuid)
    assert (record.state, record.host) == (case.state_after, case.host_after), record
    assert {
        "instance": holder(store, uuid),
        "migration": holder(store, migration),
    } == case.holders_after
    if case.name == "finished":  # the destination that worked is an attempt, as for a build
        assert record.attempts == 1
    if not case.success:
        assert (record.fault, record.fault_details, record.migration_uuid) == (
            NoValidHost.USER_MESSAGE,
            "details",
            None,
        )


def reschedule_resize(
    conductor: ConductorEndpoint,
    uuid: str,
    migration: str,
    request: RequestSpec,
    alternates: tuple[str, ...],
) -> None:
    """The compute's answer that the resize's prep failed on h2, with ``alternates``."""
    conductor.reschedule(
        CTXT,
        uuid,
        request.to_primitive(),
        "h2",
        "boom",
        [selection(h, request).to_primitive() for h in alternates],
        migration_uuid=migration,
    )


@pytest.mark.parametrize(
    "alternates, failed_before, state, holds, cast_to",
    [
        pytest.param(("h3",), 0, RESIZING, "h3", "h3", id="next-alternate"),
        # No alternate left, fewer than max_attempts destinations failed: the
        # scheduler is asked again (it places the resize on h3).
        pytest.param((), 0, RESIZING, "h3", "h3", id="exhausted-asks-the-scheduler-again"),
        pytest.param((), 2, ACTIVE, "h1", None, id="exhausted-stays-active-on-source"),
    ],
)
def test_reschedule_of_a_resize(
    alternates: tuple[str, ...],
    failed_before: int,
    state: str,
    holds: str,
    cast_to: str | None,
) -> None:
    store = cloud("h1", "h2", "h3")
    tried = ("h0",) * failed_before
    # h2 failed and released its claim.
    uuid, migration = resizing(store, "h1", None, attempts=failed_before, tried_hosts=tried)
    scheduler = Recorded(select_destinations=select_on(store, "h3"))
    conductor, compute = endpoint(store, scheduler)
    big = SPEC.replace(flavor=BIG)
    reschedules, exhausted = Growth("conductor_reschedules"), Growth("conductor_retries_exhausted")

    reschedule_resize(conductor, uuid, migration, big, alternates)

    record = store.get_instance(uuid)
    assert (record.state, holder(store, uuid), record.tried_hosts) == (
        state,
        holds,
        (*tried, "h2"),
    )
    assert reschedules() == {"resize": 1}
    assert exhausted() == ({"resize": 1} if cast_to is None else {})
    asked = "select_destinations" in scheduler.names
    assert asked is (not alternates and cast_to is not None)
    if asked:
        (_, spec, _), _ = scheduler.last("select_destinations")
        assert "h2" in spec.ignore_hosts
    if cast_to is None:
        assert record.fault == MaxRetriesExceeded.USER_MESSAGE and record.host == "h1"
        assert record.fault_details and record.fault_details.startswith(
            "max retries exceeded: 3 destination(s) failed: h0, h0, h2"
        )
        assert store.get_consumer(migration) is None
        return
    args, _ = compute.last("prep_resize")
    assert args[1:3] == (uuid, migration) and args[5].host == cast_to  # type: ignore[attr-defined]


def test_a_resize_rescheduled_onto_its_source_keeps_anti_affinity_with_itself() -> None:
    # The instance is its anti-affinity group's member on h1, held by the
    # migration; h2 (tried, failed) released its claim; the alternate is h1.
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", None)
    store.release(migration)
    store.claim(migration, ask("h1"), GroupClaim(GROUP_UUID, "anti-affinity", "h1"))
    conductor, compute = endpoint(store)
    big = SPEC.replace(flavor=BIG, group=group("anti-affinity"))

    reschedule_resize(conductor, uuid, migration, big, ("h1",))

    record = store.get_instance(uuid)
    assert (record.state, holder(store, uuid), holder(store, migration)) == (
        RESIZING,
        "h1",
        "h1",
    )
    assert store.group_hosts(GROUP_UUID) == {"h1": 2}
    args, _ = compute.last("prep_resize")
    assert args[5].host == "h1"  # type: ignore[attr-defined]


def computes_part(store: MemoryStore, uuid: str, migration: str, confirm: bool) -> None:
    """A confirm (revert) begun by the conductor and done by the compute: the
    source's allocation dropped (handed back), before the compute reports it."""
    if confirm:
        store.update_instance(uuid, task_state=RESIZE_CONFIRMING)
        store.release(migration)
    else:
        store.update_instance(uuid, task_state=RESIZE_REVERTING)
        store.move_allocations(migration, uuid, replace=True)


@pytest.mark.parametrize(
    "unasked",
    [
        pytest.param("confirmed", id="confirmed-nobody-asked"),
        pytest.param("reverted", id="reverted-nobody-asked"),
        pytest.param("confirmed-held", id="confirmed-source-still-held"),
        pytest.param("reverted-held", id="reverted-source-not-handed-back"),
    ],
)
def test_a_confirmed_or_reverted_the_record_does_not_wait_for_changes_nothing(
    unasked: str,
) -> None:
    """Issue 28's B4: the real migration id, but no confirm (revert) begun, or
    the compute's part not done: refused, the instance stays RESIZED with
    its allocations as they were."""
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", "h2")
    store.update_instance(uuid, state=RESIZED, task_state=None, host="h2", node="h2")
    if unasked.endswith("-held"):
        store.update_instance(
            uuid,
            task_state=RESIZE_CONFIRMING if unasked.startswith("confirmed") else RESIZE_REVERTING,
        )
    before = {c.uuid: c.allocations for c in store.list_consumers()}
    conductor, _ = endpoint(store)
    with structlog.testing.capture_logs() as logs:
        if unasked.startswith("confirmed"):
            conductor.resize_confirmed(CTXT, uuid, migration)
        else:
            conductor.resize_reverted(CTXT, uuid, migration)
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.migration_uuid) == (RESIZED, "h2", migration)
    assert {c.uuid: c.allocations for c in store.list_consumers()} == before
    assert [e["event"] for e in logs] == ["step_refused"]


@pytest.mark.parametrize(
    "confirm, host, flavor",
    [
        pytest.param(True, "h2", "big", id="confirmed"),
        pytest.param(False, "h1", "test", id="reverted"),
    ],
)
def test_resize_confirmed_or_reverted(confirm: bool, host: str, flavor: str) -> None:
    store = cloud("h1", "h2")
    uuid, migration = resizing(store, "h1", "h2")
    store.update_instance(uuid, state=RESIZED, task_state=None, host="h2", node="h2")
    conductor, _ = endpoint(store)
    computes_part(store, uuid, migration, confirm)
    (conductor.resize_confirmed if confirm else conductor.resize_reverted)(CTXT, uuid, migration)
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.migration_uuid, record.source_host) == (
        ACTIVE,
        host,
        None,
        None,
    )
    assert RequestSpec.from_primitive(dict(record.request_spec or {})).flavor.name == flavor


@pytest.mark.parametrize(
    "confirm, host, zone",
    [
        pytest.param(True, "h2", "west", id="confirmed-in-the-destinations-zone"),
        pytest.param(False, "h1", "east", id="reverted-to-the-sources-zone"),
    ],
)
def test_a_resize_records_the_destinations_zone_and_a_revert_the_sources(
    confirm: bool, host: str, zone: str
) -> None:
    store = cloud("h1", "h2")
    uuid, migration = resizing(
        store, "h1", "h2", availability_zone="east", source_availability_zone="east"
    )
    conductor, _ = endpoint(store)
    conductor.resize_result(CTXT, uuid, migration, "h2", True, availability_zone="west")
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.availability_zone) == (RESIZED, "h2", "west")
    computes_part(store, uuid, migration, confirm)
    (conductor.resize_confirmed if confirm else conductor.resize_reverted)(CTXT, uuid, migration)
    record = store.get_instance(uuid)
    assert (record.state, record.host, record.availability_zone) == (ACTIVE, host, zone)
    assert record.source_availability_zone is None


# --- what a user reads ------------------------------------------------------------------

HOSTS = ("h1", "h2", "h3", "h4")


def _every_alternate_taken(store: MemoryStore) -> str:
    uuid = building(store, attempts=2, tried_hosts=("h4", "h4"))
    fill(store, "h2")
    fill(store, "h3")
    endpoint(store)[0].reschedule(
        CTXT,
        uuid,
        SPEC.to_primitive(),
        "h1",
        "boom on h1",
        [selection(h).to_primitive() for h in ("h2", "h3")],
    )
    return uuid


def _build_retry_finds_no_host(store: MemoryStore) -> str:
    uuid = building(store)
    conductor, _ = endpoint(
        store, Recorded(select_destinations=no_valid_host), return_alternates=False
    )
    conductor.reschedule(CTXT, uuid, SPEC.to_primitive(), "h1", "boom on h1", [])
    return uuid


def _resize_alternates_exhausted(store: MemoryStore) -> str:
    uuid, migration = resizing(store, "h1", None, attempts=2, tried_hosts=("h4", "h4"))
    big = SPEC.replace(flavor=BIG)
    fill(store, "h3")
    endpoint(store)[0].reschedule(
        CTXT,
        uuid,
        big.to_primitive(),
        "h2",
        "boom on h2",
        [selection("h3", big).to_primitive()],
        migration_uuid=migration,
    )
    return uuid


def _resize_retry_finds_no_host(store: MemoryStore) -> str:
    uuid, migration = resizing(store, "h1", None)
    conductor, _ = endpoint(
        store, Recorded(select_destinations=no_valid_host), return_alternates=False
    )
    conductor.reschedule(
        CTXT,
        uuid,
        SPEC.replace(flavor=BIG).to_primitive(),
        "h2",
        "boom on h2",
        [],
        migration_uuid=migration,
    )
    return uuid


@pytest.mark.parametrize(
    "provoke, state, fault, details",
    [
        pytest.param(
            _every_alternate_taken,
            ERROR,
            MaxRetriesExceeded.USER_MESSAGE,
            "alternates refused: h2 (CapacityExceeded), h3 (CapacityExceeded)",
            id="build-every-alternate-taken",
        ),
        pytest.param(
            _build_retry_finds_no_host,
            ERROR,
            NoValidHost.USER_MESSAGE,
            "0/4 hosts available",
            id="build-retry-through-the-scheduler",
        ),
        pytest.param(
            _resize_alternates_exhausted,
            ACTIVE,
            MaxRetriesExceeded.USER_MESSAGE,
            "alternates refused: h3 (CapacityExceeded)",
            id="resize-alternates-taken",
        ),
        pytest.param(
            _resize_retry_finds_no_host,
            ACTIVE,
            NoValidHost.USER_MESSAGE,
            "0/4 hosts available",
            id="resize-retry-through-the-scheduler",
        ),
    ],
)
def test_a_failed_reschedule_tells_the_user_only_the_generic_reason(
    provoke: Any, state: str, fault: str, details: str
) -> None:
    store = cloud(*HOSTS)
    record = store.get_instance(provoke(store))
    assert (record.state, record.fault) == (state, fault)
    assert not [h for h in HOSTS if h in (record.fault or "")], record.fault
    assert details in (record.fault_details or ""), record.fault_details


def test_a_build_result_for_an_instance_with_no_record_is_one_warning() -> None:
    store = cloud("h1")
    conductor, _ = endpoint(store)
    with structlog.testing.capture_logs() as logs:
        conductor.build_succeeded(CTXT, str(uuidlib.uuid4()), "h1", "h1")
    assert [(e["event"], e["log_level"], e["why"]) for e in logs] == [
        ("step_refused", "warning", "no instance record")
    ]
    assert store.list_instances() == []
