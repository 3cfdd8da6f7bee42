"""``scheduler-admin``: answers for operators — why no host, what hosts hold, what
became of an instance.

``scheduler-admin explain --flavor m1.large`` asks a running worker (RPC
``explain``, in an admin context) to run the pipeline on a request as a dry
run: nothing is claimed. It prints how many hosts each stage left, the hosts
removed per reason (``0/1200 hosts available: 800 insufficient MEMORY_MB,
...``) and the best weighed hosts with each weigher's contribution. With
``--request-id`` and ``--instance-uuid`` of a real request its ties fall as
that request's did; ``--json --all-hosts`` prints every stage's hosts by name
and the whole weighed list; ``--only-filter NAME`` runs one host filter alone
on every host (RPC ``run_filter``) and names the hosts it removes.

``scheduler-admin hosts [--filter K=V] [--sort KEY]``, ``scheduler-admin usage
provider|aggregate|project`` and ``scheduler-admin instance show UUID`` read the
store directly (:mod:`scheduler.usage`): usage against capacity per resource
class, up/down, disabled, failed builds, aggregates and traits per host; the
sums per aggregate and per project; an instance's state, attempts, tried hosts, re-drives, its
user-facing fault and the admin-only fault details (and during a resize the
migration, with the source's allocation parked on it).

``scheduler-admin host disable HOST [--reason R]`` and ``host enable HOST``
take a host out of scheduling and put it back: the service's flag and its
root provider's ``COMPUTE_STATUS_DISABLED`` trait in one atomic store write,
seen by every worker through the change feed; instances running there are
untouched. ``host drain HOST [--live] [--wait]`` disables it the same way,
then moves every instance ACTIVE there to other hosts by cold migration
(confirmed) or live migration, a few at a time
(:mod:`conductor_stub.drain`), and reports what moved and what could not.

``scheduler-admin audit [--fix] [--grace S]`` runs the conductor's
reconciliation once (:mod:`conductor_stub.reconcile`): each finding in one
line and the counts per kind; ``--fix`` compares again after the grace and
repairs what was found both times. Exit status 1 when something is found.

``scheduler-admin dashboard [--port P]`` serves a live, read-only page of the
cloud to a browser (:mod:`scheduler.dashboard`).

Every command but ``dashboard`` takes ``--json`` for one JSON document instead of text.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import oslo_messaging
from oslo_config import cfg

from scheduler import broker, log, rpc, usage
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.cmd._cli import add_spec_options, key_value
from scheduler.exceptions import InvalidRequest, NotFound, SchedulerError
from scheduler.explain import ExplainReport, InstanceExplanation, StageHosts
from scheduler.flavors import flavor_with, load_catalog
from scheduler.objects import (
    GROUP_POLICIES,
    Image,
    RequestSpec,
    ServerGroup,
    validate_instance_uuids,
)
from scheduler.render import render_instance, resources_line, table
from scheduler.store import Store, make_store
from scheduler.store.services import DISABLED_REASON_MAX, set_host_disabled

DESCRIPTION = (
    "Operator answers: why a request finds no host (explain, a dry run), what "
    "the hosts hold (hosts; usage per provider, aggregate, project), what became "
    "of an instance (instance show); take a host out "
    "of scheduling and back (host disable, host enable) or empty it (host drain); "
    "compare what the computes run with the store, and repair (audit [--fix]); watch the "
    "cloud live in a browser (dashboard)."
)

#: Exit status of ``explain``: the request would be placed / would not be.
EXIT_PLACEABLE = 0
EXIT_UNPLACEABLE = 1
#: Exit status of any command that could not do its work (bad arguments,
#: no worker answering, unknown instance).
EXIT_ERROR = 2
#: Seconds a command without a --timeout of its own (or a longer one) waits at
#: most for the broker to answer before it says so.
BROKER_TIMEOUT = 10.0

_EXPLAIN_EPILOG = """\
exit status: 0 the request would be placed (--only-filter: some host kept),
1 it would not (no host kept), 2 the command failed.

