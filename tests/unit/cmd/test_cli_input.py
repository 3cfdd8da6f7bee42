"""What the commands refuse of what they are given, and how they say it (issue
30): seconds that are no duration, control characters, host names no service
has, free text without end, URLs that are no web address. Parsed by each
command's own parser, in process."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conductor_stub import cmd
from scheduler.cmd import _cli, admin
from scheduler.exceptions import InvalidRequest
from scheduler.store import MemoryStore
from tests.cli import run_commands
from tests.unit.factories import host, populate, private_conf


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


# --- control characters -------------------------------------------------------------


@pytest.mark.parametrize(
    "message, said",
    [
        pytest.param("host cmp-1 not found", "host cmp-1 not found", id="plain"),
        pytest.param("instance abc\ndef not found", "instance abc\\ndef not found", id="newline"),
        pytest.param("no such instance: a\x1b[31mb", "no such instance: a\\x1b[31mb", id="escape"),
        pytest.param("tab\there\r", "tab\\there\\r", id="tab-cr"),
        pytest.param("bidi \u202egnp.exe", "bidi \\u202egnp.exe", id="bidi-override"),
        pytest.param("ünïcödé and 'quotes'", "ünïcödé and 'quotes'", id="printable-kept"),
    ],
)
def test_an_error_never_echoes_a_control_character(
    capsys: pytest.CaptureFixture[str], message: str, said: str
) -> None:
    _cli.say("conductor-stub delete", message)
    assert capsys.readouterr().err == f"conductor-stub delete: {said}\n"


def test_a_control_character_in_an_argument_is_escaped_in_the_one_line_error(
    tmp_path: Path,
) -> None:
    """A uuid or a host name holding a newline or an escape sequence, as each
    command says it is unknown: one line, the characters escaped."""
    memory = tmp_path / "memory.conf"
    memory.write_text("[redis]\nurl = memory://\n")
    base = ["--config-file", str(memory)]
    runs = run_commands(
        [
            ["conductor_stub.cmd", *base, "show", "abc\ndef"],
            ["scheduler.cmd.admin", *base, "instance", "show", "abc\ndef"],
            ["scheduler.cmd.admin", *base, "host", "disable", "cmp\x1b[2J-1"],
            ["scheduler.cmd.admin", *base, "usage", "provider", "p\r\n1"],
        ]
    )
    said = [
        "conductor-stub: instance abc\\ndef not found",
        "scheduler-admin: instance abc\\ndef not found",
        "scheduler-admin: host cmp\\x1b[2J-1 not found",
        "scheduler-admin: resource provider p\\r\\n1 not found",
    ]
    for run, line in zip(runs, said, strict=True):
        assert (run.returncode, run.stderr) == (2, line + "\n"), run.args


# --- host names ---------------------------------------------------------------------


@pytest.mark.parametrize("action", ["disable", "enable"])
def test_scheduler_admin_refuses_a_host_name_no_host_has_as_conductor_stub_does(
    action: str,
) -> None:
    """(``host drain`` disables the host first, with the same function.)"""
    store = MemoryStore()
    populate(store, [host("cmp-a")])
    cursor = store.compact_snapshot().cursor
    command = command_parser("scheduler-admin").parse_args(["host", action, "h" * 10240])
    with pytest.raises(InvalidRequest, match=r"a host name of 10240 characters \(no host's"):
        admin._host_set(SimpleNamespace(command=command), store)  # type: ignore[arg-type]
    assert store.changes(cursor) == []


# --- free text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason, said",
    [
        pytest.param("r" * 256, "at most 255 characters, got 256", id="256"),
        pytest.param("r" * 102400, "at most 255 characters, got 102400", id="100KB"),
        pytest.param("rack 4\nDOWN", "no control characters, got 'rack 4\\nDOWN'", id="newline"),
    ],
)
def test_a_disabled_reason_is_bounded(
    capsys: pytest.CaptureFixture[str], reason: str, said: str
) -> None:
    """As Nova's disabled_reason: 255 characters at most (100 KB used to be
    stored, and printed by every ``hosts`` after), on one line of the table."""
    line = refusal(
        capsys, command_parser("scheduler-admin"), ["host", "disable", "h", "--reason", reason]
    )
    assert line == f"scheduler-admin host disable: error: argument --reason: {said}"


def test_a_disabled_reason_of_255_characters_is_taken() -> None:
    reason = "ü" * 255
    parsed = command_parser("scheduler-admin").parse_args(
        ["host", "disable", "h", "--reason", reason]
    )
    assert parsed.reason == reason


# --- dashboard --metrics-url --------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("file:///etc/passwd", id="file"),
        pytest.param("ftp://h/metrics", id="ftp"),
        pytest.param("cmp-1:9100/metrics", id="no-scheme"),
        pytest.param("http:///metrics", id="no-host"),
        pytest.param("http://[::1/metrics", id="unparsable"),
    ],
)
def test_a_metrics_url_is_a_web_address(capsys: pytest.CaptureFixture[str], url: str) -> None:
    """A file:// URL used to be read (its first line shown as the endpoint's
    error); only http(s) is scraped."""
    line = refusal(capsys, command_parser("scheduler-admin"), ["dashboard", "--metrics-url", url])
    assert line.endswith(
        f"argument --metrics-url: expected an http:// or https:// URL, got {url!r}"
    )


def test_a_refused_metrics_url_is_said_with_its_password_masked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refusal(
        capsys,
        command_parser("scheduler-admin"),
        ["dashboard", "--metrics-url", "ftp://admin:hunter2@h/metrics"],
    )
    assert "hunter2" not in line and "ftp://admin:***@h/metrics" in line


class Served:
    """A dashboard server that stops at once (as on Ctrl-C)."""

    server_address = ("127.0.0.1", 8090)

    def serve_forever(self) -> None:
        raise KeyboardInterrupt

    def server_close(self) -> None:
        pass


def test_the_dashboard_shows_the_metrics_urls_with_their_passwords_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In its start line, and in /api/state (each endpoint's url, and the
    error of one that does not answer)."""
    from scheduler.dashboard import command, state

    urls = ["http://admin:hunter2@cmp-1:9100/metrics", "https://u:s3cret@cmp-2/metrics"]
    args = command_parser("scheduler-admin").parse_args(
        ["dashboard", *(a for u in urls for a in ("--metrics-url", u))]
    )
    assert args.metrics_url == urls
    made: list[state.StateSource] = []

    def server(source: state.StateSource, *rest: Any) -> Served:
        made.append(source)
        return Served()

    monkeypatch.setattr(command, "make_server", server)
    out = io.StringIO()
    conf = private_conf()
    assert command.serve(conf, MemoryStore(), args, out) == 0
    shown = out.getvalue()
    assert "hunter2" not in shown and "s3cret" not in shown
    assert (
        "metrics from: http://admin:***@cmp-1:9100/metrics, https://u:***@cmp-2/metrics" in shown
    )

    def refused(url: str, timeout: float) -> str:
        raise OSError(f"cannot reach {url}")

    (source,) = made
    scraped = state.Scraper(source.scraper.urls, fetch=refused).scrape()
    assert [e["url"] for e in scraped["endpoints"]] == [
        "http://admin:***@cmp-1:9100/metrics",
        "https://u:***@cmp-2/metrics",
    ]
    assert "hunter2" not in json.dumps(scraped) and "s3cret" not in json.dumps(scraped)
