"""Readable summaries of a boot, for ``conductor-stub boot`` and the demo."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from conductor_stub.tasks.build import BootReport
from scheduler.objects import ServerGroup
from scheduler.render import table
from scheduler.store import Provider


def format_booted(uuids: Sequence[str], group: ServerGroup | None) -> str:
    """What ``boot`` without ``--wait`` prints: one uuid a line, then the group."""
    return "\n".join([*uuids, *([_group_line(group)] if group else [])])


def _group_line(group: ServerGroup) -> str:
    return f"server group: {group.uuid} ({group.policy})"


def format_report(report: BootReport, each: bool = False) -> str:
    """The totals; with ``each``, first one line per instance (uuid, state,
    host, attempts, fault)."""
    total = len(report.instances)
    lines = []
    if each and report.instances:
        rows = [
            (r.uuid, r.state, r.host or "-", r.attempts, r.fault or "")
            for r in sorted(report.instances, key=lambda r: (r.state, r.host or "", r.uuid))
        ]
        lines += [*table(("instance", "state", "host", "attempts", "fault"), rows, left=5), ""]
    lines += [
        f"instances: {total} in {report.requests} request(s), "
        f"{report.seconds:.2f} s" + ("  (TIMED OUT waiting)" if report.timed_out else ""),
    ]
    for state, n in sorted(report.by_state.items()):
        lines.append(f"  {state:<9} {n}")
    attempts = Counter(r.attempts for r in report.instances if r.state == "ACTIVE")
    lines.append(
        f"rescheduled: {report.rescheduled}"
        + (
            "; ACTIVE instances by attempts: "
            + ", ".join(f"{k}: {n}" for k, n in sorted(attempts.items()))
            if attempts
            else ""
        )
    )
    lines.append(f"no valid host: {report.no_valid_host}")
    if report.redriven:
        lines.append(f"re-driven (no answer before the deadline): {report.redriven}")
    faults = Counter(r.fault for r in report.instances if r.fault)
    if faults:
        lines.append("faults:")
        lines += [f"  {n} x {fault}" for fault, n in faults.most_common()]
    hosts = Counter(r.host for r in report.instances if r.state == "ACTIVE")
    if hosts:
        lines.append(
            f"hosts used: {len(hosts)}; most instances on one host: {hosts.most_common(1)[0][1]}"
        )
    if report.group is not None:
        lines.append(_group_line(report.group))
    return "\n".join(lines)


def format_fill(providers: Sequence[Provider], width: int = 30) -> str:
    """One bar per resource class: how full the cloud is, and the spread."""
    lines = []
    classes = sorted({rc for p in providers for rc in p.inventories})
    for rc in classes:
        fills = []
        for p in providers:
            inv = p.inventories.get(rc)
            if inv and inv.capacity > 0:
                fills.append(p.usages.get(rc, 0) / inv.capacity)
        if not fills:
            continue
        mean = sum(fills) / len(fills)
        bar = "#" * round(mean * width)
        lines.append(
            f"  {rc:<10} [{bar:<{width}}] mean {mean:6.1%}  "
            f"min {min(fills):6.1%}  max {max(fills):6.1%}"
        )
    return "host fill:\n" + "\n".join(lines)
