"""``conductor-stub`` commands run through their dispatcher
(:func:`conductor_stub.cmd.run`), on in-memory stores and recorded transports
that count their closing: every command closes what it opened, the store and
the transports, however it ends (done, refused, failed)."""

from __future__ import annotations

import argparse
import signal
import uuid as uuidlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from conductor_stub import cmd, commands
from conductor_stub.reconcile import ReconcileSettings
from conductor_stub.records import ConductorSettings
from scheduler import rpc
from scheduler.cmd import _commands
from scheduler.engine.settings import DEFAULT_FILTERS
from scheduler.store import MemoryStore
from tests.unit.factories import Recorded, host, populate

UNKNOWN = str(uuidlib.UUID(int=404))


class CountedStore(MemoryStore):
    closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


class CountedTransport(Recorded):
    @property
    def cleaned(self) -> int:
        return self.names.count("cleanup")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Every store and transport a command opens (each a new one)."""
    made = SimpleNamespace(stores=[], transports=[])

    def store(conf: Any) -> CountedStore:
        made.stores.append(CountedStore())
        populate(made.stores[-1], [host("cmp-a")])
        return made.stores[-1]

    def transport(conf: Any, url: str | None = None) -> CountedTransport:
        made.transports.append(CountedTransport())
        return made.transports[-1]

    monkeypatch.setattr(commands, "make_store", store)
    monkeypatch.setattr(rpc, "get_transport", transport)
    monkeypatch.setattr(rpc, "get_notification_transport", transport)
    monkeypatch.setattr(cmd.broker, "reach", lambda *args, **kwargs: None)
    monkeypatch.setattr(rpc, "get_server", lambda *args, **kwargs: Recorded())
    monkeypatch.setattr(rpc, "SchedulerClient", lambda *args, **kwargs: Recorded())
    monkeypatch.setattr(rpc, "ComputeClient", lambda *args, **kwargs: Recorded())
    monkeypatch.setattr(commands, "conductor_settings", lambda conf: ConductorSettings())
    monkeypatch.setattr(commands, "reconcile_settings", lambda conf: ReconcileSettings())

    def stopped_at_once(on_stop: Callable[[], None], stop: Any = None) -> int:
        on_stop()
        return signal.SIGTERM

    monkeypatch.setattr(commands, "wait_for_signal", stopped_at_once)
    return made


def conf(*argv: str, notifications: bool = False) -> Any:
    parser = argparse.ArgumentParser()
    cmd._add_commands(parser.add_subparsers(dest="name"))
    return SimpleNamespace(
        command=parser.parse_args(list(argv)),
        host="conductor-test",
        conductor=SimpleNamespace(
            flavors_file="", topic="conductor", health_port=0, reconcile_interval=1.0
        ),
        filter_scheduler=SimpleNamespace(enabled_filters=list(DEFAULT_FILTERS)),
        scheduler=SimpleNamespace(topic=rpc.SCHEDULER_TOPIC, service_down_time=60),
        compute=SimpleNamespace(topic=rpc.COMPUTE_TOPIC),
        upgrade_levels=SimpleNamespace(compute=None),
        priority=SimpleNamespace(
            classes=[],
            default_class=None,
            max_wait=3600.0,
            pending_retry_interval=60.0,
            pending_retry_batch=20,
        ),
        notifications=SimpleNamespace(
            enabled=notifications,
            topic="notifications",
            format="unversioned",
            versioned_topic="versioned_notifications",
        ),
    )


#: Each command, done or refused (an unknown uuid), and the exit status it gives.
RUNS = [
    (("serve",), 0),
    (("boot",), 0),
    (("resize", UNKNOWN, "--flavor", "m1.large"), 2),
    (("migrate", UNKNOWN), 2),
    (("migrate", UNKNOWN, "--confirm"), 2),
    (("live-migrate", UNKNOWN), 2),
    (("evacuate", UNKNOWN), 2),
    (("delete", UNKNOWN), 2),
    (("shelve", UNKNOWN), 2),
    (("unshelve", UNKNOWN), 2),
    (("list",), 0),
    (("show", UNKNOWN), 2),
]


@pytest.mark.parametrize("argv, status", RUNS, ids=[" ".join(a[:2]) for a, _ in RUNS])
def test_every_command_closes_its_store_and_transports(
    opened: SimpleNamespace, argv: tuple[str, ...], status: int
) -> None:
    assert cmd.run(conf(*argv)) == status
    assert opened.stores, "the command opened no store"
    assert [s.closed for s in opened.stores] == [1] * len(opened.stores)
    assert [t.cleaned for t in opened.transports] == [1] * len(opened.transports)
    assert set(_commands.names(cmd.COMMANDS)) <= {
        a[0] for a, _ in RUNS
    }  # (every command is run here)


def test_serve_closes_its_notification_transport_too(
    opened: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    notifier = Recorded()
    monkeypatch.setattr(commands, "_notifier", lambda conf, transport: notifier)
    assert cmd.run(conf("serve", notifications=True)) == 0
    assert len(opened.transports) == 2  # RPC, notifications
    assert [t.cleaned for t in opened.transports] == [1, 1]
    assert notifier.names == ["stop"]  # (stopped before its transport went)
    assert [s.closed for s in opened.stores] == [1]


# --- host names ---------------------------------------------------------------------

#: Each command that takes a host name, with the name in place of ``{}``.
HOST_ARGUMENTS = [
    ("evacuate", "--from-host", "{}"),
    ("evacuate", UNKNOWN, "--host", "{}", "--admin"),
    ("migrate", UNKNOWN, "--host", "{}", "--admin"),
    ("live-migrate", UNKNOWN, "--host", "{}", "--admin"),
    ("list", "--host", "{}"),
]
LONG = "h" * 10240


@pytest.mark.parametrize("argv", HOST_ARGUMENTS, ids=[" ".join(a[:2]) for a in HOST_ARGUMENTS])
@pytest.mark.parametrize(
    "name, said",
    [
        pytest.param("cmp-zz", "host cmp-zz not found", id="unknown"),
        pytest.param("*", "host * not found", id="star"),
        pytest.param(
            LONG,
            "invalid request: a host name of 10240 characters (no host's is over 255)",
            id="10KB",
        ),
    ],
)
def test_a_host_no_service_has_is_refused_in_one_line(
    opened: SimpleNamespace,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    name: str,
    said: str,
) -> None:
    """``evacuate --from-host '*'`` said "no instances" and exited 0 where
    ``scheduler-admin host disable`` refuses the name: every host name a
    command takes is checked against the services, before anything is done."""
    assert cmd.run(conf(*(a.format(name) for a in argv))) == 2
    assert capsys.readouterr().err == f"conductor-stub: {said}\n"
    assert [s.closed for s in opened.stores] == [1]
    assert not opened.transports  # refused before the command opened one


@pytest.mark.parametrize(
    "argv", HOST_ARGUMENTS[:1] + HOST_ARGUMENTS[-1:], ids=["evacuate", "list"]
)
def test_a_known_host_is_taken(
    opened: SimpleNamespace, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    assert cmd.run(conf(*(a.format("cmp-a") for a in argv))) == 0
    assert capsys.readouterr().out == "no instances\n"