ties: hosts of equal weight are drawn at random, seeded by the request id and
each instance's uuid. Give those of a real request (--request-id,
--instance-uuid) and explain names the hosts select_destinations chose for it
on the same hosts; by default both are made up.

examples:
  scheduler-admin explain --flavor m1.xlarge --count 2 \\
      --extra-spec trait:HW_CPU_X86_AVX512F=required --availability-zone az1
  scheduler-admin explain --flavor m1.small --json --all-hosts \\
      --request-id req-0f3c... --instance-uuid 6a1d...
  scheduler-admin explain --flavor m1.small --only-filter ComputeFilter
"""


_positive = _cli.whole(1)
_seconds = _cli.seconds()


def _add_commands(subparsers: Any) -> None:
    explain = subparsers.add_parser(
        "explain",
        help="Why would (or wouldn't) a request find hosts? A dry run.",
        description="Ask a scheduler worker to run the pipeline on a request without "
        "claiming anything, and print each stage's surviving hosts, the hosts removed per "
        "reason and the best weighed hosts with each weigher's contribution. Needs a "
        "running worker; sent in an admin context.",
        epilog=_EXPLAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument(
        "--flavor",
        required=True,
        help="Flavor name from the catalog (m1.* and [conductor] flavors_file).",
    )
    explain.add_argument(
        "--count",
        type=_positive,
        default=1,
        help="Instances in the request (all or nothing; default 1).",
    )
    explain.add_argument("--availability-zone", metavar="ZONE", help="Ask for this zone.")
    explain.add_argument(
        "--group-policy",
        choices=GROUP_POLICIES,
        help="Put the instances in a server group with this policy.",
    )
    explain.add_argument(
        "--group-uuid",
        metavar="UUID",
        help="With --group-policy: an existing group, whose members the "
        "store knows, e.g. the one 'conductor-stub boot --group-policy' printed "
        "(default: a new, empty group).",
    )
    add_spec_options(explain)
    explain.add_argument(
        "--boot-from-volume",
        action="store_true",
        help="A volume-backed request: its root disk is not counted.",
    )
    explain.add_argument(
        "--project-id",
        default="admin",
        help="Project the request is made for (tenant isolation; default admin).",
    )
    explain.add_argument("--user-id", default="admin", help="User the request is made for.")
    explain.add_argument(
        "--request-id",
        metavar="REQ",
        help="The request id the dry run draws its ties with (a real request's, to "
        "replay its decision; default: a new one).",
    )
    explain.add_argument(
        "--instance-uuid",
        metavar="UUID",
        nargs="+",
        action="extend",
        default=[],
        help="The instances' uuids, as many as --count (repeatable): with --request-id, "
        "a real request's, so ties fall as they did for it (default: made up).",
    )
    explain.add_argument(
        "--json", action="store_true", help="Print the report as JSON instead of the summary."
    )
    only = explain.add_mutually_exclusive_group()
    only.add_argument(
        "--all-hosts",
        action="store_true",
        help="With --json: every stage's surviving hosts by name, the reason of every "
        "host removed, and the whole weighed list with each weigher's normalised value, "
        "multiplier and contribution. Needs --json (refused without it: the summary is "
        "the readable form).",
    )
    only.add_argument(
        "--only-filter",
        metavar="FILTER",
        help="Run this one host filter alone on every host, for the request, and print "
        "the hosts it removes with its reason (no other stage runs; a registered "
        "filter that is not enabled may be tried).",
    )
    explain.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="Seconds to wait at most: for the broker, then for a worker's answer "
        "(default 30). A broker that cannot be reached, or a topic no worker consumes, "
        "is said at once (exit status 2).",
    )

    hosts = subparsers.add_parser(
        "hosts",
        help="List hosts: usage per resource class, up/down, disabled, failures, "
        "aggregates, traits.",
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
    )
    hosts.add_argument(
        "--filter",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        default=[],
        help="Only the hosts that match, e.g. state=down, status=disabled, "
        "aggregate=ssd-hosts, trait=CUSTOM_GPU, host='cmp-1*' (repeatable).",
    )
    hosts.add_argument(
        "--sort",
        metavar="KEY",
        default="host",
        help="Order by KEY (default host), e.g. fill:MEMORY_MB or free:VCPU.",
    )
    hosts.add_argument(
        "--reverse", action="store_true", help="Largest first (ties stay by host name)."
    )
    hosts.add_argument("--json", action="store_true", help="Print the hosts as JSON.")

    usage_parser = subparsers.add_parser(
        "usage",
        help="Usage against capacity per resource class: of one provider, per "
        "aggregate, per project.",
        description="What is used per resource class, read from the store: 'usage "
        "provider NAME|UUID' one provider's inventories and usage (as 'openstack resource "
        "provider usage show' and 'inventory list' together); 'usage aggregate [NAME|UUID]' "
        "each aggregate's hosts summed (a host in two aggregates counts in both; hosts in "
        "none apart); 'usage project [PROJECT]' what each project's consumers hold "
        "(instances, and migrations during a move). Hosts are read as in 'hosts', "
        "consumers a page at a time; only the sums are kept.",
    )
    usage_actions = usage_parser.add_subparsers(dest="action", title="views", metavar="VIEW")
    usage_actions.required = True
    by_provider = usage_actions.add_parser(
        "provider",
        help="One provider: used, capacity, total, reserved, ratio per resource class.",
        description="One provider's inventory and usage per resource class; --json: "
        "{uuid, name, root_uuid, generation, consumers, usage: {RC: {used, capacity, "
        "total, reserved, allocation_ratio, min_unit, max_unit, step_size}}}. An "
        "unknown provider is an error (exit status 2).",
    )
    by_provider.add_argument("provider", metavar="NAME|UUID", help="The provider.")
    by_aggregate = usage_actions.add_parser(
        "aggregate",
        help="Per aggregate: its hosts' used and capacity per resource class.",
        description="Per aggregate, its hosts (child providers with them) summed per "
        "resource class; --json: {aggregates: [{uuid, name, hosts, usage: {RC: {used, "
        "capacity}}}], no_aggregate: {hosts, usage}} (no no_aggregate when one is named).",
    )
    by_aggregate.add_argument(
        "aggregate", metavar="NAME|UUID", nargs="?", help="Only this aggregate."
    )
    by_project = usage_actions.add_parser(
        "project",
        help="Per project: consumers and what they hold per resource class.",
        description="Per project, the consumers holding allocations and their sum per "
        "resource class; --json: {projects: [{project_id, consumers, usage: {RC: "
        "{used}}}]}.",
    )
    by_project.add_argument("project", metavar="PROJECT", nargs="?", help="Only this project.")
    for view in (by_provider, by_aggregate, by_project):
        view.add_argument("--json", action="store_true", help="Print the view as JSON.")

    dashboard = subparsers.add_parser(
        "dashboard",
        help="Serve a live, read-only picture of the cloud to a browser.",
        description="Serve a web page that shows, updated every two seconds: each host's "
        "fill per resource class as a heat map grouped by aggregate, hosts down or "
        "disabled, how many of each catalog flavor still fit, decisions per second, the "
        "reasons of recent NoValidHosts, reschedules and re-drives. Hosts are read from the "
        "store as `hosts` reads them; rates from the workers' and the conductor's /metrics. "
        "Its data needs a token: $SCHEDULER_DASHBOARD_TOKEN, else a random one; the page's "
        "address, token included, is printed at start. Ctrl-C stops it.",
    )
    dashboard.add_argument(
        "--listen",
        default="127.0.0.1",
        help="Address to listen on (default: %(default)s, this machine only).",
    )
    dashboard.add_argument(
        "--port",
        type=int,
        default=8090,
        help="Port to listen on; 0: any free one (default: %(default)s).",
    )
    dashboard.add_argument(
        "--metrics-url",
        action="append",
        type=_cli.http_url,
        metavar="URL",
        help="A /metrics to read rates from, http:// or https:// (repeat for each worker and "
        "the conductor; shown with its password masked); by "
        "default those [scheduler] health_port (one per worker) and [conductor] health_port "
        "name on [scheduler] health_listen.",
    )
    dashboard.add_argument(
        "--refresh",
        type=_seconds,
        default=1.0,
        help="Read the store and the metrics at most once per this many seconds, however "
        "many pages poll (default: %(default)s).",
    )

    instance = subparsers.add_parser(
        "instance", help="Look at one instance.", description="Look at one instance's record."
    )
    actions = instance.add_subparsers(dest="action", title="actions", metavar="ACTION")
    actions.required = True
    show = actions.add_parser(
        "show",
        help="State, host, attempts, tried hosts, fault and its admin details.",
        description="Print an instance's state, host, attempts, tried hosts, the fault its "
        "user sees and the admin-only fault details, and the allocations it holds.",
    )
    show.add_argument("uuid", help="The instance uuid.")
    show.add_argument("--json", action="store_true", help="Print the record as JSON.")

    host = subparsers.add_parser(
        "host",
        help="Disable, enable or drain one host's compute service.",
        description="Disable or enable one host's compute service, or drain it. The service "
        "flag and the host's COMPUTE_STATUS_DISABLED trait are written in one atomic store "
        "step, so every worker sees it through the store's change feed within its poll "
        "interval.",
    )
    host_actions = host.add_subparsers(dest="action", title="actions", metavar="ACTION")
    host_actions.required = True
    disable = host_actions.add_parser(
        "disable",
        help="Take no new instances on HOST; those running there are untouched.",
        description="Disable HOST: no boot, reschedule or resize picks it from now on (the "
        "disabled-computes request filter and ComputeFilter both skip it); instances "
        "running there are untouched. Disabling a disabled host replaces its reason when "
        "--reason is given and does nothing otherwise. A compute restarting does not "
        "enable it again. An unknown host is an error (exit status 2), nothing changed.",
    )
    disable.add_argument("hostname", metavar="HOST", help="The host (its service's name).")
    disable.add_argument(
        "--reason",
        type=_cli.text(DISABLED_REASON_MAX),
        help=f"Why, kept with the service and shown by scheduler-admin hosts (at most "
        f"{DISABLED_REASON_MAX} characters, on one line).",
    )
    disable.add_argument("--json", action="store_true", help="Print the service state as JSON.")
    enable = host_actions.add_parser(
        "enable",
        help="Let HOST take new instances again (its reason is cleared).",
        description="Enable HOST: it takes new instances again and its disabled reason is "
        "cleared. Enabling an enabled host does nothing. An unknown host is an error (exit "
        "status 2), nothing changed.",
    )
    enable.add_argument("hostname", metavar="HOST", help="The host (its service's name).")
    enable.add_argument("--json", action="store_true", help="Print the service state as JSON.")
    drain = host_actions.add_parser(
        "drain",
        help="Disable HOST, then migrate (or live-migrate) every ACTIVE instance off it.",
        description="Drain HOST: disable it as 'host disable HOST --reason draining' does "
        "(no new boot or move lands there), then move every instance ACTIVE on it to a "
        "host the scheduler picks with the instance's own request spec: by cold migration, "
        "confirmed once RESIZED, or with --live by live migration. Up to --parallel moves "
        "run at once; the drain follows each to its end and prints one line per instance "
        "(moved to which host, or could not move and why), then a summary. Instances in "
        "other states (BUILDING, RESIZING, ...) are skipped with their state; --wait waits "
        "for those under way to settle and moves the ones that end ACTIVE there. The host "
        "stays disabled: 'host enable' puts it back.",
        epilog="exit status: 0 the host ended empty of ACTIVE instances, 1 some instance "
        "could not move or the drain timed out, 2 bad input (an unknown host: nothing "
        "changed).",
    )
    drain.add_argument("hostname", metavar="HOST", help="The host (its service's name).")
    drain.add_argument(
        "--live", action="store_true", help="Live-migrate the instances (default: cold)."
    )
    drain.add_argument(
        "--wait",
        action="store_true",
        help="Also wait for instances under way on HOST (BUILDING, RESIZING, MIGRATING, "
        "...) to settle, and move those that end ACTIVE there (default: skip them).",
    )
    drain.add_argument(
        "--timeout",
        type=_seconds,
        default=600.0,
        metavar="S",
        help="Seconds the whole drain may take (default 600); moves not done by then are "
        "reported as timed out (exit status 1) and left to finish (a cold migration then "
        "waits RESIZED for 'conductor-stub migrate UUID --confirm').",
    )
    drain.add_argument(
        "--parallel",
        type=_positive,
        default=4,
        metavar="N",
        help="Moves in flight at once (default 4).",
    )
    drain.add_argument(
        "--json",
        action="store_true",
        help="Print one JSON object (per-instance list and summary) instead of the lines.",
    )

    audit = subparsers.add_parser(
        "audit",
        help="Compare what the computes report they run with the records and "
        "allocations; --fix repairs.",
        description="Run the conductor's reconciliation once (conductor_stub.reconcile): "
        "the computes' fresh reports of the VMs they run against the instance records "
        "and the allocations. Prints one line per finding (kind, instance or consumer, "
        "host, action, reason) and the counts per kind: stray_vm (runs where no live "
        "record keeps it: reap), lost_record (runs with no record: re-create it), "
        "missing_allocation (heal), orphan_allocation (no one's: release), lost_boot "
        "(a record the boot client saw vanish, kept in ERROR: counted only), lost_vm "
        "(ACTIVE, but its host's fresh report does not show it: ERROR, its claim "
        "released, as [conductor] lost_vm_action says). --fix "
        "compares, waits the grace, compares again and repairs what was found both "
        "times (a healed allocation that overcommits its host says so).",
        epilog="exit status: 0 nothing found (with --fix: nothing left unrepaired), 1 "
        "something found (lost_boot records count until they are deleted), 2 the "
        "command failed.",
    )
    audit.add_argument(
        "--fix",
        action="store_true",
        help="Repair what persists past the grace (reap casts need the broker).",
    )
    audit.add_argument(
        "--grace",
        type=_cli.seconds(0.0, inclusive=True),
        metavar="S",
        help="Seconds a finding must persist before --fix acts on it (default: "
        "[conductor] orphan_grace; 0 acts on the first comparison).",
    )
    audit.add_argument("--json", action="store_true", help="Print the findings as JSON.")


command_opt = cfg.SubCommandOpt(
    "command",
    title="Commands",
    handler=_add_commands,
    help="explain | hosts | usage provider|aggregate|project | instance show | host disable | "
    "host enable | host drain | audit | dashboard",
)


# --- explain ------------------------------------------------------------------------


def build_spec(args: Any, catalog: Mapping[str, Any]) -> RequestSpec:
    """The request spec ``explain`` sends, from the command's arguments."""
    flavor = flavor_with(catalog, args.flavor, args.extra_spec)
    group = None
    if args.group_policy:
        group = ServerGroup.from_primitive(
            {"uuid": args.group_uuid or str(uuidlib.uuid4()), "policy": args.group_policy}
        )
    elif args.group_uuid:
        raise InvalidRequest(reason="--group-uuid needs --group-policy")
    image = Image(properties=dict(args.image_property)) if args.image_property else None
    spec = RequestSpec(
        flavor=flavor,
        project_id=args.project_id,
        user_id=args.user_id,
        num_instances=args.count,
        image=image,
        availability_zone=args.availability_zone,
        is_bfv=args.boot_from_volume,
        group=group,
    )
    return RequestSpec.from_primitive(spec.to_primitive())  # validated as a worker would


