"""``scheduler-admin host drain`` end to end over RabbitMQ and Redis: the host
disabled first, its instances cold-migrated (and confirmed) or live-migrated
to the other hosts, a few at a time, the host left empty; an instance that
cannot move reported with its fault (exit status 1); an unknown host refused
with nothing changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.cli import admin_cli
from tests.fixtures.resize import amounts, boot_one, holdings
from tests.functional.conftest import Cluster


def drain(cluster: Cluster, host: str, *args: str) -> tuple[int, dict[str, Any]]:
    """``scheduler-admin host drain HOST --json ...``: its exit status and report."""
    done = admin_cli(cluster, "host", "drain", host, "--json", "--timeout", "60", *args)
    assert done.returncode in (0, 1), done.stderr[-4000:]
    return done.returncode, json.loads(done.stdout)


def source_and_two_others(cluster: Cluster, other_memory_mb: int = 65536) -> None:
    """src (the roomiest, so every boot lands there) and dst-0000, dst-0001.

    Weighed as Nova does (``weigher_profile = nova``: the most free RAM in
    absolute amount first), so that every boot lands on src; the default
    profile weighs shares of capacity and would spread them."""
    cluster.write_config(filter_scheduler={"weigher_profile": "nova"})
    cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", "262144", name="src")
    cluster.start_compute(2, "--memory-mb", str(other_memory_mb), name="dst")
    cluster.start_worker()


@pytest.mark.parametrize("mode", [(), ("--live",)], ids=["cold", "live"])
def test_a_host_is_disabled_and_emptied(cluster: Cluster, mode: tuple[str, ...]) -> None:
    source_and_two_others(cluster)
    # One at a time: each boot goes to the roomiest host, src.
    booted = [boot_one(cluster, "m1.small") for _ in range(3)]
    assert [(i["state"], i["host"]) for i in booted] == [("ACTIVE", "src-0000")] * 3, booted
    uuids = sorted(i["uuid"] for i in booted)

    code, report = drain(cluster, "src-0000", *mode)

    assert code == 0, report
    assert (report["drained"], report["live"]) == (True, bool(mode))
    assert report["summary"] == {
        "moved": 3,
        "failed": 0,
        "skipped": 0,
        "timed_out": 0,
        "still_on_host": 0,
        "active_left": 0,
    }
    moved = {o["uuid"]: o for o in report["instances"]}
    assert sorted(moved) == uuids
    assert {o["outcome"] for o in moved.values()} == {"moved"}
    assert {o["host"] for o in moved.values()} <= {"dst-0000", "dst-0001"}
    # Each holds its own flavor where it now runs, nothing is left on the source
    # (a cold migration was confirmed: no migration consumer remains).
    assert holdings(cluster) == {u: {moved[u]["host"]: amounts("m1.small")} for u in uuids}
    assert cluster.running_vms() == {u: {moved[u]["host"]} for u in uuids}
    for uuid in uuids:
        record = cluster.store.get_instance(uuid)
        assert (record.state, record.host, record.migration_uuid) == (
            "ACTIVE",
            moved[uuid]["host"],
            None,
        )
    # The host stays disabled, as 'host disable --reason draining' leaves it.
    service = cluster.store.get_service("src-0000")
    assert service is not None
    assert (service.disabled, service.disabled_reason) == (True, "draining")
    assert "COMPUTE_STATUS_DISABLED" in cluster.store.get_provider_by_name("src-0000").traits
    # So a new boot avoids it, roomiest as it is now.
    (again,) = cluster.boot("--count", "1")["instances"]
    assert again["host"] != "src-0000", again


def test_an_instance_that_cannot_move_is_reported_and_the_exit_status_is_1(
    cluster: Cluster,
) -> None:
    # The others have room for an m1.small, none for an m1.xlarge (16 GB).
    source_and_two_others(cluster, other_memory_mb=8192)
    (big,) = cluster.boot("--count", "1", "--flavor", "m1.xlarge")["instances"]
    (small,) = cluster.boot("--count", "1", "--flavor", "m1.small")["instances"]
    assert (big["host"], small["host"]) == ("src-0000", "src-0000"), (big, small)

    # An unknown host: one line, exit status 2, nothing changed.
    unknown = admin_cli(cluster, "host", "drain", "src-9999")
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == "scheduler-admin: host src-9999 not found\n"
    assert not any(s.disabled for s in cluster.store.list_services())

    text = admin_cli(cluster, "host", "drain", "src-0000", "--timeout", "60")

    assert text.returncode == 1, text.stderr[-4000:]
    lines = text.stdout.splitlines()
    [now_on] = holdings(cluster)[small["uuid"]]
    assert now_on.startswith("dst-"), now_on
    assert sorted(lines[:2]) == sorted(
        [
            f"{big['uuid']} could not move: No valid host was found.",
            f"{small['uuid']} moved to {now_on}",
        ]
    ), text.stdout
    assert lines[2].startswith("host src-0000 not drained: moved 1, failed 1"), text.stdout
    assert lines[2].endswith("still on the host 1 (1 ACTIVE)"), text.stdout
    # The one that could not move runs where it ran, holding what it held.
    record = cluster.store.get_instance(big["uuid"])
    assert (record.state, record.host, record.migration_uuid) == ("ACTIVE", "src-0000", None)
    assert record.fault == "No valid host was found."
    assert holdings(cluster)[big["uuid"]] == {"src-0000": amounts("m1.xlarge")}
    assert cluster.running_vms()[big["uuid"]] == {"src-0000"}

    # Draining again (still disabled) tries it again, and says the same in JSON.
    code, report = drain(cluster, "src-0000")
    assert code == 1
    [outcome] = report["instances"]
    assert (outcome["uuid"], outcome["outcome"], outcome["host"], outcome["reason"]) == (
        big["uuid"],
        "failed",
        "src-0000",
        "No valid host was found.",
    )
    assert report["summary"]["active_left"] == 1 and report["drained"] is False
