"""The edges every command shares: --version, --debug, --log-file, one-line
configuration mistakes, --help with defaults. Each command runs as a real
process (as an operator runs it); none reaches a broker or a store here."""

from __future__ import annotations

import json
from pathlib import Path

import kombu.exceptions
import pytest
from oslo_config import cfg

from scheduler import conf as conf_mod
from scheduler import log
from scheduler.cmd import _cli
from scheduler.exceptions import ConfigInvalid
from tests.cli import run_commands

pytestmark = pytest.mark.timeout(240)

#: (module, arguments after the options, exit status of a configuration mistake)
COMMANDS = [
    ("scheduler.cmd.worker", [], 1),
    ("compute_sim.cmd", [], 1),
    ("conductor_stub.cmd", ["list"], 1),
    ("scheduler.cmd.admin", ["hosts"], 2),
    ("scheduler.cmd.notify_tail", [], 1),
]


def test_every_command_has_version() -> None:
    version = conf_mod.version()
    assert version != "unknown"
    runs = run_commands(
        [[module, "--version"] for module, _, _ in COMMANDS] + [["allinone.demo", "--version"]]
    )
    for run in runs:
        assert (run.returncode, run.stdout.strip()) == (0, version), (run.args, run.stderr)


def test_a_bad_value_in_a_config_file_is_one_line_naming_option_value_and_file(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "scheduler.conf"
    bad.write_text("[scheduler]\nworkers = abc\n")
    runs = run_commands(
        [[module, "--config-file", str(bad), *args] for module, args, _ in COMMANDS]
    )
    for (module, _, status), run in zip(COMMANDS, runs, strict=True):
        prog = run.stderr.split(":", 1)[0]
        assert run.returncode == status, (module, run.stderr)
        assert run.stderr == (
            f"{prog}: [scheduler] workers = 'abc' in {bad}: "
            "invalid literal for int() with base 10: 'abc'\n"
        ), module
        assert run.stdout == ""


def test_the_worker_refuses_a_bad_value_it_would_read_only_once_serving(tmp_path: Path) -> None:
    """The health port is read after the worker serves: it used to start, serve
    and then crash; now it is refused before any worker is forked. A bad
    option of the rabbit driver's own is refused the same way."""
    port = tmp_path / "port.conf"
    port.write_text("[scheduler]\nhealth_port = 99999\n")
    rabbit = tmp_path / "rabbit.conf"
    rabbit.write_text("[oslo_messaging_rabbit]\nheartbeat_rate = fast\n")
    secret = tmp_path / "secret.conf"
    secret.write_text("[redis]\nurl = bogus://admin:hunter2@db:6379/0\n")
    runs = run_commands(
        [["scheduler.cmd.worker", "--config-file", str(f)] for f in (port, rabbit, secret)]
    )
    assert [r.returncode for r in runs] == [1, 1, 1]
    assert runs[0].stderr.startswith(
        f"scheduler-worker: [scheduler] health_port = '99999' in {port}: "
    )
    assert runs[1].stderr == (
        f"scheduler-worker: [oslo_messaging_rabbit] heartbeat_rate = 'fast' in {rabbit}: "
        "invalid literal for int() with base 10: 'fast'\n"
    )
    # The value is shown with its password masked.
    assert runs[2].stderr.startswith(
        f"scheduler-worker: [redis] url = 'bogus://admin:***@db:6379/0' in {secret}: "
        "unknown store URL scheme"
    )
    assert "hunter2" not in runs[2].stderr
    for run in runs:
        assert len(run.stderr.splitlines()) == 1 and "worker_starting" not in run.stderr


def test_debug_gives_the_traceback_and_unreadable_files_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "scheduler.conf"
    bad.write_text("[scheduler]\nworkers = abc\n")
    garbled = tmp_path / "garbled.conf"
    garbled.write_text("no equals sign here\n")
    debug, missing, parse = run_commands(
        [
            ["conductor_stub.cmd", "--config-file", str(bad), "--debug", "list"],
            ["conductor_stub.cmd", "--config-file", str(tmp_path / "nope.conf"), "list"],
            ["conductor_stub.cmd", "--config-file", str(garbled), "list"],
        ]
    )
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("conductor-stub: [scheduler] workers = 'abc'")
    assert (missing.returncode, missing.stderr) == (
        1,
        f"conductor-stub: Failed to find some config files: {tmp_path / 'nope.conf'}\n",
    )
    assert parse.returncode == 1 and len(parse.stderr.splitlines()) == 1
    assert parse.stderr.startswith(f"conductor-stub: Failed to parse {garbled}")


def test_compute_sim_help_shows_the_defaults() -> None:
    (run,) = run_commands([["compute_sim.cmd", "--help"]])
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    for shown in (
        "How many hosts to simulate. (default: 10)",
        "Memory per host, MB. (default: 65536)",
        "Seconds a build takes. (default: 0.05)",
        "Traits of each GPU child provider. (default: CUSTOM_VGPU)",
    ):
        assert shown in text


def test_with_defaults_appends_each_default_once() -> None:
    opts = [
        cfg.IntOpt("a", default=3, help="A."),
        cfg.ListOpt("b", default=[], help="B."),
        cfg.StrOpt("c", help="C."),
        cfg.ListOpt("d", default=["x", "y"], help="D."),
    ]
    _cli.with_defaults(opts)
    _cli.with_defaults(opts)
    assert [o.help for o in opts] == ["A. (default: 3)", "B.", "C.", "D. (default: x,y)"]


def test_config_invalid_names_the_last_file_that_sets_the_option(tmp_path: Path) -> None:
    first, second = tmp_path / "a.conf", tmp_path / "b.conf"
    first.write_text("[compute]\nreserved_host_cpus = 1\n")
    second.write_text("[compute]\nreserved_host_cpus = -4\n")
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(first), "--config-file", str(second)], default_config_files=[])
    with pytest.raises(ConfigInvalid) as caught:
        conf_mod.validate(conf)
    assert caught.value.message == (
        f"[compute] reserved_host_cpus = '-4' in {second}: Should be greater than or equal to 0"
    )