def _explain_instance(
    report: ExplainReport, inst: InstanceExplanation, detailed: bool
) -> list[str]:
    where = f"would go to {inst.host}" if inst.placed else "NO VALID HOST"
    lines = [
        f"instance {inst.position + 1} of {report.num_instances}: {where}",
        f"  {inst.summary}",
    ]
    if not detailed:
        return lines
    rows: list[tuple[object, ...]] = [("(all hosts)", inst.hosts, "")]
    left = inst.hosts
    for stage in inst.stages:
        rows.append((stage.stage, stage.survivors, left - stage.survivors or ""))
        left = stage.survivors
    lines += ["", *table(("stage", "hosts left", "removed"), rows, indent="  ")]
    if not inst.top:
        lines += [
            "",
            "  nothing was weighed"
            if inst.placed
            else "  no host passed every stage: nothing was weighed",
        ]
        return lines
    weighers = list(report.weighers) or sorted({w for t in inst.top for w in t.contributions})
    # Only the weighers that moved some top host get a column (w1, w2, ...,
    # named in a legend): with every weigher enabled, a column each ran to
    # ~240 characters. The rest are named in one line.
    moved = [w for w in weighers if any(t.contributions.get(w) for t in inst.top)]
    still = [w for w in weighers if w not in moved]
    labels = {w: f"w{i}" for i, w in enumerate(moved, 1)}
    rows = [
        (
            t.host,
            f"{t.weight:.4f}",
            *(f"{t.contributions[w]:+.4f}" if w in t.contributions else "-" for w in moved),
        )
        for t in inst.top
    ]
    lines += [
        "",
        "  top weighed hosts (weight = the sum of each weigher's contribution):",
        *fit_table(("host", "weight", *labels.values()), rows, fixed=2, indent="  "),
        *(f"  {labels[w]} = {w} x{report.weighers.get(w, 1.0):,.10g}" for w in moved),
    ]
    if still:
        lines += wrap_words(
            "  contributed nothing to these hosts: "
            + ", ".join(f"{w} x{report.weighers.get(w, 1.0):,.10g}" for w in still),
            indent="    ",
        )
    return lines


