"""``[priority]``: the priority classes flavors choose from (:mod:`scheduler.priority`)."""

from __future__ import annotations

from oslo_config import cfg

from scheduler.conf.validation import config_invalid
from scheduler.priority import CLASS_SPEC, MAX_PRIORITY, NEVER, PREEMPTIBLE, PriorityClasses

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
        help="The classes, each name:priority[:preemptible][:never]. The priority is "
        f"an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, higher for what matters more; "
        f"{PREEMPTIBLE} marks instances that a request of a strictly higher priority "
        f"may evict; {NEVER} marks a class whose requests never evict others. "
        "Example: on-demand:1000, batch:500:preemptible:never, spot:100:preemptible. "
        "Eviction itself is not built yet: today the class is validated, recorded "
        "and shown. A bad entry stops start-up, named.",
    ),
    cfg.StrOpt(
        "default_class",
        help="The class of a request whose flavor names none; one of classes. Unset: "
        "such a request has no class (priority 0, not preemptible).",
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
