"""What the commands refuse of what they are given, and how they say it (issue
30): seconds that are no duration, control characters, host names no service
has, free text without end, URLs that are no web address. Parsed by each
command's own parser, in process."""

from __future__ import annotations

import argparse

import pytest

from conductor_stub import cmd
from scheduler.cmd import admin


def parser(add_commands: object, prog: str) -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog=prog)
    add_commands(made.add_subparsers(dest="name"))  # type: ignore[operator]
    return made


def refusal(
    capsys: pytest.CaptureFixture[str], made: argparse.ArgumentParser, argv: list[str]
) -> str:
    """The error line the parser gives ``argv`` (exit status 2, as argparse's)."""
    with pytest.raises(SystemExit) as exited:
        made.parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


#: Every command with a --timeout, and what else it needs to parse.
TIMEOUTS = [
    ("conductor-stub", ["boot"]),
    ("conductor-stub", ["resize", "u"]),
    ("conductor-stub", ["migrate", "u"]),
    ("conductor-stub", ["live-migrate", "u"]),
    ("conductor-stub", ["evacuate", "u"]),
    ("conductor-stub", ["delete", "u"]),
    ("conductor-stub", ["shelve", "u"]),
    ("conductor-stub", ["unshelve", "u"]),
    ("scheduler-admin", ["explain", "--flavor", "m1.small"]),
    ("scheduler-admin", ["host", "drain", "h"]),
]


def command_parser(prog: str) -> argparse.ArgumentParser:
    return parser(cmd._add_commands if prog == "conductor-stub" else admin._add_commands, prog)


@pytest.mark.parametrize("prog, argv", TIMEOUTS, ids=[" ".join(a[:1]) for _, a in TIMEOUTS])
@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "-inf", "soon"])
def test_a_timeout_is_positive_and_finite(
    capsys: pytest.CaptureFixture[str], prog: str, argv: list[str], value: str
) -> None:
    line = refusal(capsys, command_parser(prog), [*argv, "--timeout", value])
    assert line.startswith(f"{prog} {argv[0]}"), line
    assert ": error: argument --timeout: " in line, line


@pytest.mark.parametrize("prog, argv", TIMEOUTS, ids=[" ".join(a[:1]) for _, a in TIMEOUTS])
def test_a_timeout_in_seconds_is_taken(prog: str, argv: list[str]) -> None:
    parsed = command_parser(prog).parse_args([*argv, "--timeout", "2.5"])
    assert parsed.timeout == 2.5


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["audit", "--grace", "inf"], id="audit-grace"),
        pytest.param(["dashboard", "--refresh", "nan"], id="dashboard-refresh"),
    ],
)
def test_other_durations_are_finite_too(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    line = refusal(capsys, command_parser("scheduler-admin"), argv)
    assert line.endswith(f"expected a finite number of seconds, got '{argv[-1]}'"), line
