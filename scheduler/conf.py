"""Configuration options, in the groups operators know from Nova.

Options are registered on the global ``cfg.CONF``: oslo.messaging 18.3 registers
its tracing and metrics groups only there, and an RPC server built on a
private ``ConfigOpts`` fails after acknowledging each message, silently
(see DESIGN.md). Code reads options once, at start-up, and passes values in;
filters and weighers never import this module.

``list_opts()`` feeds ``oslo-config-generator`` (entry point
``oslo.config.opts = scheduler``), which writes etc/scheduler/scheduler.conf.sample.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
from collections.abc import Iterator, Mapping, Sequence

from oslo_config import cfg

from scheduler.engine import plugins
from scheduler.engine import settings as _settings
from scheduler.exceptions import ConfigInvalid
from scheduler.notifier import FORMATS

DEFAULT_FILTERS = list(_settings.DEFAULT_FILTERS)
DEFAULT_WEIGHERS = list(_settings.DEFAULT_WEIGHERS)

default_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="Name of this node, used in the publisher id of notifications "
        "(scheduler.<host>) and in logs.",
    ),
]

scheduler_group = cfg.OptGroup(
    "scheduler",
    title="Scheduler worker options",
    help="How the scheduler worker serves RPC and talks to compute nodes.",
)

scheduler_opts = [
    cfg.StrOpt(
        "topic",
        default="scheduler",
        help="RPC topic the worker consumes (its queue's name). Every worker of a "
        "deployment uses the same topic; they agree through the store, never "
        "through each other. Every client of the deployment (conductor, computes, "
        "scheduler-admin) must use the same value. Two deployments on one "
        "RabbitMQ vhost must differ here, in [conductor] topic and in [compute] "
        "topic (queues are named by topic alone, whatever control_exchange "
        "says); a vhost of their own is the simpler way to keep them apart.",
    ),
    cfg.IntOpt(
        "workers",
        default=1,
        min=1,
        max=64,
        help="Worker processes to run on this node. One Python process tops out near "
        "500 RPC calls per second; more processes give more throughput.\n\n"
        "Possible values: 1 to 64.",
    ),
    cfg.IntOpt(
        "graceful_shutdown_timeout",
        default=30,
        min=1,
        help="Seconds a worker process is given to stop once the daemon is asked to "
        "stop (SIGTERM): it stops taking requests, finishes those it holds and closes "
        "its connections. A worker still busy after this long is killed, and what it "
        "held is re-driven by the conductor.\n\n"
        "Possible values: 1 or more seconds.\n\n"
        "Related options: [scheduler] workers.",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=3,
        min=1,
        max=20,
        help="How many hosts an instance may be tried on: the primary plus "
        "max_attempts - 1 alternates.\n\nRelated options: "
        "[filter_scheduler] host_subset_size.",
    ),
    cfg.IntOpt(
        "max_placement_results",
        default=1000,
        min=1,
        help="At most this many candidate hosts are examined per request after the "
        "capacity step. Disabled and down hosts are removed before the cut. As in Nova, "
        "a request in a server group or with a same_host or different_host hint is not "
        "cut: its filters need to see every host that has room. The candidate step stops "
        "examining hosts once it has this many, so its cost follows this number rather "
        "than the size of the cloud.",
    ),
    cfg.BoolOpt(
        "randomize_allocation_candidates",
        default=False,
        help="Take the max_placement_results candidates in store order from a host "
        "drawn at random (seeded by the request id and instance uuid, so a decision can "
        "be replayed), going round past the last host, rather than from the first host, "
        "so large clouds spread load across the whole fleet. Every host is equally likely "
        "to start the window; a host just after many hosts that cannot take the request "
        "is more likely to be among the candidates than one among many that can.",
    ),
    cfg.BoolOpt(
        "shape_cache",
        default=False,
        help="Decide a request whose shape (flavor, extra specs, image, zone, project) "
        "was decided before from what that decision found, asking again only the hosts "
        "whose records changed since: the same decisions as without it. Off by default: "
        "with max_placement_results at 1000 a repeated shape's decision is about 8% "
        "cheaper and a new shape's 5% dearer; with no cut (a "
        "max_placement_results as large as the cloud) a repeated shape's decision at "
        "100,000 hosts costs about a quarter, for memory of about 200 bytes per host "
        "per shape kept (32 shapes at most). Requests in a server group, with host "
        "hints or naming their hosts are never decided from it.",
    ),
    cfg.IntOpt(
        "service_down_time",
        default=60,
        min=1,
        help="Seconds without a heartbeat after which a compute host counts as down.",
    ),
    cfg.IntOpt(
        "claim_attempts",
        default=5,
        min=1,
        max=100,
        help="How many hosts an instance falls through to when another worker's claim "
        "got to its chosen host first.",
    ),
    cfg.BoolOpt(
        "allow_resize_to_same_host",
        default=False,
        help="Let a resize pick the host the instance is on. Off, the source host is "
        "excluded (as a host already tried), so a resize always moves the instance; "
        "on, a one-host cloud can still resize (the old and new flavor are both "
        "held on that host until the resize is confirmed or reverted).",
    ),
    cfg.BoolOpt(
        "compute_status_filter",
        default=True,
        help="Keep hosts whose compute service is disabled out of the candidates, "
        "before the max_placement_results cut, as the forbidden trait "
        "COMPUTE_STATUS_DISABLED (which the store keeps in step with the service "
        "record). Off leaves disabled hosts to the ComputeFilter, after the cut.",
    ),
    cfg.BoolOpt(
        "query_placement_for_availability_zone",
        default=True,
        help="Narrow a request for an availability zone to the hosts of the "
        "aggregates naming that zone, before the candidate step. A zone that no "
        "aggregate names (other than the default zone) finds no host.\n\n"
        "Related options: [filter_scheduler] default_availability_zone.",
    ),
    cfg.BoolOpt(
        "limit_tenants_to_placement_aggregate",
        default=False,
        help="Send a project's requests only to the aggregates whose "
        "filter_tenant_id* metadata names the project, when there are any.\n\n"
        "Related options: placement_aggregate_required_for_tenants.",
    ),
    cfg.BoolOpt(
        "placement_aggregate_required_for_tenants",
        default=False,
        help="With limit_tenants_to_placement_aggregate: a project that no aggregate "
        "names finds no host (rather than any host).",
    ),
    cfg.BoolOpt(
        "enable_isolated_aggregate_filtering",
        default=False,
        help="Keep requests out of aggregates whose trait:<TRAIT>=required metadata "
        "names a trait the request does not require.",
    ),
    cfg.BoolOpt(
        "query_placement_for_image_type_support",
        default=False,
        help="Send a request only to hosts with the COMPUTE_IMAGE_TYPE_<FORMAT> trait "
        "of its image's disk_format (volume-backed requests are not narrowed).",
    ),
    cfg.StrOpt(
        "health_listen",
        default="127.0.0.1",
        help="Address of the health and metrics HTTP endpoint.",
    ),
    cfg.PortOpt(
        "health_port",
        default=0,
        help="Port of the health (/healthz) and Prometheus (/metrics) endpoint; 0 "
        "turns it off. With several workers, worker n listens on health_port + n.\n\n"
        "/healthz answers 200 while the broker and the store answer, 503 "
        "(degraded) while one does not.",
    ),
]

filter_scheduler_group = cfg.OptGroup(
    plugins.OPTIONS_GROUP,
    title="Filters and weighers",
    help="Which filters and weighers run, and how much each weigher counts.",
)

filter_scheduler_opts = [
    cfg.ListOpt(
        "enabled_filters",
        default=DEFAULT_FILTERS,
        help="Host filters to run, in order, on the candidates. Each name is an entry "
        "point in the scheduler.filters group; an unknown name stops start-up. "
        "Disabled hosts and availability zones are handled before the candidates by "
        "the request filters ([scheduler] compute_status_filter, "
        "query_placement_for_availability_zone); with one of those off, list "
        "ComputeFilter or AvailabilityZoneFilter here to keep that policy. Hosts "
        "already tried (and a resize's source) are removed before the candidates "
        "whatever is listed here: RetryFilter, still accepted, is not needed.",
    ),
    cfg.ListOpt(
        "weighers",
        default=DEFAULT_WEIGHERS,
        help="Weighers to apply. Each name is an entry point in the "
        "scheduler.weighers group; an unknown name stops start-up.",
    ),
    cfg.StrOpt(
        "weigher_profile",
        default=_settings.DEFAULT_WEIGHER_PROFILE,
        choices=[
            (
                "nova",
                "Nova-identical: the weighers and multipliers configured, as Nova "
                "weighs (RAM, CPU and disk by absolute free amounts)",
            ),
            (
                "pack",
                "fill hosts to the top before opening another (fractions of "
                "capacity, aligned with the request, room kept for the largest flavor)",
            ),
            (
                "spread",
                "fill every host to the same share of its capacity, room kept "
                "for the largest flavor",
            ),
        ],
        help="The weighers' goal (default spread; nova for decisions identical to "
        "Nova's). pack and spread add their weighers to the weighers "
        "option and give their multipliers (and those of RAMWeigher, CPUWeigher and "
        "DiskWeigher, off) new defaults; a multiplier set in this file wins over the "
        "profile's.",
    ),
    cfg.IntOpt(
        "host_subset_size",
        default=1,
        min=1,
        help="The host is picked at random among this many best-weighed hosts. 1 takes "
        "the best; larger values lower the chance that two workers race for one "
        "host.",
    ),
]

#: The options the filters and weighers declare (see :mod:`scheduler.engine.plugins`)
#: come between these two lists in ``[filter_scheduler]``.
filter_scheduler_shared_opts = [
    # A plugin option read by more than its plugin (the availability-zone
    # request filter and the host view, as well as AvailabilityZoneFilter),
    # so declared here and kept in EngineSettings.
    cfg.StrOpt(
        "default_availability_zone",
        default="nova",
        help="Zone of a host that no aggregate places in a zone.",
    ),
]


def _plugin_opt(d: plugins.Declared) -> cfg.Opt:
    """The oslo.config option of a plugin argument, as the plugin declares it."""
    if d.kind == "bool":
        return cfg.BoolOpt(d.name, default=d.default, help=d.help)
    if d.kind == "int":
        return cfg.IntOpt(
            d.name,
            default=d.default,
            help=d.help,
            min=None if d.min is None else int(d.min),
            max=None if d.max is None else int(d.max),
        )
    if d.kind == "float":
        return cfg.FloatOpt(d.name, default=d.default, min=d.min, max=d.max, help=d.help)
    if d.kind == "str":
        return cfg.StrOpt(d.name, default=d.default, help=d.help)
    default = d.default
    if isinstance(default, Mapping):
        default = [f"{key}={value}" for key, value in default.items()]
    return cfg.ListOpt(d.name, default=list(default), help=d.help)


def filter_scheduler_options() -> list[cfg.Opt]:
    """``[filter_scheduler]``: the static options, then those of every registered
    filter and weigher (from any package), generated from their declarations."""
    return [
        *filter_scheduler_opts,
        *(_plugin_opt(d) for d in plugins.registered_options()),
        *filter_scheduler_shared_opts,
    ]


pci_group = cfg.OptGroup(
    "pci", title="PCI passthrough", help="The PCI devices flavors may ask for by alias."
)

pci_opts: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "alias",
        default=[],
        help='A PCI alias as JSON, one per line: {"name": "a1", '
        '"vendor_id": "8086", "product_id": "154d"}. A flavor asks '
        "for devices with the extra spec pci_passthrough:alias=a1:2 "
        "(PciPassthroughFilter). Without product_id any product of the vendor "
        "matches.",
    ),
]

redis_group = cfg.OptGroup(
    "redis",
    title="The placement store",
    help="Where resource providers, allocations and instance records live.",
)

redis_opts = [
    cfg.StrOpt(
        "url",
        default="redis://127.0.0.1:6379/0",
        secret=True,
        help="Store URL: redis://[[user]:password@]host:port/db, rediss:// for TLS, "
        "unix:///path.sock; "
        "redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db] for "
        "the master a Sentinel names; "
        "redis+cluster://[[user]:password@]host:port[,host:port...][/?options] for a "
        "Redis Cluster (rediss+cluster:// for TLS; the nodes listed are where the "
        "client discovers the cluster; a deployment's keys share one hash slot, so "
        "it lives on one shard); "
        "or memory:// for the in-process store (demo and tests "
        "only: it is not shared between processes).",
    ),
    cfg.StrOpt(
        "key_prefix",
        default="vmsched",
        help="Prefix of every key. Deployments (or test runs) sharing one Redis must "
        "use different prefixes.",
    ),
    cfg.FloatOpt(
        "socket_timeout",
        default=5.0,
        min=0.1,
        help="Seconds a store command may take before the store counts as down.",
    ),
    cfg.IntOpt(
        "min_replicas",
        default=0,
        min=0,
        help="Replicas that must have each write (claims, releases, instance records, "
        "providers and service records) before it counts as done: the store sends "
        "WAIT behind each write and reports the store unavailable (retryable) when "
        "fewer replicas have it within min_replicas_timeout. 0: acknowledged once the "
        "master has it, which a Sentinel failover may lose. Not yet on a redis+cluster:// store.",
    ),
    cfg.FloatOpt(
        "min_replicas_timeout",
        default=1.0,
        min=0.001,
        help="Seconds a write waits for min_replicas replicas (in seconds, as "
        "socket_timeout, which it must stay below; WAIT takes it in milliseconds).",
    ),
]

notifications_group = cfg.OptGroup(
    "notifications",
    title="Notifications",
    help="What the scheduler publishes for consumers. These options, not "
    "[oslo_messaging_notifications] driver and topics, decide it: the worker always "
    "publishes with the messagingv2 driver on [notifications] topic, and ignores those "
    "two (only [oslo_messaging_notifications] transport_url and retry are read).",
)

notifications_opts = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Publish scheduler.* notifications (driver messagingv2). "
        "[oslo_messaging_notifications] driver is not read: set this to False to "
        "publish none (a driver of noop there does not).",
    ),
    cfg.StrOpt(
        "topic",
        default="notifications",
        help="Topic the legacy (unversioned) notifications are published on, "
        "in the shape they have always had ([oslo_messaging_notifications] topics "
        "is not read). Related options: format.",
    ),
    cfg.StrOpt(
        "format",
        default="both",
        choices=list(FORMATS.items()),
        help="Which notifications are published. The versioned payloads are "
        "typed objects in Nova's envelope (nova_object.name, .namespace, "
        ".version, .data), documented with a sample per event in "
        "doc/notification_samples/; failures are <event>.error there. Each "
        "format is one broker publish per notification, on the worker's "
        "notifier thread. Related options: topic, versioned_topic.",
    ),
    cfg.StrOpt(
        "versioned_topic",
        default="versioned_notifications",
        help="Topic the versioned notifications are published on (Nova's "
        "default name). Related options: format.",
    ),
    cfg.BoolOpt(
        "publish_confirm",
        default=True,
        help="Wait for the broker's confirms of each batch of notifications the "
        "notifier thread publishes (one wait per batch, not per message). With "
        "confirms a notification is held by the broker before the worker forgets "
        "it; a connection lost before the confirm is opened again and the batch "
        "published again (a consumer may see a notification twice). Without, a "
        "notification written to the socket counts as sent: a broker that fails "
        "right after loses it. Either way, notifications still queued in the "
        "worker are lost if the worker dies. Applies to a RabbitMQ notification "
        "transport.",
    ),
]

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
        "records and allocations.",
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


def _groups() -> list[tuple[cfg.OptGroup | None, list[cfg.Opt]]]:
    """Every group and its options; ``[filter_scheduler]``'s with the plugins'
    registered now."""
    return [
        (None, default_opts),
        (scheduler_group, scheduler_opts),
        (filter_scheduler_group, filter_scheduler_options()),
        (pci_group, pci_opts),
        (redis_group, redis_opts),
        (notifications_group, notifications_opts),
        (compute_group, compute_opts),
        (conductor_group, conductor_opts),
    ]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every option on ``conf``, in groups of its own.

    ``ConfigOpts.register_group`` keeps a shallow copy of the group object it is
    given, and options' overrides and defaults live in that group's table of
    options: two ``ConfigOpts`` given the same group object would share it, so an
    override set on one (a test's private config) would be read back by the
    other (the global one). Each registration therefore gets new group objects.
    """
    for group, opts in _groups():
        own = None
        if group is not None:
            own = cfg.OptGroup(group.name, title=group.title, help=group.help)
            conf.register_group(own)
        conf.register_opts(opts, group=own)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator: (group name, options) pairs."""
    return [("DEFAULT" if g is None else g.name, opts) for g, opts in _groups()]


#: Options of the command line only, common to every command and daemon (not
#: in the sample: they say how this run logs, not how the deployment works).
common_cli_opts = [
    cfg.BoolOpt(
        "debug",
        default=False,
        help="Log at DEBUG level, and print the traceback of a failure "
        "(without it a failure is one line).",
    ),
    cfg.StrOpt(
        "log-file",
        metavar="PATH",
        help="Write the log lines to PATH (JSON lines, the same events and fields) "
        "instead of to stderr.",
    ),
]

CONF = cfg.CONF
register_opts(CONF)
CONF.register_cli_opts(common_cli_opts)


def version() -> str:
    """The installed package's version (what --version prints)."""
    try:
        return importlib.metadata.version("vm-scheduler")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


