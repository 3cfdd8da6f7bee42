"""Every group and its options: registered on a configuration, listed for
``oslo-config-generator`` (entry points ``oslo.config.opts`` and
``oslo.config.opts.defaults``), and registered on the global ``cfg.CONF``
with the command line's own options when this module is first imported."""

from __future__ import annotations

from oslo_config import cfg

from scheduler.conf.compute import compute_group, compute_opts
from scheduler.conf.conductor import conductor_group, conductor_opts
from scheduler.conf.default import default_opts
from scheduler.conf.filter_scheduler import filter_scheduler_group, filter_scheduler_options
from scheduler.conf.notifications import notifications_group, notifications_opts
from scheduler.conf.nova_compat import nova_compat_group, nova_compat_opts
from scheduler.conf.pci import pci_group, pci_opts
from scheduler.conf.priority import priority_group, priority_opts
from scheduler.conf.redis import redis_group, redis_opts
from scheduler.conf.scheduler import scheduler_group, scheduler_opts
from scheduler.conf.upgrade_levels import upgrade_levels_group, upgrade_levels_opts


def _groups() -> list[tuple[cfg.OptGroup | None, list[cfg.Opt]]]:
    """Every group and its options; ``[filter_scheduler]``'s with the plugins'
    registered now."""
    return [
        (None, default_opts),
        (scheduler_group, scheduler_opts),
        (filter_scheduler_group, filter_scheduler_options()),
        (pci_group, pci_opts),
        (priority_group, priority_opts),
        (redis_group, redis_opts),
        (notifications_group, notifications_opts),
        (compute_group, compute_opts),
        (conductor_group, conductor_opts),
        (nova_compat_group, nova_compat_opts),
        (upgrade_levels_group, upgrade_levels_opts),
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


def set_defaults() -> None:
    """Our defaults for library options (also applied by oslo-config-generator
    through the ``oslo.config.opts.defaults`` entry point, so the sample shows
    what the daemons really use)."""
    import oslo_messaging

    oslo_messaging.set_transport_defaults(control_exchange="scheduler")
