"""``scheduler-demo``: its arguments checked in one line, --seed repeating a run,
no password on its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from allinone import demo

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--flavors", "m1.huge"],
            "argument --flavors: unknown flavor m1.huge; known: m1.large, m1.medium, "
            "m1.small, m1.tiny, m1.xlarge",
        ),
        (["--instances", "-5"], "argument --instances: must be at least 1, got -5"),
        (["--instances", "many"], "argument --instances: expected a whole number, got 'many'"),
        (["--fail-rate", "2"], "argument --fail-rate: must be between 0 and 1, got 2"),
        (["--hosts", "-1"], "argument --hosts: must be at least 1, got -1"),
        (["--hosts", "0"], "argument --hosts: must be at least 1, got 0"),
        (["--build-time", "-1"], "argument --build-time: must be at least 0, got -1"),
        (["--timeout", "0"], "argument --timeout: must be more than 0, got 0"),
        (
            ["--transport-url", "rabbit://guest:guest@127.0.0.1:5672/"],
            "argument --transport-url: a URL with a password is not taken on the command "
            "line (ps shows it to everyone): put it in $SCHEDULER_DEMO_TRANSPORT_URL / "
            "$SCHEDULER_DEMO_REDIS_URL or in --config-file",
        ),
    ],
)
def test_a_bad_argument_is_one_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        demo.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"scheduler-demo: error: {error}"


def test_urls_come_from_the_environment_then_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_file = tmp_path / "demo.conf"
    conf_file.write_text(
        "[DEFAULT]\ntransport_url = rabbit://u:pw@broker:5672/\n[redis]\nurl = redis://db:6379/1\n"
    )
    monkeypatch.delenv(demo.TRANSPORT_ENV, raising=False)
    monkeypatch.delenv(demo.STORE_ENV, raising=False)
    parser = demo._parser()
    _, transport, store = demo._urls(parser.parse_args([]))
    assert (transport, store) == ("fake://", "memory://")
    _, transport, store = demo._urls(parser.parse_args(["--config-file", str(conf_file)]))
    assert (transport, store) == ("rabbit://u:pw@broker:5672/", "redis://db:6379/1")
    monkeypatch.setenv(demo.TRANSPORT_ENV, "rabbit://e:pw@env:5672/")
    _, transport, store = demo._urls(parser.parse_args(["--config-file", str(conf_file)]))
    assert (transport, store) == ("rabbit://e:pw@env:5672/", "redis://db:6379/1")
    # A file that does not set the store leaves the in-process one.
    only_broker = tmp_path / "broker.conf"
    only_broker.write_text("[DEFAULT]\ntransport_url = rabbit://u:pw@broker:5672/\n")
    _, _, store = demo._urls(parser.parse_args(["--config-file", str(only_broker)]))
    assert store == "memory://"


#: Runs the demo and prints what became of each instance, in a process of its
#: own: the demo configures logging for its process (structlog caches the
#: loggers it uses), which the other tests of this worker must not inherit.
_PLAY = """
import json, sys
from allinone import demo
args = demo._parser().parse_args(sys.argv[1:])
report = demo.play(args)
assert not report.timed_out
print(json.dumps(sorted([r.uuid, r.host, r.state, r.attempts] for r in report.instances)))
"""


def _placements(seed: int) -> list[list[Any]]:
    out = subprocess.run(
        [sys.executable, "-c", _PLAY, "--hosts", "6", "--instances", "24", "--fail-rate", "0.3",
         "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=150,
        check=True,
    )  # fmt: skip
    placements: list[list[Any]] = json.loads(out.stdout.splitlines()[-1])
    return placements


def test_the_same_seed_gives_the_same_placements() -> None:
    first, again, other = _placements(11), _placements(11), _placements(12)
    assert len(first) == 24
    assert first == again
    # Failures were drawn (a reschedule, or an ERROR), so the draws are replayed too.
    assert any(attempts > 1 or state == "ERROR" for _, _, state, attempts in first)
    assert first != other
