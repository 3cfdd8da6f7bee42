"""The declared commands and their one output layer (issue 30, item 2):
``-f table|json|value`` on a representative command, ``--json`` as ``-f
json``, every command's ``--help``, an unknown format refused; and the
arguments that were still read raw (counts, ports, names, a daemon's
seconds and probabilities), refused while parsing."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from oslo_config import cfg

from compute_sim import cmd as compute_cmd
from conductor_stub import cmd
from scheduler.cmd import _commands, admin
from scheduler.store import MemoryStore
from tests.unit.factories import host, populate

CLIS: dict[str, tuple[Callable[[Any], None], Sequence[_commands.Command]]] = {
    "scheduler-admin": (admin._add_commands, admin.COMMANDS),
    "conductor-stub": (cmd._add_commands, cmd.COMMANDS),
}


def cli_parser(prog: str) -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog=prog)
    CLIS[prog][0](made.add_subparsers(dest="name"))
    return made


@pytest.fixture
def two_hosts(monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    store = MemoryStore()
    populate(store, [host("cmp-a"), host("cmp-b")])
    monkeypatch.setattr(admin, "make_store", lambda conf: store)
    return store


def admin_out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``scheduler-admin ARGV`` in process: its exit status and what it printed."""
    command = cli_parser("scheduler-admin").parse_args(list(argv))
    conf = SimpleNamespace(command=command, scheduler=SimpleNamespace(service_down_time=60))
    status = admin.run(conf)  # type: ignore[arg-type]
    return status, capsys.readouterr().out


# --- one command, each format -------------------------------------------------------


def test_hosts_in_each_format(two_hosts: MemoryStore, capsys: pytest.CaptureFixture[str]) -> None:
    status, table = admin_out(capsys, "hosts")
    assert status == 0
    assert table.splitlines()[0].split()[:3] == ["host", "state", "status"]
    assert table.splitlines()[-1].startswith("2 hosts: ")

    status, text = admin_out(capsys, "hosts", "-f", "json")
    hosts = json.loads(text)
    assert status == 0 and [h["host"] for h in hosts] == ["cmp-a", "cmp-b"]

    status, values = admin_out(capsys, "hosts", "-f", "value")
    assert status == 0
    assert values.splitlines() == [
        f"{h['host']} {'up' if h['up'] else 'down'} enabled 0 0" for h in hosts
    ]