#: Where a command looks for its configuration when no --config-file is given,
#: as OpenStack services do (oslo.config's search: ~/.scheduler/, ~/,
#: /etc/scheduler/, /etc/, for scheduler.conf and <prog>.conf).
def find_config_files(prog: str) -> list[str]:
    return list(cfg.find_config_files(project="scheduler", prog=prog))


def set_defaults() -> None:
    """Our defaults for library options (also applied by oslo-config-generator
    through the ``oslo.config.opts.defaults`` entry point, so the sample shows
    what the daemons really use)."""
    import oslo_messaging

    oslo_messaging.set_transport_defaults(control_exchange="scheduler")


def parse_args(
    argv: Sequence[str],
    prog: str,
    description: str = "",
    default_config_files: Sequence[str] | None = None,
) -> cfg.ConfigOpts:
    """Parse the command line and config files into the global CONF, and check
    every option's value (:func:`validate`) before anything uses one.

    With ``default_config_files`` None, the files oslo.config finds for the
    project (``/etc/scheduler/scheduler.conf`` when it exists) are read unless
    ``--config-file`` names others. oslo.messaging's own options
    (``transport_url``, ``[oslo_messaging_rabbit]``) are registered when the
    transport is built; ``set_transport_defaults`` makes ``transport_url``
    known before parsing so it can be given on the CLI.

    :raises ConfigInvalid: an option whose value cannot be used.
    :raises oslo_config.cfg.Error: a file that cannot be read or parsed.
    """
    set_defaults()
    CONF(
        list(argv),
        project="scheduler",
        prog=prog,
        description=description,
        version=version(),
        default_config_files=(
            find_config_files(prog) if default_config_files is None else list(default_config_files)
        ),
    )
    validate(CONF)
    return CONF


