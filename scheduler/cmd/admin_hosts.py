"""``scheduler-admin hosts`` and ``usage``: what the hosts hold, read from the store.

``hosts [--filter K=V] [--sort KEY]`` lists the hosts (usage against
capacity per resource class, up/down, disabled, failed builds, aggregates and
traits); ``usage provider|aggregate|project`` sums it per provider, per
aggregate and per project (:mod:`scheduler.usage`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from oslo_config import cfg

from scheduler import usage
from scheduler.cmd import _cli
from scheduler.cmd._commands import Command, Output, arg
from scheduler.exceptions import NotFound
from scheduler.render import table
from scheduler.store import Store


def _table(conf: cfg.ConfigOpts, store: Store) -> usage.HostTable:
    return usage.HostTable.from_snapshot(
        store.compact_snapshot(), time.time(), float(conf.scheduler.service_down_time)
    )


def _used_cap(used: int, cap: int) -> str:
    return f"{used}/{cap}"


def format_hosts(hosts: usage.HostTable, rows: np.ndarray) -> Iterator[str]:
    """``hosts`` as text, a line at a time: the column widths come from the
    columns, so no row is kept once printed; then a summary line."""
    if not len(rows):
        yield "no hosts"
        return
    classes = [rc for rc in hosts.classes if hosts.has_class[rc][rows].any()]

    def status(i: int) -> str:
        if not hosts.disabled[i]:
            return "enabled"
        reason = hosts.disabled_reasons[i]
        return "disabled" + (f" ({reason})" if reason else "")

    aggregate_text = [",".join(names) for names in hosts.aggregate_labels]
    trait_text = [",".join(names) for names in hosts.trait_names]

    headers = [
        "host",
        "state",
        "status",
        "failed builds",
        "consumers",
        *(f"{rc} used/cap" for rc in classes),
        "aggregates",
        "traits",
    ]
    distinct_aggregates = {int(c) for c in np.unique(hosts.aggregates[rows])}
    reasons = {hosts.disabled_reasons[i] or "" for i in rows if hosts.disabled[i]}
    widths = [
        max(len(hosts.names[i]) for i in rows),
        len("DOWN"),
        max(
            [len("enabled")] + [len(f"disabled ({r})") if r else len("disabled") for r in reasons]
        ),
        len(str(int(hosts.failed_builds[rows].max()))),
        len(str(int(hosts.consumers[rows].max()))),
        *(
            len(_used_cap(int(hosts.used[rc][rows].max()), int(hosts.capacity[rc][rows].max())))
            for rc in classes
        ),
        max(len(aggregate_text[c]) for c in distinct_aggregates),
        0,
    ]
    widths = [max(w, len(h)) for w, h in zip(widths, headers, strict=True)]
    left = {0, 1, 2, len(headers) - 2, len(headers) - 1}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if n in left else c.rjust(w)
            for n, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    yield line(headers)
    for i in rows:
        yield line(
            [
                hosts.names[i],
                "up" if hosts.up[i] else "DOWN",
                status(i),
                str(int(hosts.failed_builds[i])),
                str(int(hosts.consumers[i])),
                *(
                    _used_cap(int(hosts.used[rc][i]), int(hosts.capacity[rc][i]))
                    if hosts.has_class[rc][i]
                    else "-"
                    for rc in classes
                ),
                aggregate_text[hosts.aggregates[i]] or "-",
                trait_text[hosts.traits[i]] or "-",
            ]
        )
    up = int(hosts.up[rows].sum())
    disabled = int(hosts.disabled[rows].sum())
    totals = [
        f"{rc} {_used_cap(t['used'], t['capacity'])}"
        + (f" ({t['used'] / t['capacity']:.1%})" if t["capacity"] else "")
        for rc, t in hosts.totals(rows).items()
    ]
    yield ""
    yield (
        f"{len(rows)} hosts: {up} up, {len(rows) - up} down, {disabled} disabled; "
        + "; ".join(totals)
    )


def json_lines(head: str, items: Iterable[Any], tail: str) -> Iterator[str]:
    """A JSON document whose one list is written an item a line, as the items
    come (none kept): ``head`` ends where the list opens, ``tail`` closes it."""
    yield head
    sep = ""
    for item in items:
        yield sep + json.dumps(item)
        sep = ","
    yield tail


def hosts_run(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``hosts``: the hosts that match, in the order asked, written a host at a time."""
    args = conf.command
    hosts = _table(conf, store)
    rows = hosts.order(hosts.select(args.filter), args.sort, reverse=args.reverse)
    return Output(
        stream=json_lines("[", hosts.rows(rows), "]"),
        table=format_hosts(hosts, rows),
        values=(
            (
                hosts.names[i],
                "up" if hosts.up[i] else "down",
                "disabled" if hosts.disabled[i] else "enabled",
                int(hosts.failed_builds[i]),
                int(hosts.consumers[i]),
            )
            for i in rows
        ),
    )


