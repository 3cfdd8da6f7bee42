"""``[priority]``: the priority classes flavors choose from (:mod:`scheduler.priority`)."""

from __future__ import annotations

from oslo_config import cfg

from scheduler.conf.validation import config_invalid
from scheduler.priority import (
    CLASS_SPEC,
    MAX_PRIORITY,
    NEVER,
    PREEMPTIBLE,
    WAIT,
    PriorityClasses,
)

priority_group = cfg.OptGroup(
    "priority",
    title="Priority classes",
    help="The priority classes a flavor chooses with the extra spec "
    f"{CLASS_SPEC}=NAME. Each instance's record keeps its class, priority and "
    "preemptibility as they were when it was scheduled. Read by the scheduler "
    "workers (which refuse a request naming an unknown class) and by the conductor "
    "(which records the class); give both the same values.",
)

priority_opts: list[cfg.Opt] = [
    cfg.ListOpt(
        "classes",
        default=[],
        help="The classes, each name:priority[:preemptible][:never][:wait]. The priority "
        f"is an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, higher for what matters "
        f"more; {PREEMPTIBLE} marks instances that a request of a strictly higher "
        f"priority may evict; {NEVER} marks a class whose requests never evict others; "
        f"{WAIT} marks a class whose requests wait for capacity (PENDING, up to max_wait "
        "seconds) instead of failing when no host fits. "
        "Example: on-demand:1000, batch:500:preemptible:never:wait, spot:100:preemptible. "
        "Eviction itself is not built yet: today the class is validated, recorded "
        "and shown. A bad entry stops start-up, named.",
    ),
    cfg.StrOpt(
        "default_class",
        help="The class of a request whose flavor names none; one of classes. Unset: "
        "such a request has no class (priority 0, not preemptible).",
    ),
    cfg.FloatOpt(
        "max_wait",
        default=3600.0,
        min=0.0,
        help="Seconds a request that waits for capacity (its class has the wait flag, "
        "or its boot asked with --wait-for-capacity) stays PENDING at most; then it "
        "goes to ERROR with 'No valid host was found.'. 0 turns waiting off: every "
        "request that finds no host fails at once. Read by the conductor and by "
        "conductor-stub boot (the value is recorded on the instance).",
    ),
    cfg.FloatOpt(
        "pending_retry_interval",
        default=60.0,
        min=0.1,
        help="Seconds between the conductor's slow passes over the PENDING requests, "
        "each retrying the first pending_retry_batch of them whatever the change feed "
        "said. Between passes a request is retried as soon as the feed shows "
        "something that could make it fit (a release, a host enabled or added, an "
        "inventory changed), polled every second.",
    ),
    cfg.IntOpt(
        "pending_retry_batch",
        default=20,
        min=1,
        help="PENDING requests retried at most per retry, the first in order "
        "(priority, then age): the rest wait for the next event or pass.",
    ),
]


def priority_classes(conf: cfg.ConfigOpts) -> PriorityClasses:
    """The classes the options define (checked at start-up by
    :func:`~scheduler.conf.validation.validate`).

    :raises ConfigInvalid: naming every bad entry of ``classes``, or a
        ``default_class`` that is not one of them.
    """
    group = conf.priority
    try:
        parsed = PriorityClasses.parse(group.classes)
    except ValueError as exc:
        raise config_invalid(conf, "priority", "classes", exc) from exc
    try:
        return PriorityClasses(parsed.classes, group.default_class or None)
    except ValueError as exc:
        raise config_invalid(conf, "priority", "default_class", exc) from exc
