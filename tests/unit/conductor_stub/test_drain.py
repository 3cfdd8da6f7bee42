"""Draining a host: disabled first, its ACTIVE instances moved a few at a time
(cold migrations confirmed, or live migrations), failures reported with the
record's fault, other states skipped, and the report's exit status."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from conductor_stub.drain import (
    DRAIN_REASON,
    FAILED,
    MOVED,
    SKIPPED,
    TIMED_OUT,
    Drainer,
    DrainReport,
    format_outcome,
    format_summary,
)
from conductor_stub.records import ConductorSettings
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from scheduler.cmd import admin
from scheduler.exceptions import NotFound, NoValidHost
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    MIGRATING,
    RESIZE_CONFIRMING,
    RESIZED,
    RESIZING,
    InstanceRecord,
)
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import active_on, building, cloud, selection
from tests.unit.factories import NOW, Recorded


class Cloud:
    """The in-memory store, recorded clients, and a ``sleep`` that plays the
    computes: each call advances every move in flight by one step."""

    def __init__(self, *hosts: str, select: Callable[..., object] | None = None) -> None:
        self.store: MemoryStore = cloud(*hosts)
        self.scheduler = Recorded(
            select_destinations=select or (lambda *a, **k: [[selection("h2")]])
        )
        self.compute = Recorded()
        self.events: list[str] = []
        self.no_room: set[str] = set()  # instances the scheduler finds no host for
        self.frozen = False  # the computes answer nothing
        self.left_alone: set[str] = set()  # instances no compute advances
        self.in_flight_seen = 0
        self.ticks = 0
        settings = ConductorSettings(resize_timeout=30, live_migration_timeout=30)
        self.resizer = Resizer(
            self.store,
            self.scheduler,  # type: ignore[arg-type]
            self.compute,  # type: ignore[arg-type]
            settings,
            clock=lambda: NOW,
        )
        self.migrator = LiveMigrator(
            self.store,
            self.scheduler,  # type: ignore[arg-type]
            self.compute,  # type: ignore[arg-type]
            settings,
            clock=lambda: NOW,
        )

    def drainer(self, parallel: int = 4) -> Drainer:
        return Drainer(
            self.store,
            self.resizer,
            self.migrator,
            parallel=parallel,
            sleep=self.tick,
            monotonic=lambda: float(self.ticks),
        )

    def tick(self, _: float) -> None:
        self.ticks += 1
        moving = [r for r in self.store.list_instances() if r.state in (RESIZING, MIGRATING)]
        self.in_flight_seen = max(self.in_flight_seen, len(moving))
        if self.frozen:
            return
        for record in self.store.list_instances():
            self._advance(record)

    def _advance(self, r: InstanceRecord) -> None:
        if r.uuid in self.left_alone:
            return
        if r.state == RESIZING and r.uuid in self.no_room:
            self.events.append(f"failed {r.uuid}")
            self.store.update_instance(
                r.uuid, state=ACTIVE, task_state=None, fault="No valid host was found."
            )
        elif r.state == RESIZING:
            self.events.append(f"resized {r.uuid}")
            self.store.update_instance(r.uuid, state=RESIZED, task_state=None, host="h2")
        elif r.state == RESIZED and r.task_state == RESIZE_CONFIRMING:
            self.events.append(f"confirmed {r.uuid}")
            self.store.update_instance(r.uuid, state=ACTIVE, task_state=None, deadline=None)
        elif r.state == MIGRATING:
            self.events.append(f"live-migrated {r.uuid}")
            self.store.update_instance(r.uuid, state=ACTIVE, task_state=None, host="h2")


def test_the_host_is_disabled_first_then_each_instance_migrated_and_confirmed() -> None:
    c = Cloud("h1", "h2")
    uuids = sorted(active_on(c.store, "h1", name) for name in ("a", "b", "c"))
    seen: list[str] = []

    def progress(outcome: object) -> None:
        # The host is disabled before any move is cast.
        service = c.store.get_service("h1")
        assert service is not None and service.disabled
        seen.append(format_outcome(outcome))  # type: ignore[arg-type]

    report = c.drainer().drain("h1", progress=progress)

    service = c.store.get_service("h1")
    assert service is not None
    assert (service.disabled, service.disabled_reason) == (True, DRAIN_REASON)
    assert "COMPUTE_STATUS_DISABLED" in c.store.get_provider_by_name("h1").traits
    assert c.scheduler.names == ["resize"] * 3
    assert [args[1] for name, args, _ in c.scheduler.calls] == uuids
    assert c.compute.names == ["confirm_resize"] * 3  # a drain confirms
    assert [(o.uuid, o.outcome, o.host) for o in report.instances] == [
        (u, MOVED, "h2") for u in uuids
    ]
    assert seen == [f"{u} moved to h2" for u in uuids]
    assert report.summary() == {
        "moved": 3,
        "failed": 0,
        "skipped": 0,
        "timed_out": 0,
        "still_on_host": 0,
        "active_left": 0,
    }
    assert (report.drained, report.exit_code) == (True, 0)
    assert format_summary(report).startswith("host h1 drained: moved 3, failed 0")


def test_live_drains_by_live_migration_without_a_confirm() -> None:
    c = Cloud("h1", "h2")
    uuid = active_on(c.store, "h1")

    report = c.drainer().drain("h1", live=True)

    assert c.scheduler.names == ["select_destinations"]
    assert c.compute.names == ["check_can_live_migrate_destination"]
    assert c.events == [f"live-migrated {uuid}"]
    assert [(o.outcome, o.host) for o in report.instances] == [(MOVED, "h2")]
    assert report.to_primitive()["live"] is True and report.exit_code == 0


def test_moves_run_a_few_at_a_time() -> None:
    c = Cloud("h1", "h2")
    for n in range(4):
        active_on(c.store, "h1", f"i{n}")

    report = c.drainer(parallel=2).drain("h1")

    assert c.in_flight_seen == 2
    assert report.count(MOVED) == 4 and report.exit_code == 0


def test_an_instance_that_cannot_move_is_reported_with_its_fault() -> None:
    c = Cloud("h1", "h2")
    stuck = active_on(c.store, "h1", "a")
    moved = active_on(c.store, "h1", "b")
    c.no_room.add(stuck)

    report = c.drainer().drain("h1")

    outcomes = {o.uuid: o for o in report.instances}
    assert (outcomes[stuck].outcome, outcomes[stuck].host, outcomes[stuck].reason) == (
        FAILED,
        "h1",
        "No valid host was found.",
    )
    assert format_outcome(outcomes[stuck]).endswith("could not move: No valid host was found.")
    assert outcomes[moved].outcome == MOVED
    assert (report.still_on_host, report.active_left, report.exit_code) == (1, 1, 1)
    assert "not drained" in format_summary(report)


def test_a_live_migration_with_no_valid_host_fails_back_to_the_source() -> None:
    def no_host(*_: object, **__: object) -> object:
        raise NoValidHost(details="0/1 hosts available: 1 insufficient MEMORY_MB")

    c = Cloud("h1", "h2", select=no_host)
    uuid = active_on(c.store, "h1")

    report = c.drainer().drain("h1", live=True)

    [outcome] = report.instances
    assert (outcome.uuid, outcome.outcome, outcome.state, outcome.host) == (
        uuid,
        FAILED,
        ACTIVE,
        "h1",
    )
    assert outcome.reason and "No valid host" in outcome.reason
    assert report.exit_code == 1


@pytest.mark.parametrize("state", [BUILDING, RESIZING, RESIZED, "ERROR"])
def test_instances_in_other_states_are_skipped_with_their_state(state: str) -> None:
    c = Cloud("h1", "h2")
    other = building(c.store, "other", state=state, host="h1")
    c.left_alone.add(other)
    active = active_on(c.store, "h1", "a")

    report = c.drainer().drain("h1")

    outcomes = {o.uuid: o for o in report.instances}
    assert (outcomes[other].outcome, outcomes[other].state) == (SKIPPED, state)
    assert format_outcome(outcomes[other]) == f"{other} skipped: {state}"
    assert outcomes[active].outcome == MOVED
    assert [args[1] for _, args, _ in c.scheduler.calls] == [active]  # only it was moved
    # Nothing ACTIVE is left (the skipped one still counts as on the host).
    assert report.still_on_host == 1 and report.exit_code == 0


def test_wait_moves_an_instance_that_becomes_active_on_the_host() -> None:
    c = Cloud("h1", "h2")
    late = building(c.store, "late", host="h1")
    ticks = c.tick

    def tick(poll: float) -> None:
        ticks(poll)
        if c.ticks == 2:  # its build ends on the host while the drain waits
            c.store.update_instance(late, state=ACTIVE, task_state=None, deadline=None)

    c.tick = tick  # type: ignore[method-assign]

    report = c.drainer().drain("h1", wait=True)

    assert [(o.uuid, o.outcome, o.host) for o in report.instances] == [(late, MOVED, "h2")]
    assert report.exit_code == 0


def test_a_drain_that_times_out_says_so_and_exits_1() -> None:
    c = Cloud("h1", "h2")
    uuid = active_on(c.store, "h1")
    c.frozen = True

    report = c.drainer().drain("h1", timeout=5)

    [outcome] = report.instances
    assert (outcome.uuid, outcome.outcome, outcome.state) == (uuid, TIMED_OUT, RESIZING)
    assert report.timed_out and report.exit_code == 1
    assert report.to_primitive()["summary"]["timed_out"] == 1


def test_an_unknown_host_is_refused_and_nothing_changes() -> None:
    c = Cloud("h1", "h2")
    uuid = active_on(c.store, "h1")
    with pytest.raises(NotFound):
        c.drainer().drain("h9")
    assert c.scheduler.calls == [] and c.store.get_instance(uuid).state == ACTIVE
    assert not any(s.disabled for s in c.store.list_services())


def test_an_empty_host_is_drained_at_once() -> None:
    c = Cloud("h1", "h2")
    report = c.drainer().drain("h1")
    assert isinstance(report, DrainReport) and report.instances == ()
    assert (report.exit_code, c.ticks) == (0, 0)


# --- the command's arguments ---------------------------------------------------------


def drain_args(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scheduler-admin")
    admin._add_commands(parser.add_subparsers(dest="name"))
    return parser.parse_args(["host", "drain", *args])


def test_host_drain_defaults() -> None:
    parsed = drain_args("h1")
    assert (parsed.hostname, parsed.live, parsed.wait, parsed.timeout, parsed.parallel) == (
        "h1",
        False,
        False,
        600.0,
        4,
    )
    assert drain_args("h1", "--live", "--parallel", "8", "--timeout", "90").parallel == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (("h1", "--timeout", "0"), "--timeout: must be more than 0"),
        (("h1", "--timeout", "soon"), "--timeout: expected seconds"),
        (("h1", "--parallel", "0"), "--parallel: must be at least 1"),
        ((), "the following arguments are required: HOST"),
    ],
)
def test_host_drain_refuses_bad_arguments(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        drain_args(*args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