def format_provider_usage(view: Mapping[str, Any]) -> str:
    rows = [
        (
            rc,
            u["used"],
            u["capacity"],
            f"{u['used'] / u['capacity']:.1%}" if u["capacity"] else "-",
            u["total"],
            u["reserved"],
            f"{u['allocation_ratio']:g}",
        )
        for rc, u in view["usage"].items()
    ]
    root = "" if view["root_uuid"] == view["uuid"] else f" (child of {view['root_uuid']})"
    return "\n".join(
        [
            f"provider {view['name']} ({view['uuid']}){root}; {view['consumers']} consumer(s), "
            f"generation {view['generation']}",
            *table(
                ("resource class", "used", "capacity", "fill", "total", "reserved", "ratio"),
                rows,
                indent="  ",
            ),
        ]
    )


def format_group_usage(what: str, groups: Sequence[Mapping[str, Any]]) -> str:
    """Per aggregate or per project: one line per group and class."""
    if not groups:
        return f"no {what}s"
    rows = []
    for g in groups:
        label = g["label"]
        for rc, u in g["usage"].items() or [("-", None)]:
            cap = u.get("capacity") if u else None
            rows.append(
                (
                    label,
                    g["count"],
                    rc,
                    u["used"] if u else "-",
                    "-" if cap is None else cap,
                    f"{u['used'] / cap:.1%}" if cap else "-",
                )
            )
            label = ""
    headers = (what, "hosts" if what == "aggregate" else "consumers", "resource class")
    return "\n".join(table((*headers, "used", "capacity", "fill"), rows, left=1))


