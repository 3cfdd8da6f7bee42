"""``[filter_scheduler]``: which filters and weighers run, and the options each
plugin declares (generated from its declaration, see :mod:`scheduler.engine.plugins`)."""

from __future__ import annotations

from collections.abc import Mapping

from oslo_config import cfg

from scheduler.engine import plugins
from scheduler.engine import settings as _settings

DEFAULT_FILTERS = list(_settings.DEFAULT_FILTERS)
DEFAULT_WEIGHERS = list(_settings.DEFAULT_WEIGHERS)

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
        "scheduler.weighers group; an unknown name stops start-up. The weigher "
        "profile adds its own to these and, unless pinned here, turns RAM, CPU "
        "and disk off (see weigher_profile); the worker's start line "
        "(worker_starting) lists the weighers in effect with their multipliers.",
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
