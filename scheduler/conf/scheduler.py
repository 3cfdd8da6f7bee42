"""``[scheduler]``: how the scheduler worker serves RPC and talks to compute nodes."""

from __future__ import annotations

from oslo_config import cfg

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
