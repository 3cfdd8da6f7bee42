"""Configuration options, in the groups operators know from Nova.

Options are registered on the global ``cfg.CONF``: oslo.messaging 18.3 registers
its tracing and metrics groups only there, and an RPC server built on a
private ``ConfigOpts`` fails after acknowledging each message, silently
(see DESIGN.md). Code reads options once, at start-up, and passes values in;
filters and weighers never import this package.

``list_opts()`` feeds ``oslo-config-generator`` (entry point
``oslo.config.opts = scheduler``), which writes etc/scheduler/scheduler.conf.sample.

One module per option group, as Nova's ``nova/conf/``: :mod:`~scheduler.conf.default`,
:mod:`~scheduler.conf.scheduler`, :mod:`~scheduler.conf.filter_scheduler`,
:mod:`~scheduler.conf.pci`, :mod:`~scheduler.conf.priority`, :mod:`~scheduler.conf.redis`,
:mod:`~scheduler.conf.notifications`, :mod:`~scheduler.conf.compute`,
:mod:`~scheduler.conf.conductor` and :mod:`~scheduler.conf.nova_compat`; then
:mod:`~scheduler.conf.opts` (every group in order: ``register_opts``,
``list_opts``, ``set_defaults``, and the global ``CONF``, registered when that
module is first imported),
:mod:`~scheduler.conf.parse` (``parse_args``) and
:mod:`~scheduler.conf.validation` (``validate``). The names below are imported
when first used (:mod:`scheduler.lazy`): ``CONF`` comes with every option
registered on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler import lazy

if TYPE_CHECKING:
    from scheduler.conf.compute import compute_group, compute_opts
    from scheduler.conf.conductor import conductor_group, conductor_opts
    from scheduler.conf.default import default_opts
    from scheduler.conf.filter_scheduler import (
        DEFAULT_FILTERS,
        DEFAULT_WEIGHERS,
        filter_scheduler_group,
        filter_scheduler_options,
        filter_scheduler_opts,
        filter_scheduler_shared_opts,
    )
    from scheduler.conf.notifications import notifications_group, notifications_opts
    from scheduler.conf.nova_compat import nova_compat_group, nova_compat_opts
    from scheduler.conf.opts import CONF, common_cli_opts, list_opts, register_opts, set_defaults
    from scheduler.conf.parse import find_config_files, parse_args, version
    from scheduler.conf.pci import pci_group, pci_opts
    from scheduler.conf.priority import priority_classes, priority_group, priority_opts
    from scheduler.conf.redis import redis_group, redis_opts
    from scheduler.conf.scheduler import scheduler_group, scheduler_opts
    from scheduler.conf.validation import config_invalid, validate

__all__ = [
    "CONF",
    "DEFAULT_FILTERS",
    "DEFAULT_WEIGHERS",
    "common_cli_opts",
    "compute_group",
    "compute_opts",
    "conductor_group",
    "conductor_opts",
    "config_invalid",
    "default_opts",
    "filter_scheduler_group",
    "filter_scheduler_options",
    "filter_scheduler_opts",
    "filter_scheduler_shared_opts",
    "find_config_files",
    "list_opts",
    "notifications_group",
    "notifications_opts",
    "nova_compat_group",
    "nova_compat_opts",
    "parse_args",
    "pci_group",
    "pci_opts",
    "priority_classes",
    "priority_group",
    "priority_opts",
    "redis_group",
    "redis_opts",
    "register_opts",
    "scheduler_group",
    "scheduler_opts",
    "set_defaults",
    "validate",
    "version",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "CONF": "scheduler.conf.opts",
            "DEFAULT_FILTERS": "scheduler.conf.filter_scheduler",
            "DEFAULT_WEIGHERS": "scheduler.conf.filter_scheduler",
            "common_cli_opts": "scheduler.conf.opts",
            "compute_group": "scheduler.conf.compute",
            "compute_opts": "scheduler.conf.compute",
            "conductor_group": "scheduler.conf.conductor",
            "conductor_opts": "scheduler.conf.conductor",
            "config_invalid": "scheduler.conf.validation",
            "default_opts": "scheduler.conf.default",
            "filter_scheduler_group": "scheduler.conf.filter_scheduler",
            "filter_scheduler_options": "scheduler.conf.filter_scheduler",
            "filter_scheduler_opts": "scheduler.conf.filter_scheduler",
            "filter_scheduler_shared_opts": "scheduler.conf.filter_scheduler",
            "find_config_files": "scheduler.conf.parse",
            "list_opts": "scheduler.conf.opts",
            "notifications_group": "scheduler.conf.notifications",
            "notifications_opts": "scheduler.conf.notifications",
            "nova_compat_group": "scheduler.conf.nova_compat",
            "nova_compat_opts": "scheduler.conf.nova_compat",
            "parse_args": "scheduler.conf.parse",
            "pci_group": "scheduler.conf.pci",
            "pci_opts": "scheduler.conf.pci",
            "priority_classes": "scheduler.conf.priority",
            "priority_group": "scheduler.conf.priority",
            "priority_opts": "scheduler.conf.priority",
            "redis_group": "scheduler.conf.redis",
            "redis_opts": "scheduler.conf.redis",
            "register_opts": "scheduler.conf.opts",
            "scheduler_group": "scheduler.conf.scheduler",
            "scheduler_opts": "scheduler.conf.scheduler",
            "set_defaults": "scheduler.conf.opts",
            "validate": "scheduler.conf.validation",
            "version": "scheduler.conf.parse",
        },
    )
