"""``conductor-stub delete``: its refusals, what ``--all`` takes, and what
``--wait`` says when it runs out (on the in-memory store; the compute client
a recorder, so no compute ever answers)."""

from __future__ import annotations

import argparse
import uuid as uuidlib
from types import SimpleNamespace
from typing import Any

import pytest

from conductor_stub import cmd, commands
from conductor_stub.records import ConductorSettings
from scheduler import rpc
from scheduler.cmd import _commands
from scheduler.objects import ACTIVE, DELETED, DELETING, ERROR, InstanceRecord
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import SPEC
from tests.unit.factories import Recorded


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    made = MemoryStore()
    monkeypatch.setattr(commands, "make_store", lambda conf: made)
    monkeypatch.setattr(commands, "conductor_settings", lambda conf: ConductorSettings())
    monkeypatch.setattr(rpc, "get_transport", lambda conf: Recorded())
    monkeypatch.setattr(
        rpc,
        "ComputeClient",
        lambda transport, resolve, topic, retry=None, version_cap=None: Recorded(),
    )
    return made


def run(*args: str) -> int:
    """``conductor-stub delete ARGS``, parsed by the command's own parser."""
    parser = argparse.ArgumentParser()
    cmd._add_commands(parser.add_subparsers(dest="name"))
    command: Any = parser.parse_args(["delete", *args])
    conf = SimpleNamespace(
        command=command,
        compute=SimpleNamespace(topic=rpc.COMPUTE_TOPIC),
        upgrade_levels=SimpleNamespace(compute=None),
    )
    return _commands.emit(commands.delete(conf), _commands.fmt_of(command))  # type: ignore[arg-type]


def record(store: MemoryStore, state: str, project: str = "p", host: str | None = None) -> str:
    uuid = str(uuidlib.uuid4())
    spec = SPEC.replace(project_id=project).to_primitive()
    store.create_instances([InstanceRecord(uuid=uuid, state=state, host=host, request_spec=spec)])
    return uuid


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param((), "give instance uuids, or --all", id="nothing"),
        pytest.param(("--all", "x"), "give instance uuids, or --all", id="both"),
        pytest.param(
            ("x", "--state", "ERROR"), "--state and --project narrow --all only", id="filter"
        ),
    ],
)
def test_refusals_are_one_line_and_change_nothing(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    live = record(store, ACTIVE)
    assert run(*args) == 2
    assert capsys.readouterr().err == f"conductor-stub delete: {message}\n"
    assert store.get_instance(live).state == ACTIVE


def test_an_unknown_uuid_deletes_nothing(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    known, unknown = record(store, ERROR), str(uuidlib.uuid4())
    assert run(known, unknown) == 2
    assert capsys.readouterr().err == f"conductor-stub delete: no such instance: {unknown}\n"
    assert store.get_instance(known).state == ERROR


def test_an_unknown_uuid_is_said_with_its_control_characters_escaped(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("abc\x1b[31m\ndef") == 2
    assert capsys.readouterr().err == (
        "conductor-stub delete: no such instance: abc\\x1b[31m\\ndef\n"
    )


def test_all_takes_the_states_and_project_asked(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    error_p, error_q = record(store, ERROR), record(store, ERROR, project="q")
    active = record(store, ACTIVE)
    assert run("--all", "--state", "error", "--project", "p") == 0
    assert capsys.readouterr().out.split() == [error_p, DELETED]
    assert [store.get_instance(u).state for u in (error_q, active)] == [ERROR, ACTIVE]


def test_wait_that_runs_out_says_what_it_waits_on(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # No compute answers on fake://: the delete waits on h1.
    uuid = record(store, ACTIVE, host="h1")
    assert run(uuid, "--wait", "--timeout", "0.2") == 1
    assert capsys.readouterr().err == (
        f"conductor-stub delete: timed out after 0.2 s; not yet DELETED: "
        f"{uuid} ({DELETING}, waiting on h1)\n"
    )
    assert store.get_instance(uuid).state == DELETING
