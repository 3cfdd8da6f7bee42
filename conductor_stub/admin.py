"""The conductor's commands of ``scheduler-admin``: ``host drain`` and ``audit``.

``scheduler-admin`` (:mod:`scheduler.cmd.admin`) parses them, with the rest of
its commands, and runs these through the entry points of group
``scheduler.admin`` (``setup.cfg``): the drain drives the conductor's move
API (migrate, confirm, live-migrate) and the audit runs its reconciler, and
the scheduler package imports nothing of the conductor's. Each takes the
parsed configuration (its arguments in ``conf.command``) and the open store,
and returns what it did (:class:`scheduler.cmd._commands.Output`, its exit
status with it), which ``scheduler-admin`` prints in the format asked for.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from oslo_config import cfg

from conductor_stub.commands import (
    compute_client,
    conductor_settings,
    reconcile_settings,
    scheduler_client,
)
from conductor_stub.drain import Drainer, format_outcome, format_summary
from conductor_stub.findings import SKIPPED, Finding, format_counts
from conductor_stub.reconcile import Reconciler
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from scheduler import rpc
from scheduler.cmd import _commands
from scheduler.cmd._commands import Output
from scheduler.store import Store


def host_drain(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``scheduler-admin host drain HOST``: disable a host and move its instances
    off (:mod:`conductor_stub.drain`)."""
    args = conf.command
    table = _commands.fmt_of(args) == _commands.TABLE
    transport = rpc.get_transport(conf)
    try:
        scheduler = scheduler_client(conf, transport)
        compute = compute_client(conf, transport, store)
        settings = conductor_settings(conf)
        drainer = Drainer(
            store,
            Resizer(store, scheduler, compute, settings),
            LiveMigrator(store, scheduler, compute, settings),
            parallel=args.parallel,
        )
        report = drainer.drain(
            args.hostname,
            live=args.live,
            wait=args.wait,
            timeout=args.timeout,
            # The table's lines as each move ends; the other formats at the end.
            progress=(lambda o: print(format_outcome(o), flush=True)) if table else None,
        )
    finally:
        transport.cleanup()
    return Output(
        document=report.to_primitive(),
        table=format_summary(report),
        values=[(o.uuid, o.outcome, o.state, o.host) for o in report.instances],
        status=report.exit_code,
    )


def audit(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``scheduler-admin audit``: the reconciliation once
    (:mod:`conductor_stub.reconcile`); with --fix, twice, the grace apart,
    repairing what the second found that the first did too."""
    args = conf.command
    settings = reconcile_settings(conf)
    if args.grace is not None:
        settings = replace(settings, orphan_grace=args.grace)
    transport = rpc.get_transport(conf) if args.fix else None
    try:
        compute = compute_client(conf, transport, store) if transport else None
        reconciler = Reconciler(store, compute, settings)
        findings = reconciler.audit()
        if args.fix:
            if findings and settings.orphan_grace > 0:
                time.sleep(settings.orphan_grace)
                findings = reconciler.audit()
            findings = reconciler.repair(findings)
    finally:
        if transport is not None:
            transport.cleanup()
    # What is left: every finding, but those repaired or found settled by --fix.
    left = [f for f in findings if not f.repaired and f.outcome != SKIPPED]
    return Output(
        document={
            "findings": [f.to_primitive() for f in findings],
            "counts": dict(Counter(f.kind for f in findings)),
            "repaired": dict(reconciler.counts),
        },
        table=_audit_lines(findings, left, reconciler.counts if args.fix else None),
        values=[(f.kind, f.uuid, f.host, f.action) for f in findings],
        status=1 if left else 0,
    )


def _audit_lines(
    findings: list[Finding], left: list[Finding], repaired: Mapping[str, int] | None
) -> list[str]:
    """The audit as text: a line per finding, the counts, and with --fix
    (``repaired``) what was repaired and what was not."""
    lines = [finding.line() for finding in findings]
    lines.append(format_counts(findings))
    if repaired is not None:
        lines.append(
            "repaired: "
            + (", ".join(f"{k}={n}" for k, n in sorted(repaired.items())) or "nothing")
        )
        if left:
            counts = Counter(f.kind for f in left)
            lines.append(
                "not fixed: "
                + ", ".join(f"{k}={n}" for k, n in sorted(counts.items()))
                + " (each finding above says why: kept in view, failed, or in grace)"
            )
    return lines
