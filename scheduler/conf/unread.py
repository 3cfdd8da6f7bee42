"""Options a configuration file sets that nothing here reads, said at start-up.

oslo.config ignores what it has not registered, so an operator who ports a
``nova.conf`` (``[DEFAULT] cpu_allocation_ratio``, ``[oslo_messaging_notifications]
driver = noop``) or misspells an option (``[scheduler] max_atempts``) got a
daemon that ran on the defaults without a word. Every daemon now warns, one
line each (:func:`warn_unread`):

* a Nova option this project does not read, with where its equivalent lives
  here (:data:`NOVA_EQUIVALENTS`; a whole Nova group in :data:`NOVA_GROUPS`);
* any other option set in one of this project's own groups that is not one
  of its options, with the closest option's name when there is one.

Options of ``[DEFAULT]`` and of groups the project does not own (oslo.messaging's,
oslo.log's) are registered by their libraries, some only when a transport
is built, so only the Nova names are looked for there.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from oslo_config import cfg

from scheduler.conf.opts import list_opts
from scheduler.conf.validation import config_files
from scheduler.log import get_logger

LOG = get_logger(__name__)

#: (group, option) of Nova -> where this project's equivalent lives.
NOVA_EQUIVALENTS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        **{
            ("DEFAULT", name): f"[compute] {name} (each compute-sim's inventory)"
            for name in (
                "cpu_allocation_ratio",
                "ram_allocation_ratio",
                "disk_allocation_ratio",
                "reserved_host_memory_mb",
                "reserved_host_cpus",
            )
        },
        **{
            ("DEFAULT", f"initial_{kind}_allocation_ratio"): f"[compute] {kind}_allocation_ratio"
            for kind in ("cpu", "ram", "disk")
        },
        ("DEFAULT", "reserved_host_disk_mb"): "[compute] reserved_host_disk_gb (in GB)",
        ("DEFAULT", "report_interval"): (
            "[compute] heartbeat_interval (here [compute] report_interval is the "
            "instance report, not the service heartbeat)"
        ),
        ("DEFAULT", "service_down_time"): "[scheduler] service_down_time",
        ("DEFAULT", "allow_resize_to_same_host"): "[scheduler] allow_resize_to_same_host",
        ("DEFAULT", "scheduler_topic"): "[scheduler] topic",
        ("DEFAULT", "compute_topic"): "[compute] topic",
        ("oslo_messaging_notifications", "driver"): (
            "[notifications] enabled (false where Nova had driver = noop); the "
            "driver is always messagingv2 (of this group only transport_url and "
            "retry are read)"
        ),
        ("oslo_messaging_notifications", "topics"): ("[notifications] topic and versioned_topic"),
        ("notifications", "notification_format"): (
            "[notifications] format (unversioned, versioned or both)"
        ),
        ("notifications", "versioned_notifications_topics"): (
            "[notifications] versioned_topic (one topic)"
        ),
        ("DEFAULT", "default_availability_zone"): "[filter_scheduler] default_availability_zone",
        ("DEFAULT", "running_deleted_instance_action"): (
            "[compute] running_deleted_instance_action (reap or log)"
        ),
        ("DEFAULT", "running_deleted_instance_timeout"): (
            "[conductor] orphan_grace (for every finding of the reconciler)"
        ),
        ("DEFAULT", "shelved_offload_time"): "nothing: a shelve offloads at once (Nova's 0)",
        ("placement", "randomize_allocation_candidates"): (
            "[scheduler] randomize_allocation_candidates (a window from a random host, "
            "not a sample)"
        ),
        ("filter_scheduler", "shuffle_best_same_weighed_hosts"): (
            "nothing: ties are always shuffled, seeded by the request id and instance uuid"
        ),
        ("filter_scheduler", "weight_classes"): (
            "[filter_scheduler] weighers (entry point names, not class paths)"
        ),
        ("filter_scheduler", "available_filters"): (
            "every filter of the scheduler.filters entry point group is available; "
            "[filter_scheduler] enabled_filters picks them"
        ),
        ("filter_scheduler", "track_instance_changes"): (
            "nothing: the store's change feed keeps every worker's view current"
        ),
        ("scheduler", "driver"): "nothing: there is one scheduler driver",
        ("scheduler", "discover_hosts_in_cells_interval"): (
            "nothing: there are no cells; a compute registers itself"
        ),
        ("scheduler", "periodic_task_interval"): "nothing: there are no periodic tasks",
    }
)

#: Nova's groups with no counterpart here -> what stands in for them.
NOVA_GROUPS: Mapping[str, str] = MappingProxyType(
    {
        "placement": "the placement store is Redis: [redis] url and key_prefix",
        "api_database": "the records are in the placement store: [redis] url",
        "database": "the records are in the placement store: [redis] url",
        "cells": "nothing: there are no cells",
    }
)


@dataclass(frozen=True)
class Unread:
    """One option a file sets that nothing here reads."""

    group: str
    name: str
    #: Where the equivalent lives, or the closest option's name ('' if none).
    instead: str
    path: str

    def __str__(self) -> str:
        where = f" (in {self.path})" if self.path else ""
        if not self.name:
            return f"[{self.group}]{where} is a Nova group and is not read here; {self.instead}"
        what = f"[{self.group}] {self.name}{where}"
        if (self.group, self.name) in NOVA_EQUIVALENTS:
            return f"{what} is Nova's and is not read here; instead: {self.instead}"
        hint = f"; did you mean {self.instead}?" if self.instead else ""
        return f"{what} is not an option of this scheduler and is not read{hint}"


def _sections(path: str) -> Iterator[tuple[str, str]]:
    """(group, option) of every value ``path`` sets."""
    sections: dict[str, dict[str, list[str]]] = {}
    try:
        cfg.ConfigParser(path, sections).parse()
    except (OSError, cfg.ParseError):  # said by oslo.config itself
        return
    for group, options in sections.items():
        for name in options:
            yield group, name


def unread(conf: cfg.ConfigOpts) -> list[Unread]:
    """Every option the configuration files of ``conf`` set that nothing here
    reads, in file order, each once."""
    own = {group: {opt.name for opt in opts} for group, opts in list_opts() if group != "DEFAULT"}
    found: dict[tuple[str, str], Unread] = {}
    for path in config_files(conf):
        for group, name in _sections(path):
            key = (group, name)
            if key in found:
                continue
            if key in NOVA_EQUIVALENTS:
                found[key] = Unread(group, name, NOVA_EQUIVALENTS[key], path)
            elif group in own and name not in own[group]:
                close = difflib.get_close_matches(name, sorted(own[group]), n=1)
                found[key] = Unread(group, name, f"[{group}] {close[0]}" if close else "", path)
            elif group in NOVA_GROUPS and (group, "") not in found:
                found[(group, "")] = Unread(group, "", NOVA_GROUPS[group], path)
    return list(found.values())


def warn_unread(conf: cfg.ConfigOpts) -> None:
    """Log one warning per option nothing reads (call once logging is set up)."""
    for option in unread(conf):
        LOG.warning("option_not_read", detail=str(option))
