"""``[compute]``: the compute simulator (what each simulated host reports)."""

from __future__ import annotations

from oslo_config import cfg

compute_group = cfg.OptGroup(
    "compute", title="Compute simulator", help="Resources each simulated host reports."
)

compute_opts = [
    cfg.StrOpt(
        "topic",
        default="compute",
        help="RPC topic the compute simulators consume and the scheduler, the "
        "conductor and scheduler-admin cast to (each simulator serves it under "
        "its own server name). One value per deployment; see [scheduler] topic.",
    ),
    cfg.FloatOpt(
        "cpu_allocation_ratio",
        default=4.0,
        min=0.0,
        help="Virtual CPUs per physical CPU a host offers.",
    ),
    cfg.FloatOpt(
        "ram_allocation_ratio",
        default=1.0,
        min=0.0,
        help="Virtual RAM per physical RAM a host offers.",
    ),
    cfg.FloatOpt(
        "disk_allocation_ratio",
        default=1.0,
        min=0.0,
        help="Virtual disk per physical disk a host offers.",
    ),
    cfg.IntOpt(
        "reserved_host_memory_mb", default=512, min=0, help="Memory kept back for the host itself."
    ),
    cfg.IntOpt(
        "reserved_host_disk_gb", default=0, min=0, help="Disk kept back for the host itself."
    ),
    cfg.IntOpt(
        "reserved_host_cpus", default=0, min=0, help="Physical CPUs kept back for the host itself."
    ),
    cfg.IntOpt(
        "heartbeat_interval",
        default=10,
        min=1,
        help="Seconds between service heartbeats; keep it well under "
        "[scheduler] service_down_time.",
    ),
    cfg.FloatOpt(
        "report_interval",
        default=10.0,
        min=0.1,
        help="Seconds between a compute simulator's reports of the instances its "
        "hosts really run (one store write for all its hosts; also once right "
        "after registration). The reconciler compares them with the instance "
        "records and allocations. Not Nova's [DEFAULT] report_interval (the "
        "service heartbeat): that is heartbeat_interval here.",
    ),
    cfg.PortOpt(
        "health_port",
        default=0,
        help="Port of a compute simulator's health (/healthz) and Prometheus (/metrics) "
        "endpoint, on [scheduler] health_listen; 0 turns it off. /healthz answers 503 "
        "(reports: down) while the process's reports of what its hosts run have not "
        "got through for longer than [conductor] report_max_age; /metrics counts the "
        "failed reports (compute_reports_failed_total) and gives the last report's age "
        "(compute_report_age_seconds, compute_reports_stale).",
    ),
    cfg.StrOpt(
        "running_deleted_instance_action",
        default="reap",
        choices=[
            ("reap", "Destroy the VM."),
            ("log", "Only log that it was found (orphan_vm_found)."),
        ],
        help="What a compute does with a VM the reconciler found running with no "
        "live record placing it there (deleted, in ERROR, evacuated or moved "
        "elsewhere), as Nova's option of that name.",
    ),
]