def _options(conf: cfg.ConfigOpts) -> Iterator[tuple[str | None, str]]:
    """(group, option) for every option registered on ``conf`` now."""
    for name in list(conf):
        try:
            value = conf[name]
        except cfg.NoSuchOptError:
            continue
        except ValueError:  # an option of [DEFAULT] whose value is bad
            yield None, name
            continue
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            for option in list(value):
                yield name, option
        else:
            yield None, name


_BAD_VALUE = re.compile(r"is not valid: (?P<reason>.*)$", re.S)


def _config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` read, in the order read (a later one wins)."""
    files = list(conf.config_file or [])
    for directory in conf.config_dir or []:
        if os.path.isdir(directory):
            files.extend(
                os.path.join(directory, f)
                for f in sorted(os.listdir(directory))
                if f.endswith(".conf")
            )
    return files


def _raw(conf: cfg.ConfigOpts, group: str | None, name: str) -> tuple[str, str]:
    """The text an option was given in a config file, and that file (the last
    file that sets it wins, as oslo.config reads them)."""
    found = ("?", "the configuration")
    for path in _config_files(conf):
        sections: dict[str, dict[str, list[str]]] = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue
        values = sections.get(group or "DEFAULT", {}).get(name)
        if values:
            found = (values[-1], path)
    return found


def config_invalid(
    conf: cfg.ConfigOpts, group: str | None, name: str, exc: Exception
) -> ConfigInvalid:
    """The one-line error for option ``[group] name`` whose value raised ``exc``."""
    from scheduler.log import mask_secrets

    text, source = _raw(conf, group, name)
    value = mask_secrets(text)
    match = _BAD_VALUE.search(str(exc))
    reason = mask_secrets((match.group("reason") if match else str(exc)).strip().splitlines()[0])
    return ConfigInvalid(
        option=f"[{group or 'DEFAULT'}] {name}", value=value, source=source, reason=reason
    )


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every registered option once, so a value that cannot be used (not
    a number, out of its bounds, not one of its choices) stops the command
    before it serves or sends anything; then the URLs, which are only read when
    something connects.

    :raises ConfigInvalid: naming the option, its value and its file.
    """
    from scheduler.store import check_store_url

    for group, name in _options(conf):
        try:
            getattr(conf[group] if group else conf, name)
        except ValueError as exc:  # ConfigFileValueError is one
            raise config_invalid(conf, group, name, exc) from exc
    try:
        check_store_url(conf.redis.url)
    except ValueError as exc:
        raise config_invalid(conf, "redis", "url", exc) from exc
    import oslo_messaging

    try:
        oslo_messaging.TransportURL.parse(conf)  # registers transport_url, then reads it
    except oslo_messaging.InvalidTransportURL as exc:
        raise config_invalid(conf, None, "transport_url", exc) from exc
