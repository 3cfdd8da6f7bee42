"""``conductor-stub list`` and ``show``: what each selects and prints, the admin
details only with ``--admin``, and an unknown uuid (on the in-memory store)."""

from __future__ import annotations

import argparse
import json
import time
import uuid as uuidlib
from types import SimpleNamespace
from typing import Any

import pytest

from conductor_stub import cmd, commands
from scheduler.cmd import _commands
from scheduler.exceptions import InstanceNotFound
from scheduler.objects import ACTIVE, BUILDING, ERROR, PENDING, AllocationRequest, InstanceRecord
from scheduler.priority import PriorityClass, record_fields
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import SPEC
from tests.unit.factories import host, populate, uuid_of


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    made = MemoryStore()
    monkeypatch.setattr(commands, "make_store", lambda conf: made)
    return made


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``conductor-stub ARGS``, parsed by the command's own parser; what it printed."""
    parser = argparse.ArgumentParser()
    cmd._add_commands(parser.add_subparsers(dest="name"))
    command: Any = parser.parse_args(list(args))
    handler = commands.list_instances if command.name == "list" else commands.show
    result = handler(SimpleNamespace(command=command))  # type: ignore[arg-type]
    assert _commands.emit(result, _commands.fmt_of(command)) == 0
    return capsys.readouterr().out


def record(
    store: MemoryStore,
    state: str,
    project: str = "p",
    host: str | None = None,
    at: float = 1_700_000_000.0,
) -> str:
    uuid = str(uuidlib.uuid4())
    spec = SPEC.replace(project_id=project).to_primitive()
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid,
                state=state,
                task_state=None,
                host=host,
                node=host,
                availability_zone="az1" if host else None,
                request_id="req-1",
                attempts=2,
                tried_hosts=("cmp-x",) if host else (),
                fault=None if host else "No valid host was found.",
                fault_details=None if host else "0/3 hosts available: 3 disabled",
                request_spec=spec,
                created_at=at,
                updated_at=at,
                **(SPOT if host else {}),
            )
        ]
    )
    return uuid


#: The record's priority fields of an instance of the class ``spot``.
SPOT = record_fields(PriorityClass("spot", 10, preemptible=True))


@pytest.mark.parametrize(
    "args, wanted",
    [
        pytest.param((), {"a1", "a2", "e1"}, id="every-live-one"),
        pytest.param(("--state", "error"), {"e1"}, id="state"),
        pytest.param(("--host", "cmp-b"), {"a2"}, id="host"),
        pytest.param(("--project", "q"), {"a2", "e1"}, id="project"),
        pytest.param(("--project", "q", "--state", "ACTIVE"), {"a2"}, id="all-must-match"),
    ],
)
def test_list_selects(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], wanted: set[str]
) -> None:
    made = {
        "a1": record(store, ACTIVE, host="cmp-a"),
        "a2": record(store, ACTIVE, project="q", host="cmp-b"),
        "e1": record(store, ERROR, project="q"),
    }
    listed = json.loads(run(capsys, "list", "--json", *args))["instances"]
    assert {r["uuid"] for r in listed} == {made[n] for n in wanted}
    row = next(r for r in listed if r["uuid"] == made.get("a2")) if "a2" in wanted else None
    if row is not None:
        assert row == {
            "uuid": made["a2"],
            "state": ACTIVE,
            "task_state": None,
            "host": "cmp-b",
            "availability_zone": "az1",
            "flavor": SPEC.flavor.name,
            "priority_class": "spot",
            "priority": 10,
            "preemptible": True,
            "project_id": "q",
            "fault": None,
            "created_at": 1_700_000_000.0,
            "updated_at": 1_700_000_000.0,
        }


def test_list_prints_a_table(store: MemoryStore, capsys: pytest.CaptureFixture[str]) -> None:
    uuid = record(store, ACTIVE, host="cmp-a")
    lines = run(capsys, "list").splitlines()
    assert lines[0].split() == [
        "uuid", "state", "task", "host", "zone", "flavor", "class", "project", "updated", "(UTC)",
        "fault",
    ]  # fmt: skip
    assert lines[1].split() == [
        uuid, ACTIVE, "-", "cmp-a", "az1", SPEC.flavor.name, "spot", "p", "2023-11-14",
        "22:13:20", "-",
    ]  # fmt: skip
    assert lines[-1] == "1 instance(s)"
    assert run(capsys, "list", "--state", "ERROR") == "no instances\n"


