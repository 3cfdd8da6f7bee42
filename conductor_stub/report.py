"""Readable summaries of a boot, for ``conductor-stub boot`` and the demo."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from conductor_stub.manager import BootReport
from scheduler.store import Provider


def format_report(report: BootReport) -> str:
    total = len(report.instances)
    lines = [
        f"instances: {total} in {report.requests} request(s), "
        f"{report.seconds:.2f} s" + ("  (TIMED OUT waiting)" if report.timed_out else "")
    ]
    for state, n in sorted(report.by_state.items()):
        lines.append(f"  {state:<9} {n}")
    attempts = Counter(r.attempts for r in report.instances if r.state == "ACTIVE")
    lines.append(
        f"rescheduled: {report.rescheduled}   "
        f"attempts of ACTIVE instances: "
        + ", ".join(f"{k}x{v}" for k, v in sorted(attempts.items()))
    )
    lines.append(f"no valid host: {report.no_valid_host}")
    if report.redriven:
        lines.append(f"re-driven (no answer before the deadline): {report.redriven}")
    faults = Counter(r.fault for r in report.instances if r.fault)
    for fault, n in faults.most_common():
        lines.append(f"  fault {n} x {fault!r}")
    hosts = Counter(r.host for r in report.instances if r.state == "ACTIVE")
    if hosts:
        lines.append(
            f"hosts used: {len(hosts)}; most instances on one host: {hosts.most_common(1)[0][1]}"
        )
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
