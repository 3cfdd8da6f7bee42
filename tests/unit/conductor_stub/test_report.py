"""What ``conductor-stub boot --wait`` prints: each instance, then totals with
no line left hanging."""

from __future__ import annotations

import uuid as uuidlib

from conductor_stub.report import format_booted, format_report
from conductor_stub.tasks.build import BootReport
from scheduler.objects import ACTIVE, ERROR, InstanceRecord, ServerGroup

GROUP = ServerGroup(uuid=str(uuidlib.UUID(int=3)), policy="anti-affinity")


def instance(
    n: int, state: str, host: str | None = None, fault: str | None = None
) -> InstanceRecord:
    return InstanceRecord(
        uuid=str(uuidlib.UUID(int=n)),
        state=state,
        host=host,
        attempts=1 if host else 0,
        fault=fault,
    )


def test_every_instance_then_the_totals_and_the_group() -> None:
    report = BootReport(
        instances=[
            instance(1, ACTIVE, "cmp-1"),
            instance(2, ERROR, fault="No valid host was found."),
        ],
        seconds=1.5,
        requests=2,
        group=GROUP,
    )
    lines = format_report(report, each=True).splitlines()
    assert lines[0].split() == ["instance", "state", "host", "attempts", "fault"]
    assert lines[1].split() == [str(uuidlib.UUID(int=1)), "ACTIVE", "cmp-1", "1"]
    assert lines[2].split()[:4] == [str(uuidlib.UUID(int=2)), "ERROR", "-", "0"]
    assert "rescheduled: 0; ACTIVE instances by attempts: 1: 1" in lines
    assert lines[-1] == f"server group: {GROUP.uuid} (anti-affinity)"
    assert report.to_primitive()["summary"]["group_uuid"] == GROUP.uuid


def test_no_line_is_left_hanging_when_nothing_became_active() -> None:
    report = BootReport(
        instances=[instance(n, ERROR, fault="No valid host was found.") for n in range(3)],
        seconds=0.2,
        requests=1,
    )
    text = format_report(report)
    assert "rescheduled: 0\n" in text and "by attempts" not in text
    assert "faults:\n  3 x No valid host was found." in text
    assert all(line.strip() for line in text.splitlines())  # no instance table: no blank
    assert not any(line.rstrip().endswith(":") for line in text.splitlines()[:-2])


def test_without_wait_the_uuids_then_the_group() -> None:
    assert format_booted(["a", "b"], GROUP).splitlines() == [
        "a",
        "b",
        f"server group: {GROUP.uuid} (anti-affinity)",
    ]
    assert format_booted(["a"], None) == "a"