def test_list_sorts_and_shows_each_fault_and_last_change(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The latest failures first, with what their user was told: a listing
    sorted by uuid, with no fault or time, could not answer that."""
    old = record(store, ERROR, at=1_700_000_000.0)
    new = record(store, ERROR, at=1_700_000_100.0)
    ok = record(store, ACTIVE, host="cmp-a", at=1_700_000_050.0)
    rows = run(capsys, "list", "--sort", "updated").splitlines()[1:-1]
    assert [row.split()[0] for row in rows] == [new, ok, old]
    assert rows[0].endswith("22:15:00  No valid host was found.")
    by_uuid = json.loads(run(capsys, "list", "--json"))["instances"]
    assert [r["uuid"] for r in by_uuid] == sorted([old, new, ok])
    assert {r["uuid"]: r["fault"] for r in by_uuid}[new] == "No valid host was found."


def test_show_leaves_the_admin_details_to_admin(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    uuid = record(store, ERROR)
    user = json.loads(run(capsys, "show", uuid, "--json"))
    assert user["fault"] == "No valid host was found." and user["request_id"] == "req-1"
    assert user["attempts"] == 2 and user["flavor"] == SPEC.flavor.name
    assert not {"fault_details", "tried_hosts", "allocations", "node"} & set(user)
    admin = json.loads(run(capsys, "show", uuid, "--json", "--admin"))
    assert admin["fault_details"] == "0/3 hosts available: 3 disabled"
    text = run(capsys, "show", uuid)
    assert "  request id  req-1" in text.splitlines() and "0/3 hosts" not in text
    text = run(capsys, "show", uuid, "--admin")
    assert "  fault details  0/3 hosts available: 3 disabled   [admin only]" in text.splitlines()


def test_show_and_list_say_the_same_time_in_utc(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One clock for both commands, whatever the operator's time zone."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        uuid = record(store, ERROR, at=1_700_000_000.0)
        shown = run(capsys, "show", uuid).splitlines()
        listed = run(capsys, "list").splitlines()[1]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert "  updated     2023-11-14 22:13:20 UTC" in shown
    assert "2023-11-14 22:13:20" in listed


@pytest.mark.parametrize(
    "placed, shown, line",
    [
        pytest.param(
            True,
            {"priority_class": "spot", "priority": 10, "preemptible": True},
            "  priority    spot (priority 10, preemptible)",
            id="a-class",
        ),
        pytest.param(
            False,
            {"priority_class": None, "priority": 0, "preemptible": False},
            "  priority    - (priority 0)",
            id="no-class",
        ),
    ],
)
def test_show_says_the_class_the_instance_was_scheduled_with(
    store: MemoryStore,
    capsys: pytest.CaptureFixture[str],
    placed: bool,
    shown: dict[str, Any],
    line: str,
) -> None:
    uuid = record(store, ACTIVE if placed else ERROR, host="cmp-a" if placed else None)
    view = json.loads(run(capsys, "show", uuid, "--json"))
    assert {k: view[k] for k in shown} == shown
    assert line in run(capsys, "show", uuid).splitlines()


def test_show_of_an_unknown_uuid_is_not_found(store: MemoryStore) -> None:
    parser = argparse.ArgumentParser()
    cmd._add_commands(parser.add_subparsers(dest="name"))
    command: Any = parser.parse_args(["show", str(uuidlib.uuid4())])
    with pytest.raises(InstanceNotFound):
        commands.show(SimpleNamespace(command=command))  # type: ignore[arg-type]


def test_show_names_the_host_a_building_instance_holds_its_claim_on(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """run_instance claims and casts the build; the record names no host until
    the compute reports: the admin view says where the claim is held."""
    populate(store, [host("cmp-1")])
    uuid = record(store, BUILDING, host=None)
    store.claim(uuid, AllocationRequest({uuid_of("cmp-1"): SPEC.resources}, "p", "u"))
    admin = json.loads(run(capsys, "show", uuid, "--json", "--admin"))
    assert (admin["host"], admin["claimed_host"]) == (None, "cmp-1")
    text = run(capsys, "show", uuid, "--admin")
    assert "  host           - (its claim is held on cmp-1; no build reported yet)" in text
    assert "claimed_host" not in json.loads(run(capsys, "show", uuid, "--json"))


def test_show_and_list_say_how_a_pending_instance_waits(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    uuid = record(store, PENDING)
    since = 1_700_000_000.0
    store.update_instance(uuid, max_wait=600.0, waiting_since=since, deadline=since + 600)
    view = json.loads(run(capsys, "show", uuid, "--json"))
    assert (view["state"], view["max_wait"], view["waits_until"]) == (
        PENDING,
        600.0,
        since + 600,
    )
    text = run(capsys, "show", uuid).splitlines()
    assert (
        "  waiting     for capacity, up to 600 s; since 2023-11-14 22:13:20, "
        "until 2023-11-14 22:23:20" in text
    ), text
    assert run(capsys, "list", "--state", "pending", "-f", "value").split() == [
        uuid,
        PENDING,
        "-",
    ]
