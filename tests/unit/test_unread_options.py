"""Options a file sets that nothing reads are said, one line each, with where
the equivalent lives (a Nova operator's nova.conf) or the closest name (a typo)."""

from __future__ import annotations

import re
from pathlib import Path

from oslo_config import cfg
from structlog.testing import capture_logs

from scheduler.conf import list_opts
from scheduler.conf.unread import NOVA_EQUIVALENTS, unread, warn_unread
from tests.unit.factories import private_conf

NOVA_CONF = """\
[DEFAULT]
cpu_allocation_ratio = 16.0
reserved_host_disk_mb = 2048
host = node-1
transport_url = rabbit://u:p@h:5672/
[oslo_messaging_notifications]
driver = noop
[filter_scheduler]
weight_classes = nova.scheduler.weights.all_weighers
ram_weight_multiplier = 2.0
[scheduler]
max_atempts = 5
frobnicate = yes
[placement]
auth_type = password
region_name = r1
[oslo_messaging_rabbit]
heartbeat_timeout_threshold = 30
"""


def _conf(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    path = tmp_path / "scheduler.conf"
    path.write_text(text)
    return private_conf([str(path)])


def test_a_ported_nova_conf_and_a_typo_are_each_one_line(tmp_path: Path) -> None:
    found = unread(_conf(tmp_path, NOVA_CONF))
    said = {(u.group, u.name): str(u) for u in found}
    assert list(said) == [
        ("DEFAULT", "cpu_allocation_ratio"),
        ("DEFAULT", "reserved_host_disk_mb"),
        ("oslo_messaging_notifications", "driver"),
        ("filter_scheduler", "weight_classes"),
        ("scheduler", "max_atempts"),
        ("scheduler", "frobnicate"),
        ("placement", ""),
    ]
    path = tmp_path / "scheduler.conf"
    assert said[("DEFAULT", "cpu_allocation_ratio")] == (
        f"[DEFAULT] cpu_allocation_ratio (in {path}) is Nova's and is not read here; "
        "instead: [compute] cpu_allocation_ratio (each compute-sim's inventory)"
    )
    assert said[("scheduler", "max_atempts")].endswith("did you mean [scheduler] max_attempts?")
    assert said[("scheduler", "frobnicate")].endswith(
        "is not an option of this scheduler and is not read"
    )
    assert "driver = noop" in said[("oslo_messaging_notifications", "driver")]
    assert "[redis] url" in said[("placement", "")]


def test_a_file_of_this_schedulers_own_options_says_nothing(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        "[DEFAULT]\nhost = h\ndebug = true\n[scheduler]\nmax_attempts = 5\n"
        "[compute]\ncpu_allocation_ratio = 8.0\n[redis]\nkey_prefix = p\n",
    )
    with capture_logs() as logs:
        warn_unread(conf)
    assert unread(conf) == [] and logs == []


def test_each_unread_option_is_one_warning(tmp_path: Path) -> None:
    with capture_logs() as logs:
        warn_unread(_conf(tmp_path, NOVA_CONF))
    assert [e["event"] for e in logs] == ["option_not_read"] * 7
    assert all(e["log_level"] == "warning" and "\n" not in e["detail"] for e in logs)


def test_every_equivalent_named_is_an_option_here() -> None:
    """The table's "instead" names options that exist (a renamed option would
    otherwise send a Nova operator to nothing)."""
    own = {(group, opt.name) for group, opts in list_opts() for opt in opts}
    named = [
        (m["group"], m["name"])
        for instead in NOVA_EQUIVALENTS.values()
        for m in re.finditer(r"\[(?P<group>\w+)\] (?P<name>[a-z_]+)", instead)
    ]
    assert named and not [n for n in named if n not in own]
