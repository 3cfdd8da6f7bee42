"""``[redis]``: the placement store (resource providers, allocations, instance records)."""

from __future__ import annotations

from oslo_config import cfg

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
