"""The conductor's commands of ``scheduler-admin``: ``host drain`` and ``audit``.

``scheduler-admin`` (:mod:`scheduler.cmd.admin`) parses them, with the rest of
its commands, and runs these through the entry points of group
``scheduler.admin`` (``setup.cfg``): the drain drives the conductor's move
API (migrate, confirm, live-migrate) and the audit runs its reconciler, and
the scheduler package imports nothing of the conductor's. Each takes the
parsed configuration (its arguments in ``conf.command``) and the open store,
prints what it did and returns the command's exit status.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace

from oslo_config import cfg

from conductor_stub.commands import (
    compute_client,
    conductor_settings,
    reconcile_settings,
    scheduler_client,
)
from conductor_stub.drain import Drainer, format_outcome, format_summary
from conductor_stub.findings import SKIPPED, format_counts
from conductor_stub.reconcile import Reconciler
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer
from scheduler import rpc
from scheduler.store import Store


def host_drain(conf: cfg.ConfigOpts, store: Store) -> int:
    """``scheduler-admin host drain HOST``: disable a host and move its instances
    off (:mod:`conductor_stub.drain`)."""
    args = conf.command
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
            progress=None if args.json else lambda o: print(format_outcome(o), flush=True),
        )
    finally:
        transport.cleanup()
    print(json.dumps(report.to_primitive()) if args.json else format_summary(report))
    return report.exit_code


def audit(conf: cfg.ConfigOpts, store: Store) -> int:
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
    if args.json:
        print(
            json.dumps(
                {
                    "findings": [f.to_primitive() for f in findings],
                    "counts": dict(Counter(f.kind for f in findings)),
                    "repaired": dict(reconciler.counts),
                }
            )
        )
    else:
        for finding in findings:
            print(finding.line())
        print(format_counts(findings))
        if args.fix:
            print(
                "repaired: "
                + (
                    ", ".join(f"{k}={n}" for k, n in sorted(reconciler.counts.items()))
                    or "nothing"
                )
            )
            if left:
                counts = Counter(f.kind for f in left)
                print(
                    "not fixed: "
                    + ", ".join(f"{k}={n}" for k, n in sorted(counts.items()))
                    + " (each finding above says why: kept in view, failed, or in grace)"
                )
    return 1 if left else 0