def test_log_file_gets_the_same_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    _cli.apply_log_options(debug=True, log_file=str(path))
    try:
        log.setup(process="test-cli")
        log.get_logger("test").debug("cli_debug_line", value=1)
    finally:
        _cli.apply_log_options(debug=False, log_file=None)
        log.setup(level="WARNING")
    [line] = path.read_text().splitlines()
    event = json.loads(line)
    assert (event["event"], event["level"], event["value"], event["process"]) == (
        "cli_debug_line",
        "debug",
        1,
        "test-cli",
    )


def test_compute_sim_names_an_option_value_it_cannot_read(tmp_path: Path) -> None:
    conf = tmp_path / "memory.conf"
    conf.write_text("[redis]\nurl = memory://\n")
    base = ["compute_sim.cmd", "--config-file", str(conf)]
    cells, pci, version = run_commands(
        [
            [*base, "--numa-cells", "8:lots"],
            [*base, "--pci-devices", "8086:154d"],
            [*base, "--hypervisor-version", "eight"],
        ]
    )
    assert (cells.returncode, cells.stderr) == (
        2,
        "compute-sim: --numa-cells '8:lots' is not cpus:memory_mb\n",
    )
    assert (pci.returncode, pci.stderr) == (
        2,
        "compute-sim: --pci-devices '8086:154d' is not vendor:product:count\n",
    )
    assert version.returncode == 2 and len(version.stderr.splitlines()) == 1
    assert version.stderr.startswith("compute-sim: ")


def test_a_send_that_gave_up_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise kombu.exceptions.OperationalError("[Errno 111] Connection refused")

    assert _cli.run("conductor-stub", body, []) == 1
    assert capsys.readouterr().err == (
        "conductor-stub: the message broker stopped answering: [Errno 111] Connection refused\n"
    )
    assert _cli.run("scheduler-admin", body, [], failed=2) == 2


