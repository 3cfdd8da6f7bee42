"""The sweeper: requests past their deadline are re-driven, then given up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from conductor_stub.records import ConductorSettings
from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import RequestTimedOut
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    ERROR,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
)
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import (
    BIG,
    REQUEST_ID,
    ask,
    building,
    cloud,
    holder,
    resizing,
)
from tests.unit.factories import NOW, Recorded
from tests.unit.metering import Growth

#: The sweep's counts that are re-drives (the others are requests given up or finished).
REDRIVE_KINDS = {
    "run_instance",
    "resize",
    "confirm",
    "revert",
    "terminate",
    "shelve",
    "evacuate",
    "live_migrate",
}

LATER = NOW + 100  # every deadline the helpers set (NOW + 60) has passed
SETTINGS = ConductorSettings(build_timeout=10, resize_timeout=20, max_redrives=3)


def sweeper(store: MemoryStore, clock: float = LATER) -> tuple[Sweeper, Recorded, Recorded]:
    scheduler, compute = Recorded(), Recorded()
    resizer = Resizer(
        store,
        scheduler,
        compute,
        SETTINGS,  # type: ignore[arg-type]
        clock=lambda: clock,
    )
    return (
        Sweeper(
            store,
            scheduler,
            resizer,
            SETTINGS,  # type: ignore[arg-type]
            clock=lambda: clock,
        ),
        scheduler,
        compute,
    )


def boot(store: MemoryStore, redrives: int, claim: bool) -> str:
    uuid = building(store, redrives=redrives, tried_hosts=("h3",))
    if claim:
        store.claim(uuid, ask("h1"))
    return uuid


def resize(store: MemoryStore, redrives: int, claim: bool) -> str:
    return resizing(store, "h1", "h2" if claim else None, redrives=redrives)[0]


def finish(task_state: str) -> Any:
    def make(store: MemoryStore, redrives: int, claim: bool) -> str:
        uuid, _ = resizing(store, "h1", "h2")
        store.update_instance(
            uuid,
            state=RESIZED,
            task_state=task_state,
            host="h2",
            node="h2",
            redrives=redrives,
            deadline=NOW + 60,
        )
        return uuid

    return make


def given_up(store: MemoryStore, redrives: int, claim: bool) -> str:
    uuid = building(store, state=ERROR, fault=RequestTimedOut.USER_MESSAGE)
    if claim:  # a late copy claimed for it after it was given up
        store.claim(uuid, ask("h1"))
    return uuid


@dataclass(frozen=True)
class SweepCase:
    name: str
    make: Any
    redrives: int = 0
    claim: bool = True
    sent: tuple[str, ...] = ()  # RPCs re-sent (scheduler and compute)
    state: str = BUILDING
    holder: str | None = "h1"  # where the instance's allocation is afterwards
    fault: str | None = None
    redrives_after: int = 1
    deadline: float | None = None
    counts: dict[str, int] = field(default_factory=dict)


SWEEP_CASES = [
    SweepCase(
        "boot-redriven",
        boot,
        sent=("run_instance",),
        deadline=LATER + 10,
        counts={"run_instance": 1},
    ),
    SweepCase(
        "boot-timed-out-releases-the-claim",
        boot,
        redrives=3,
        state=ERROR,
        holder=None,
        fault=RequestTimedOut.USER_MESSAGE,
        redrives_after=3,
        deadline=LATER + 10,
        counts={"timed_out": 1},
    ),
    SweepCase(
        "resize-redriven",
        resize,
        sent=("resize",),
        state=RESIZING,
        holder="h2",
        deadline=LATER + 20,
        counts={"resize": 1},
    ),
    SweepCase(
        "resize-timed-out-stays-active-on-source",
        resize,
        redrives=3,
        state=ACTIVE,
        fault=RequestTimedOut.USER_MESSAGE,
        redrives_after=3,
        counts={"timed_out": 1},
    ),
    SweepCase(
        "confirm-redriven",
        finish(RESIZE_CONFIRMING),
        sent=("confirm_resize",),
        state=RESIZED,
        holder="h2",
        deadline=LATER + 20,
        counts={"confirm": 1},
    ),
    SweepCase(
        "confirm-done-by-the-conductor",
        finish(RESIZE_CONFIRMING),
        redrives=3,
        state=ACTIVE,
        holder="h2",
        redrives_after=3,
        counts={"confirm_done_here": 1},
    ),
    SweepCase(
        "revert-done-by-the-conductor",
        finish(RESIZE_REVERTING),
        redrives=3,
        state=ACTIVE,
        redrives_after=3,
        counts={"revert_done_here": 1},
    ),
    SweepCase(
        "given-up-instance-cleaned-up",
        given_up,
        state=ERROR,
        holder=None,
        fault=RequestTimedOut.USER_MESSAGE,
        redrives_after=0,
        counts={"cleaned_up": 1},
    ),
]


@pytest.mark.parametrize("case", SWEEP_CASES, ids=lambda c: c.name)
def test_sweep(case: SweepCase) -> None:
    store = cloud("h1", "h2", "h3")
    uuid = case.make(store, case.redrives, case.claim)
    sweep, scheduler, compute = sweeper(store)
    redrives, timed_out = Growth("conductor_redrives"), Growth("conductor_requests_timed_out")

    assert sweep.sweep() == 1

    record = store.get_instance(uuid)
    assert (record.state, holder(store, uuid), record.fault, record.redrives, record.deadline) == (
        case.state,
        case.holder,
        case.fault,
        case.redrives_after,
        case.deadline,
    ), record
    assert (*scheduler.names, *compute.names) == case.sent
    assert dict(sweep.counts) == case.counts
    # On /metrics: each re-drive by its kind; each request given up, by its kind.
    assert redrives() == {k: n for k, n in case.counts.items() if k in REDRIVE_KINDS}
    assert sum(timed_out().values()) == case.counts.get("timed_out", 0)
    if record.state == ACTIVE:
        assert record.migration_uuid is None and store.list_consumers() == [
            store.get_consumer(uuid)
        ]


def test_a_redriven_boot_is_the_same_request_for_one_instance() -> None:
    store = cloud("h1", "h2", "h3")
    uuid = boot(store, 0, claim=False)
    sweep, scheduler, _ = sweeper(store)
    sweep.sweep()
    (ctxt, spec, uuids), _ = scheduler.last("run_instance")
    assert ctxt.request_id == REQUEST_ID  # type: ignore[attr-defined]
    assert (spec.num_instances, spec.ignore_hosts, uuids) == (  # type: ignore[attr-defined]
        1,
        ("h3",),
        [uuid],
    )


@pytest.mark.parametrize("is_admin", [True, False])
def test_a_redriven_boot_has_the_rights_it_was_made_with(is_admin: bool) -> None:
    # An admin's boot may force a host; re-driven without the admin flag, the
    # worker would refuse it (Forbidden) and the instance end in ERROR.
    store = cloud("h1", "h2")
    building(store, roles=("admin",) if is_admin else ("member",), is_admin=is_admin)
    sweep, scheduler, _ = sweeper(store)
    sweep.sweep()
    (ctxt, _spec, _uuids), _ = scheduler.last("run_instance")
    assert (ctxt.is_admin, ctxt.roles) == (  # type: ignore[attr-defined]
        is_admin,
        ["admin"] if is_admin else ["member"],
    )


def test_a_redriven_resize_names_the_same_migration() -> None:
    store = cloud("h1", "h2")
    uuid = resize(store, 0, claim=True)
    sweep, scheduler, _ = sweeper(store)
    sweep.sweep()
    (ctxt, resized, source, flavor, spec), _ = scheduler.last("resize")
    assert (ctxt.request_id, resized, source, flavor) == (  # type: ignore[attr-defined]
        REQUEST_ID,
        uuid,
        "h1",
        BIG,
    )
    assert spec.flavor == BIG  # type: ignore[attr-defined]


def test_nothing_before_the_deadline() -> None:
    store = cloud("h1")
    boot(store, 0, claim=True)
    sweep, scheduler, _ = sweeper(store, clock=NOW + 59)
    assert sweep.sweep() == 0 and scheduler.calls == []


def test_a_restarted_conductor_carries_on_from_the_store() -> None:
    """Each sweep is a new conductor: the pending set and the re-drive count
    live in the record, so the request is given up after max_redrives in all."""
    store = cloud("h1")
    uuid = boot(store, 0, claim=False)
    clock = LATER
    for _ in range(SETTINGS.max_redrives):
        sweep, scheduler, _ = sweeper(store, clock)
        sweep.sweep()
        assert scheduler.names == ["run_instance"]
        clock += SETTINGS.build_timeout
    sweep, scheduler, _ = sweeper(store, clock)
    sweep.sweep()
    record = store.get_instance(uuid)
    assert (record.state, record.redrives, scheduler.calls) == (ERROR, 3, [])
    assert record.fault_details and "after 3 re-drive(s)" in record.fault_details
