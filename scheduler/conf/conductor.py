"""``[conductor]``: the conductor stub that drives the scheduler (deadlines,
re-drives, the reconciler)."""

from __future__ import annotations

from oslo_config import cfg

conductor_group = cfg.OptGroup(
    "conductor",
    title="Conductor stub",
    help="Deadlines of the conductor that drives the scheduler.",
)

conductor_opts = [
    cfg.StrOpt(
        "topic",
        default="conductor",
        help="RPC topic the conductor consumes and the scheduler and the compute "
        "simulators cast results to. One value per deployment; see [scheduler] topic.",
    ),
    cfg.StrOpt(
        "flavors_file",
        default="",
        help="JSON file of flavors to add to the built-in m1.* catalog.",
    ),
    cfg.IntOpt(
        "build_timeout",
        default=120,
        min=1,
        help="Seconds the conductor waits to hear back on a boot it sent (the "
        "scheduling request or a build) before it re-drives it. RPC casts are "
        "delivered at most once, so a request can be lost with a worker or a broker; "
        "a re-driven request is idempotent per instance.\n\nRelated options: "
        "max_redrives, sweep_interval.",
    ),
    cfg.IntOpt(
        "resize_timeout",
        default=300,
        min=1,
        help="Seconds the conductor waits to hear back on a resize step (the resize "
        "itself, a confirm or a revert) before it re-drives it.",
    ),
    cfg.IntOpt(
        "live_migration_timeout",
        default=300,
        min=1,
        help="Seconds the conductor waits to hear back on a live migration (the "
        "pre-checks on both hosts and the migration itself) before it re-drives "
        "it: the same request, so the same migration and the destination's claim "
        "reused. After max_redrives the instance stays ACTIVE on its source, with a "
        "fault.",
    ),
    cfg.IntOpt(
        "delete_timeout",
        default=60,
        min=1,
        help="Seconds the conductor waits for every host that may run an instance "
        "being deleted to say its VM is gone, before it casts the terminate again "
        "to those that have not. After max_redrives the delete finishes without "
        "them (its claims released, the instance DELETED).",
    ),
    cfg.FloatOpt(
        "deleted_retention",
        default=86400.0,
        min=0.001,
        help="Seconds a DELETED instance's record is kept (for show and audits) "
        "before the store itself removes it (Redis key expiry; no sweep looks for "
        "it). Until then a claim for that instance is refused, so a request for it "
        "still in flight cannot claim anything.\n\n"
        "Related options: delete_timeout.",
    ),
    cfg.IntOpt(
        "max_redrives",
        default=3,
        min=0,
        max=100,
        help="How many times the conductor re-drives one request it has not heard "
        "back on. After that the request has timed out: a boot ends in ERROR "
        "(its claim released), a resize leaves the instance ACTIVE on its source "
        "with a fault.",
    ),
    cfg.FloatOpt(
        "sweep_interval",
        default=5.0,
        min=0.1,
        help="Seconds between the conductor's sweeps for requests past their "
        "deadline. The pending set is read from the store, so a restarted "
        "conductor carries on where the last one stopped.",
    ),
    cfg.BoolOpt(
        "return_alternates",
        default=True,
        help="Reschedule a failed build or resize onto the alternate hosts the "
        "scheduler returned with the first choice (no scheduler round trip). Off, "
        "the conductor asks the scheduler again (select_destinations, with the "
        "hosts already tried ignored), up to [scheduler] max_attempts hosts.",
    ),
    cfg.FloatOpt(
        "reconcile_interval",
        default=60.0,
        min=0.1,
        help="Seconds between the conductor's reconciliations: its compute reports, "
        "instance records and allocations compared, and what disagrees repaired (a "
        "VM no live record keeps on its host reaped, a record the store lost "
        "re-created from the report, a missing allocation healed, an orphaned one "
        "released). Each action is logged (reconcile_action) and counted; "
        "scheduler-admin audit runs the same comparison once.\n\n"
        "Related options: orphan_grace, report_max_age.",
    ),
    cfg.FloatOpt(
        "orphan_grace",
        default=120.0,
        min=0.0,
        help="Seconds a disagreement must persist, seen on every reconciliation, "
        "before it is acted on (and before scheduler-admin audit --fix acts on "
        "it), so that nothing in flight is mistaken for a leak. Kept in the "
        "conductor's memory: a restarted conductor starts every grace again.\n\n"
        "Related options: reconcile_interval.",
    ),
    cfg.StrOpt(
        "lost_vm_action",
        default="error",
        choices=[
            (
                "error",
                "The instance goes ERROR with a fault naming the host that lost it, "
                "and its allocation is released (delete it, or rebuild it elsewhere).",
            ),
            ("log", "Only find it: logged, counted and shown by scheduler-admin audit."),
        ],
        help="What the reconciler does with a lost VM: an ACTIVE instance whose host's "
        "fresh report does not show it (and no other host runs it), seen for "
        "orphan_grace. A host that stopped reporting is down and not judged.\n\n"
        "Related options: orphan_grace, report_max_age.",
    ),
    cfg.FloatOpt(
        "report_max_age",
        default=60.0,
        min=0.1,
        help="Seconds after which a compute's report of the VMs it runs is stale and "
        "not reconciled (its host is down: evacuation's business, not the "
        "reconciler's). Keep it a few times [compute] report_interval.\n\n"
        "Related options: reconcile_interval.",
    ),
    cfg.PortOpt(
        "health_port",
        default=0,
        help="Port of the conductor's health (/healthz) and Prometheus (/metrics) "
        "endpoint, on [scheduler] health_listen; 0 turns it off. /metrics counts "
        "the reconciler's actions per kind (conductor_reconcile_actions_total, "
        "kind overcommit for the healed allocations that overcommit a host).",
    ),
]