def test_json_is_f_json(two_hosts: MemoryStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert admin_out(capsys, "hosts", "--json") == admin_out(capsys, "hosts", "-f", "json")
    assert admin_out(capsys, "host", "disable", "cmp-a", "--json") == (
        0,
        '{"host": "cmp-a", "disabled": true, "disabled_reason": null, "changed": true}\n',
    )
    assert admin_out(capsys, "host", "enable", "cmp-a", "-f", "json")[1] == (
        '{"host": "cmp-a", "disabled": false, "disabled_reason": null, "changed": true}\n'
    )


def test_a_host_disabled_in_each_format(
    two_hosts: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert admin_out(capsys, "host", "disable", "cmp-a", "--reason", "rack 4") == (
        0,
        "host cmp-a disabled (rack 4)\n",
    )
    assert admin_out(capsys, "host", "disable", "cmp-a", "-f", "value") == (
        0,
        "cmp-a disabled\n",
    )


@pytest.mark.parametrize(
    "output, fmt, lines",
    [
        pytest.param(
            _commands.Output(values=[("u1", None, ["a", "b"]), ("u2", True, 3)]),
            "value",
            ["u1 - a,b", "u2 true 3"],
            id="value-cells",
        ),
        pytest.param(
            _commands.Output(document={"a": 1}, indent=2), "json", ['{\n  "a": 1\n}'], id="json"
        ),
        pytest.param(
            _commands.Output(stream=iter(["[", '{"a": 1}', "]"])),
            "json",
            ["[", '{"a": 1}', "]"],
            id="json-stream",
        ),
        pytest.param(_commands.Output(table="one\ntwo"), "table", ["one\ntwo"], id="table"),
        pytest.param(
            _commands.Output(table=iter(["one", "two"])), "table", ["one", "two"], id="lines"
        ),
    ],
)
def test_lines_of_each_format(output: _commands.Output, fmt: str, lines: list[str]) -> None:
    assert list(_commands.lines(output, fmt)) == lines


def test_a_bare_exit_status_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert _commands.emit(3, "json") == 3
    assert capsys.readouterr().out == ""


# --- every command's --help, and the format it is asked for ---------------------------


HELPS = [
    (prog, name) for prog, (_, commands) in CLIS.items() for name in _commands.names(commands)
]


@pytest.mark.parametrize("prog, name", HELPS, ids=[f"{p} {n}" for p, n in HELPS])
def test_every_command_says_what_it_does(
    capsys: pytest.CaptureFixture[str], prog: str, name: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_parser(prog).parse_args([*name.split(), "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    command = _commands.find(
        CLIS[prog][1], SimpleNamespace(name=name.split()[0], action=name.split()[-1])
    )
    assert len(command.description) > 40
    assert " ".join(command.description.split())[:60] in out
    if command.formatted:
        assert "-f {table,json,value}, --format {table,json,value}" in out
        assert "[--json]" not in out  # the alias is hidden


@pytest.mark.parametrize("prog", CLIS)
def test_every_command_has_a_function(prog: str) -> None:
    def runnable(commands: Sequence[_commands.Command]) -> list[bool]:
        return [
            ok
            for c in commands
            for ok in (runnable(c.subcommands) if c.subcommands else [c.run is not None])
        ]

    assert all(runnable(CLIS[prog][1]))


@pytest.mark.parametrize(
    "prog, argv",
    [
        ("scheduler-admin", ["hosts"]),
        ("scheduler-admin", ["usage", "project"]),
        ("conductor-stub", ["list"]),
        ("conductor-stub", ["show", "u"]),
    ],
)
def test_an_unknown_format_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], prog: str, argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_parser(prog).parse_args([*argv, "-f", "yaml\x1b[2J"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].endswith(
        "error: argument -f/--format: expected one of table, json, value, got 'yaml\\x1b[2J'"
    )
    assert not any("yaml" in line for line in err[:-1])


@pytest.mark.parametrize(
    "prog, argv, fmt",
    [
        ("scheduler-admin", ["hosts"], "table"),
        ("scheduler-admin", ["hosts", "--json"], "json"),
        ("scheduler-admin", ["hosts", "-f", "value"], "value"),
        ("conductor-stub", ["list", "--format", "json"], "json"),
        ("conductor-stub", ["boot", "--json"], "json"),
    ],
)
def test_the_format_asked(prog: str, argv: list[str], fmt: str) -> None:
    assert _commands.fmt_of(cli_parser(prog).parse_args(argv)) == fmt


def test_a_command_with_nothing_to_format_takes_no_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for prog, argv in (("scheduler-admin", ["dashboard"]), ("conductor-stub", ["serve"])):
        with pytest.raises(SystemExit):
            cli_parser(prog).parse_args([*argv, "--json"])
        assert "unrecognized arguments: --json" in capsys.readouterr().err


# --- arguments that were read raw ---------------------------------------------------


@pytest.mark.parametrize(
    "prog, argv, says",
    [
        pytest.param(
            "conductor-stub", ["boot", "--count", "0"], "--count: must be at least 1", id="count"
        ),
        pytest.param(
            "conductor-stub",
            ["boot", "--per-request", "two"],
            "--per-request: expected a whole number, got 'two'",
            id="per-request",
        ),
        pytest.param(
            "conductor-stub",
            ["boot", "--project", "p\n1"],
            "--project: no control characters, got 'p\\n1'",
            id="project-newline",
        ),
        pytest.param(
            "conductor-stub",
            ["list", "--state", "x" * 10240],
            "--state: expected one of BUILDING, PENDING, ACTIVE, ERROR, RESIZING, RESIZED, "
            "REBUILDING, "
            f"MIGRATING, SHELVING, SHELVED_OFFLOADED, DELETING, DELETED, got '{'x' * 64}...'",
            id="state-10KB",
        ),
        pytest.param(  # D12: said "no instances" and exit 0
            "conductor-stub",
            ["list", "--state", "FOO"],
            "--state: expected one of BUILDING, PENDING, ACTIVE, ERROR, RESIZING, RESIZED, "
            "REBUILDING, "
            "MIGRATING, SHELVING, SHELVED_OFFLOADED, DELETING, DELETED, got 'FOO'",
            id="state-unknown",
        ),
        pytest.param(
            "scheduler-admin",
            ["explain", "--flavor", "m1.small", "--request-id", "req\x1b[31m"],
            "--request-id: no control characters, got 'req\\x1b[31m'",
            id="request-id-escape",
        ),
        pytest.param(
            "scheduler-admin",
            ["explain", "--flavor", "m1.small", "--group-uuid", "nope\n"],
            "--group-uuid: expected a UUID, got 'nope\\n'",
            id="group-uuid",
        ),
        pytest.param(
            "scheduler-admin",
            ["dashboard", "--port", "70000"],
            "--port: must be at most 65535, got 70000",
            id="port-too-high",
        ),
        pytest.param(
            "scheduler-admin",
            ["dashboard", "--port", "-1"],
            "--port: must be at least 0, got -1",
            id="port-negative",
        ),
    ],
)
def test_an_argument_is_checked_while_parsing(
    capsys: pytest.CaptureFixture[str], prog: str, argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_parser(prog).parse_args(argv)
    assert exited.value.code == 2
    assert f": error: argument {says}" in capsys.readouterr().err.splitlines()[-1]


def test_a_state_is_taken_in_any_case_as_the_state_is_spelled() -> None:
    args = cli_parser("conductor-stub").parse_args(
        ["list", "--state", "error", "--state", "Active"]
    )
    assert args.state == ["ERROR", "ACTIVE"]


def sim_conf() -> cfg.ConfigOpts:
    """A configuration with compute-sim's command-line options."""
    conf = cfg.ConfigOpts()
    conf.register_cli_opts(compute_cmd.cli_opts)
    return conf


@pytest.mark.parametrize(
    "option, value",
    [
        ("--build-time", "nan"),
        ("--build-time", "inf"),
        ("--build-time", "-1"),
        ("--stats-interval", "nan"),
        ("--fail-rate", "nan"),
        ("--fail-rate", "1.5"),
        ("--live-migration-fail-rate", "nan"),
    ],
)
def test_compute_sim_refuses_seconds_and_rates_that_are_no_number(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    conf = sim_conf()
    with pytest.raises(SystemExit) as exited:
        conf([option, value], prog="compute-sim")
    # (oslo.config's exit status for a value out of bounds, as for --hosts 0)
    assert exited.value.code == 1
    said = capsys.readouterr().err.splitlines()
    dest = "--" + option[2:].replace("-", "_")
    assert len(said) == 1 and said[0].startswith(f"argument {dest}: Invalid "), said


def test_compute_sim_takes_its_defaults_and_finite_values() -> None:
    conf = sim_conf()
    conf(["--build-time", "0.5", "--fail-rate", "0.25"], prog="compute-sim")
    assert (conf.build_time, conf.fail_rate, conf.live_migration_fail_rate) == (0.5, 0.25, 0.0)


def test_compute_sim_help_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    conf = sim_conf()
    with pytest.raises(SystemExit) as exited:
        conf(["--help"], prog="compute-sim", description=compute_cmd.DESCRIPTION)
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Simulate compute hosts in one process" in out
    assert "--build-time BUILD_TIME Seconds a build takes. (default: 0.05)" in out