def provider_run(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``usage provider``: one provider's inventories and usage."""
    name = conf.command.provider
    try:
        provider = store.get_provider(name)
    except NotFound:
        provider = store.get_provider_by_name(name)
    view = usage.provider_usage(provider)
    return Output(
        document=view,
        indent=2,
        table=format_provider_usage(view),
        values=[(rc, u["used"], u["capacity"]) for rc, u in view["usage"].items()],
    )


def aggregate_run(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``usage aggregate``: each aggregate's hosts summed (or the one named)."""
    named = conf.command.aggregate
    found = usage.HostTable.by_aggregate(_table(conf, store))
    if named is not None:
        found["aggregates"] = [a for a in found["aggregates"] if named in (a["uuid"], a["name"])]
        if not found["aggregates"]:
            raise NotFound(kind="aggregate", ident=named)
        del found["no_aggregate"]
    groups = [
        {"label": a["name"], "count": a["hosts"], "usage": a["usage"]} for a in found["aggregates"]
    ]
    if "no_aggregate" in found and found["no_aggregate"]["hosts"]:
        alone = found["no_aggregate"]
        groups.append({"label": "(none)", "count": alone["hosts"], "usage": alone["usage"]})
    return Output(
        document=found,
        indent=2,
        table=format_group_usage("aggregate", groups),
        values=[
            (None if g["label"] == "(none)" else g["label"], rc, u["used"], u["capacity"])
            for g in groups
            for rc, u in g["usage"].items()
        ],
    )


def project_run(conf: cfg.ConfigOpts, store: Store) -> Output:
    """``usage project``: what each project's consumers hold (or the one named's)."""
    named = conf.command.project
    projects = usage.project_usage(store.scan_consumers(), named)
    if named is not None and not projects["projects"]:
        raise NotFound(kind="project holding allocations", ident=named)
    rows = projects["projects"]
    return Output(
        document=projects,
        indent=2,
        table=format_group_usage(
            "project",
            [
                {"label": p["project_id"], "count": p["consumers"], "usage": p["usage"]}
                for p in rows
            ],
        ),
        values=[(p["project_id"], rc, u["used"]) for p in rows for rc, u in p["usage"].items()],
    )


HOSTS = Command(
    "hosts",
    help="List hosts: usage per resource class, up/down, disabled, failures, aggregates, traits.",
    description="List every compute host from the store: used/capacity per resource "
    "class (child providers counted with their host), whether its service is up "
    "(heartbeat within [scheduler] service_down_time) and enabled, its recent build "
    "failures, how many consumers hold allocations on it, its aggregates and traits. "
    "Read a page at a time as columns (no store command over 10 ms, no object per "
    "host); the text and JSON are written a host at a time.",
    epilog="filters (--filter KEY=VALUE, repeatable, all must match): "
    + "; ".join(f"{k}: {what}" for k, what in usage.FILTERS.items())
    + ". sort keys (--sort KEY): "
    + ", ".join(usage.SORTS)
    + ", used:RC, free:RC, fill:RC (used / capacity of resource class RC; hosts "
    "without it last). JSON: a list, one object per host: host, uuid, up, disabled, "
    "disabled_reason, failed_builds, consumers, last_seen, usage {RC: {used, "
    "capacity}}, traits, aggregates (names).",
    run=hosts_run,
    values="one line per host: its name, up or down, enabled or disabled, its failed "
    "builds and its consumers",
    arguments=(
        arg(
            "--filter",
            metavar="KEY=VALUE",
            type=_cli.key_value,
            action="append",
            default=[],
            help="Only the hosts that match, e.g. state=down, status=disabled, "
            "aggregate=ssd-hosts, trait=CUSTOM_GPU, host='cmp-1*' (repeatable).",
        ),
        arg(
            "--sort",
            metavar="KEY",
            default="host",
            type=_cli.name,
            help="Order by KEY (default host), e.g. fill:MEMORY_MB or free:VCPU.",
        ),
        arg("--reverse", action="store_true", help="Largest first (ties stay by host name)."),
    ),
)

USAGE = Command(
    "usage",
    help="Usage against capacity per resource class: of one provider, per aggregate, per project.",
    description="What is used per resource class, read from the store: 'usage "
    "provider NAME|UUID' one provider's inventories and usage (as 'openstack resource "
    "provider usage show' and 'inventory list' together); 'usage aggregate [NAME|UUID]' "
    "each aggregate's hosts summed (a host in two aggregates counts in both; hosts in "
    "none apart); 'usage project [PROJECT]' what each project's consumers hold "
    "(instances, and migrations during a move). Hosts are read as in 'hosts', "
    "consumers a page at a time; only the sums are kept.",
    title="views",
    subcommands=(
        Command(
            "provider",
            help="One provider: used, capacity, total, reserved, ratio per resource class.",
            description="One provider's inventory and usage per resource class; -f json: "
            "{uuid, name, root_uuid, generation, consumers, usage: {RC: {used, capacity, "
            "total, reserved, allocation_ratio, min_unit, max_unit, step_size}}}. An "
            "unknown provider is an error (exit status 2).",
            run=provider_run,
            values="one line per resource class: its name, used and capacity",
            arguments=(arg("provider", metavar="NAME|UUID", help="The provider."),),
        ),
        Command(
            "aggregate",
            help="Per aggregate: its hosts' used and capacity per resource class.",
            description="Per aggregate, its hosts (child providers with them) summed per "
            "resource class; -f json: {aggregates: [{uuid, name, hosts, usage: {RC: {used, "
            "capacity}}}], no_aggregate: {hosts, usage}} (no no_aggregate when one is named).",
            run=aggregate_run,
            values="one line per aggregate and resource class: the aggregate's name (- for "
            "the hosts in none), the class, used and capacity",
            arguments=(
                arg(
                    "aggregate",
                    metavar="NAME|UUID",
                    nargs="?",
                    type=_cli.name,
                    help="Only this aggregate.",
                ),
            ),
        ),
        Command(
            "project",
            help="Per project: consumers and what they hold per resource class.",
            description="Per project, the consumers holding allocations and their sum per "
            "resource class; -f json: {projects: [{project_id, consumers, usage: {RC: "
            "{used}}}]}.",
            run=project_run,
            values="one line per project and resource class: the project, the class and used",
            arguments=(
                arg(
                    "project",
                    metavar="PROJECT",
                    nargs="?",
                    type=_cli.name,
                    help="Only this project.",
                ),
            ),
        ),
    ),
)