#: The width the text reports fit in (a terminal's, with a margin).
WIDTH = 100


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fixed: int = 1,
    indent: str = "",
    width: int = WIDTH,
) -> list[str]:
    """:func:`table`, cut into several tables of at most ``width`` characters
    when it is wider: each repeats the first ``fixed`` columns and takes as
    many of the others as fit (at least one)."""
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    base = len(indent) + sum(widths[:fixed]) + 2 * fixed
    chunks: list[list[int]] = [[]]
    used = base
    for i in range(fixed, len(headers)):
        if chunks[-1] and used + widths[i] > width:
            chunks.append([])
            used = base
        chunks[-1].append(i)
        used += widths[i] + 2
    out: list[str] = []
    for n, chunk in enumerate(chunks):
        keep = [*range(fixed), *chunk]
        if n:
            out.append("")
        out += table(
            [headers[i] for i in keep],
            [[row[i] for i in keep] for row in rows],
            indent=indent,
        )
    return out


def wrap_words(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces (a
    longer word keeps its line), the lines after the first indented."""
    lines: list[str] = []
    line = text[: len(text) - len(text.lstrip())]  # the first line's own indent
    fresh = True
    for word in text.split():
        if not fresh and len(line) + 1 + len(word) > width:
            lines.append(line)
            line, fresh = indent, True
        line = f"{line}{'' if fresh else ' '}{word}"
        fresh = False
    return [*lines, line] if not fresh else lines


def format_explain(report: ExplainReport) -> str:
    """The explain report, as an operator reads it."""
    n = report.num_instances
    lines = [
        f"explain {report.request_id}: flavor {report.flavor} x {n} "
        f"({resources_line(report.resources)})",
        "dry run: nothing was claimed",
    ]
    if report.placeable:
        lines.append(f"result: all {n} instance(s) would be placed")
    else:
        failed = report.failed
        position = failed.position + 1 if failed else "?"
        lines.append(
            f"result: NO VALID HOST (instance {position} of {n} found none; "
            "all or nothing, so none would be placed)"
        )
    lines.append(report.summary)
    # In full: the first instance and the one that failed (or the last);
    # the ones between in one line each.
    last = report.failed or (report.instances[-1] if report.instances else None)
    detailed = {report.instances[0].position, last.position} if last else set()
    for inst in report.instances:
        lines += ["", *_explain_instance(report, inst, inst.position in detailed)]
    return "\n".join(lines)


def format_filter_run(run: StageHosts) -> str:
    """One filter run alone, as an operator reads it."""
    head = f"{run.stage} alone on {run.hosts} hosts"
    if run.skipped:
        return f"{head}: the request gives it nothing to check; every host kept"
    lines = [f"{head}: {len(run.removed)} removed, {len(run.survivors)} kept"]
    if run.removed:
        rows = sorted(run.removed.items())
        lines += ["", *table(("removed host", "reason"), rows, indent="  ", left=2)]
    return "\n".join(lines)


def _explain(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    if args.all_hosts and not args.json:
        raise InvalidRequest(reason="--all-hosts needs --json (the summary is the readable form)")
    spec = build_spec(args, load_catalog(conf.conductor.flavors_file))
    uuids = (
        validate_instance_uuids(args.instance_uuid, spec.num_instances)
        if args.instance_uuid
        else None
    )
    started = time.monotonic()
    broker.reach(
        conf,
        min(args.timeout, BROKER_TIMEOUT),
        topic=conf.scheduler.topic,
        what="scheduler worker",
    )
    timeout = max(args.timeout - (time.monotonic() - started), 0.1)
    transport = rpc.get_transport(conf)
    try:
        client = rpc.SchedulerClient(transport, conf.scheduler.topic, timeout=timeout)
        ctxt = rpc.RequestContext.admin(
            user_id="scheduler-admin", project_id=args.project_id, request_id=args.request_id
        )
        try:
            if args.only_filter:
                run = client.run_filter(ctxt, spec, args.only_filter)
            else:
                report = client.explain(ctxt, spec, instance_uuids=uuids, all_hosts=args.all_hosts)
        except oslo_messaging.MessagingTimeout:
            _cli.say(
                "scheduler-admin",
                f"no scheduler worker answered on topic "
                f"{conf.scheduler.topic!r} within {args.timeout:g} s (is one running, at RPC "
                "version 1.1 or later?)",
            )
            return EXIT_ERROR
        except oslo_messaging.UnsupportedVersion as exc:
            _cli.say(
                "scheduler-admin",
                f"the worker that answered does not serve RPC version "
                f"{exc.version}, which --instance-uuid, --all-hosts and --only-filter need",
            )
            return EXIT_ERROR
    finally:
        transport.cleanup()
    if args.only_filter:
        print(json.dumps(run.to_primitive(), indent=2) if args.json else format_filter_run(run))
        return EXIT_PLACEABLE if run.survivors else EXIT_UNPLACEABLE
    print(json.dumps(report.to_primitive(), indent=2) if args.json else format_explain(report))
    return EXIT_PLACEABLE if report.placeable else EXIT_UNPLACEABLE


# --- hosts and usage ----------------------------------------------------------------


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


def _hosts(conf: cfg.ConfigOpts, store: Store) -> int:
    args = conf.command
    hosts = _table(conf, store)
    rows = hosts.order(hosts.select(args.filter), args.sort, reverse=args.reverse)
    lines = json_lines("[", hosts.rows(rows), "]") if args.json else format_hosts(hosts, rows)
    for text in lines:
        print(text)
    return 0


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


def _usage(conf: cfg.ConfigOpts, store: Store) -> int:
    args = conf.command
    if args.action == "provider":
        try:
            provider = store.get_provider(args.provider)
        except NotFound:
            provider = store.get_provider_by_name(args.provider)
        view = usage.provider_usage(provider)
        print(json.dumps(view, indent=2) if args.json else format_provider_usage(view))
        return 0
    if args.action == "aggregate":
        found = usage.HostTable.by_aggregate(_table(conf, store))
        if args.aggregate is not None:
            found["aggregates"] = [
                a for a in found["aggregates"] if args.aggregate in (a["uuid"], a["name"])
            ]
            if not found["aggregates"]:
                raise NotFound(kind="aggregate", ident=args.aggregate)
            del found["no_aggregate"]
        if args.json:
            print(json.dumps(found, indent=2))
            return 0
        groups = [
            {"label": a["name"], "count": a["hosts"], "usage": a["usage"]}
            for a in found["aggregates"]
        ]
        if "no_aggregate" in found and found["no_aggregate"]["hosts"]:
            alone = found["no_aggregate"]
            groups.append({"label": "(none)", "count": alone["hosts"], "usage": alone["usage"]})
        print(format_group_usage("aggregate", groups))
        return 0
    projects = usage.project_usage(store.scan_consumers(), args.project)
    if args.project is not None and not projects["projects"]:
        raise NotFound(kind="project holding allocations", ident=args.project)
    if args.json:
        print(json.dumps(projects, indent=2))
        return 0
    print(
        format_group_usage(
            "project",
            [
                {"label": p["project_id"], "count": p["consumers"], "usage": p["usage"]}
                for p in projects["projects"]
            ],
        )
    )
    return 0


# --- instance show ------------------------------------------------------------------


def _instance_show(conf: cfg.ConfigOpts, store: Store) -> int:
    print(render_instance(store, conf.command.uuid, as_json=conf.command.json))
    return 0


# --- host disable / enable ---------------------------------------------------------


def _host_set(conf: cfg.ConfigOpts, store: Store) -> int:
    """Disable or enable one host's service (flag and status trait in one store step)."""
    args = conf.command
    disable = args.action == "disable"
    before, after = set_host_disabled(store, args.hostname, disable, getattr(args, "reason", None))
    changed = (before.disabled, before.disabled_reason) != (after.disabled, after.disabled_reason)
    if args.json:
        print(
            json.dumps(
                {
                    "host": after.host,
                    "disabled": after.disabled,
                    "disabled_reason": after.disabled_reason,
                    "changed": changed,
                }
            )
        )
        return 0
    state = "disabled" if after.disabled else "enabled"
    why = f" ({after.disabled_reason})" if after.disabled_reason else ""
    print(
        f"host {after.host} {state}{why}" if changed else f"host {after.host} already {state}{why}"
    )
    return 0


# --- the conductor's commands: host drain, audit -------------------------------------

#: The entry point group of the commands another package runs for
#: ``scheduler-admin`` (parsed here with the others): ``host-drain`` and
#: ``audit``, the conductor's (:mod:`conductor_stub.admin`), so that nothing
#: here imports the conductor.
EXTENSIONS_GROUP = "scheduler.admin"

#: A command run through :data:`EXTENSIONS_GROUP`: the configuration (its
#: arguments in ``conf.command``) and the open store in, the exit status out.
Extension = Callable[[cfg.ConfigOpts, Store], int]


class CommandNotInstalled(SchedulerError):
    """No package registers the command ``scheduler-admin`` was asked to run."""

    msg = "%(name)s: no such command installed (entry point group %(group)s)"


def extension(name: str) -> Extension:
    """The command registered as ``name`` in :data:`EXTENSIONS_GROUP`."""
    for ep in importlib.metadata.entry_points(group=EXTENSIONS_GROUP, name=name):
        command: Extension = ep.load()
        return command
    raise CommandNotInstalled(name=name, group=EXTENSIONS_GROUP)


# --- main ---------------------------------------------------------------------------


def run(conf: cfg.ConfigOpts) -> int:
    command = conf.command.name
    if command == "explain":
        return _explain(conf)
    store = make_store(conf)
    try:
        if command == "hosts":
            return _hosts(conf, store)
        if command == "usage":
            return _usage(conf, store)
        if command == "host" and conf.command.action == "drain":
            broker.reach(conf, min(conf.command.timeout, BROKER_TIMEOUT))
            return extension("host-drain")(conf, store)
        if command == "host":
            return _host_set(conf, store)
        if command == "audit":
            if conf.command.fix:
                broker.reach(conf, BROKER_TIMEOUT)
            return extension("audit")(conf, store)
        if command == "dashboard":
            # Imported here: only this command serves a page.
            from scheduler.dashboard import command as dashboard

            return dashboard.serve(conf, store, conf.command, sys.stdout)
        return _instance_show(conf, store)
    finally:
        store.close()


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opt(command_opt)
    conf = _cli.parse(argv, prog="scheduler-admin", description=DESCRIPTION)
    log.setup(process="scheduler-admin", level="WARNING")
    try:
        return run(conf)
    except _cli.ONE_LINE_ERRORS:
        raise
    except SchedulerError as exc:  # Forbidden, InvalidRequest, InstanceNotFound, ...
        _cli.say("scheduler-admin", exc.message)
        return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("scheduler-admin", lambda: _main(argv), argv, failed=EXIT_ERROR)


if __name__ == "__main__":
    sys.exit(main())