def test_without_config_file_the_project_files_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oslo.config's search, as OpenStack services do: ~/.scheduler/,
    ~/, /etc/scheduler/, /etc/ (a home of the test's own stands for them)."""
    home = tmp_path / "home"
    (home / ".scheduler").mkdir(parents=True)
    found = home / ".scheduler" / "scheduler.conf"
    found.write_text("[scheduler]\nworkers = many\n")
    monkeypatch.setenv("HOME", str(home))
    assert conf_mod.find_config_files("scheduler-admin")[0] == str(found)
    (run,) = run_commands([["scheduler.cmd.admin", "hosts"]])
    assert (run.returncode, run.stderr) == (
        2,
        f"scheduler-admin: [scheduler] workers = 'many' in {found}: "
        "invalid literal for int() with base 10: 'many'\n",
    )


def test_output_to_a_closed_pipe_exits_quietly_141(tmp_path: Path) -> None:
    """``conductor-stub list | head`` and ``scheduler-admin hosts | head``: once
    the reader has gone, the command leaves with 128 + SIGPIPE, as a command
    killed by SIGPIPE does, and says nothing (no BrokenPipeError traceback)."""
    memory = tmp_path / "memory.conf"
    memory.write_text("[redis]\nurl = memory://\n")
    base = ["--config-file", str(memory)]
    runs = run_commands(
        [
            ["conductor_stub.cmd", *base, "list"],
            ["conductor_stub.cmd", *base, "list", "--json"],
            ["scheduler.cmd.admin", *base, "hosts"],
            ["scheduler.cmd.admin", *base, "usage", "project"],
        ],
        stdout_closed=True,
    )
    for run in runs:
        assert (run.returncode, run.stderr) == (141, ""), run.args
    assert _cli.EXIT_BROKEN_PIPE == 141  # (the status the command says it gives)


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden() -> None:
    """A socket of the command's own that broke is a failure: it is raised, not
    taken for ``| head`` (standard output here is a file, still open)."""

    def body() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        _cli.run("conductor-stub", body, [])


def test_what_a_command_opened_is_closed_once_last_first_however_it_ends() -> None:
    closed: list[str] = []
    with pytest.raises(RuntimeError), _cli.closing():
        store = _cli.opened("store", lambda: "store", closed.append)
        assert _cli.opened("store", lambda: "another", closed.append) is store  # once
        _cli.opened("transport", lambda: "transport", closed.append)
        raise RuntimeError("the command failed")
    assert closed == ["transport", "store"]
    # Outside a command's run: opened each time, left to the caller.
    assert _cli.opened("store", lambda: "mine", closed.append) == "mine"
    assert closed == ["transport", "store"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "classes = spot:x, gold:1:maybe, ok:5\n",
            "[priority] classes = 'spot:x, gold:1:maybe, ok:5' in {path}: 'spot:x': the "
            "priority 'x' is not an integer; 'gold:1:maybe': after the priority only "
            "'preemptible', 'never' and 'wait' may follow, each once",
            id="every-bad-entry",
        ),
        pytest.param(
            "classes = spot:10:preemptible\ndefault_class = gold\n",
            "[priority] default_class = 'gold' in {path}: the default class 'gold' is not "
            "one of the classes",
            id="default-not-a-class",
        ),
    ],
)
def test_bad_priority_classes_stop_start_up_in_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "scheduler.conf"
    path.write_text("[priority]\n" + text)
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    with pytest.raises(ConfigInvalid) as caught:
        conf_mod.validate(conf)
    assert caught.value.message == message.format(path=path)


def test_good_priority_classes_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.conf"
    path.write_text(
        "[priority]\nclasses = on-demand:1000, batch:500:preemptible:never\n"
        "default_class = on-demand\n"
    )
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf_mod.validate(conf)
    classes = conf_mod.priority_classes(conf)
    assert classes.default == "on-demand"
    assert str(classes.classes["batch"]) == "batch (priority 500, preemptible, never preempts)"
