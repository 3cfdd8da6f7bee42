"""``scheduler-admin explain``: why a request would (or would not) find hosts.

It asks a running worker (RPC ``explain``, in an admin context) to run the
pipeline on a request as a dry run: nothing is claimed. The text says how many
hosts each stage left, the hosts removed per reason (``0/1200 hosts
available: 800 insufficient MEMORY_MB, ...``) and the best weighed hosts with
each weigher's contribution. With ``--request-id`` and ``--instance-uuid`` of
a real request its ties fall as that request's did; ``-f json --all-hosts``
prints every stage's hosts by name and the whole weighed list;
``--only-filter NAME`` runs one host filter alone on every host (RPC
``run_filter``) and names the hosts it removes.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

import oslo_messaging
from oslo_config import cfg

from scheduler import broker, rpc
from scheduler.cmd import _cli, _commands
from scheduler.cmd._commands import Command, Result, arg, one_of
from scheduler.exceptions import InvalidRequest
from scheduler.explain import ExplainReport, InstanceExplanation, StageHosts
from scheduler.flavors import flavor_with, load_catalog
from scheduler.objects import (
    GROUP_POLICIES,
    Image,
    RequestSpec,
    ServerGroup,
    validate_instance_uuids,
)
from scheduler.render import resources_line, table
from scheduler.store import make_store

#: Exit status of ``explain``: the request would be placed / would not be.
EXIT_PLACEABLE = 0
EXIT_UNPLACEABLE = 1
#: Exit status of a command that could not do its work (bad arguments, no
#: worker answering).
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
    if report.priority_class is not None:
        lines.append(f"priority class: {report.priority_class}")
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
    if report.preemption is not None:
        lines.append(f"{report.preemption} (not evicted: a dry run)")
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


#: The arguments that describe a request, which --from-instance reads from the record.
_SPEC_ARGUMENTS = ("flavor", "group_policy", "group_uuid", "availability_zone", "instance_uuid")


def recorded_request(
    conf: cfg.ConfigOpts, args: Any
) -> tuple[RequestSpec, Sequence[str] | None, str | None]:
    """``--from-instance``: the request spec an instance's record keeps (a
    PENDING one's, waiting for capacity, say), for that one instance, with
    its uuid and request id, so that its ties fall as its next try's will.

    :raises InvalidRequest: an option that describes the request given too.
    :raises InstanceNotFound: no such record.
    """
    given = [f"--{a.replace('_', '-')}" for a in _SPEC_ARGUMENTS if getattr(args, a)]
    given += ["--count"] if args.count != 1 else []
    if given:
        raise InvalidRequest(
            reason=f"--from-instance reads the request from the record: drop {', '.join(given)}"
        )
    store = make_store(conf)
    try:
        record = store.get_instance(args.from_instance)
    finally:
        store.close()
    if not record.request_spec:
        raise InvalidRequest(reason=f"instance {record.uuid} has no request spec recorded")
    spec = RequestSpec.from_primitive(dict(record.request_spec)).replace(num_instances=1)
    return spec, (record.uuid,), record.request_id


def run(conf: cfg.ConfigOpts) -> Result:
    """``explain``: the dry run (or one filter run alone) a worker answers."""
    args = conf.command
    if args.all_hosts and _commands.fmt_of(args) != _commands.JSON:
        raise InvalidRequest(reason="--all-hosts needs --json (the summary is the readable form)")
    if args.from_instance:
        spec, uuids, request_id = recorded_request(conf, args)
    else:
        if not args.flavor:
            raise InvalidRequest(reason="give --flavor, or --from-instance UUID")
        spec = build_spec(args, load_catalog(conf.conductor.flavors_file))
        uuids = (
            validate_instance_uuids(args.instance_uuid, spec.num_instances)
            if args.instance_uuid
            else None
        )
        request_id = args.request_id
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
            user_id="scheduler-admin", project_id=args.project_id, request_id=request_id
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
        return _commands.Output(
            document=run.to_primitive(),
            table=format_filter_run(run),
            values=((host,) for host in sorted(run.removed)),
            status=EXIT_PLACEABLE if run.survivors else EXIT_UNPLACEABLE,
            indent=2,
        )
    return _commands.Output(
        document=report.to_primitive(),
        table=format_explain(report),
        values=(
            (inst.position + 1, inst.host if inst.placed else None) for inst in report.instances
        ),
        status=EXIT_PLACEABLE if report.placeable else EXIT_UNPLACEABLE,
        indent=2,
    )


COMMAND = Command(
    "explain",
    help="Why would (or wouldn't) a request find hosts? A dry run.",
    description="Ask a scheduler worker to run the pipeline on a request without "
    "claiming anything, and print each stage's surviving hosts, the hosts removed per "
    "reason and the best weighed hosts with each weigher's contribution. Needs a "
    "running worker; sent in an admin context.",
    epilog=_EXPLAIN_EPILOG,
    raw=True,
    run=run,
    values="one line per instance, its position and the host it would go to (- for none); "
    "with --only-filter, each host it removes",
    arguments=(
        arg(
            "--flavor",
            type=_cli.name,
            help="Flavor name from the catalog (m1.* and [conductor] flavors_file); "
            "needed unless --from-instance.",
        ),
        arg(
            "--from-instance",
            metavar="UUID",
            type=_cli.uuid,
            help="Explain the request an instance's record keeps (one PENDING, waiting "
            "for capacity, say: why it finds no host now), with its uuid and request id; "
            "read from the store, so --flavor and the options describing a request are "
            "not given.",
        ),
        arg(
            "--count",
            type=_cli.whole(1),
            default=1,
            help="Instances in the request (all or nothing; default 1).",
        ),
        arg("--availability-zone", metavar="ZONE", type=_cli.name, help="Ask for this zone."),
        arg(
            "--group-policy",
            choices=GROUP_POLICIES,
            help="Put the instances in a server group with this policy.",
        ),
        arg(
            "--group-uuid",
            metavar="UUID",
            type=_cli.uuid,
            help="With --group-policy: an existing group, whose members the "
            "store knows, e.g. the one 'conductor-stub boot --group-policy' printed "
            "(default: a new, empty group).",
        ),
        *_cli.spec_arguments(),
        arg(
            "--boot-from-volume",
            action="store_true",
            help="A volume-backed request: its root disk is not counted.",
        ),
        arg(
            "--project-id",
            default="admin",
            type=_cli.name,
            help="Project the request is made for (tenant isolation; default admin).",
        ),
        arg("--user-id", default="admin", type=_cli.name, help="User the request is made for."),
        arg(
            "--request-id",
            metavar="REQ",
            type=_cli.name,
            help="The request id the dry run draws its ties with (a real request's, to "
            "replay its decision; default: a new one).",
        ),
        arg(
            "--instance-uuid",
            metavar="UUID",
            nargs="+",
            action="extend",
            default=[],
            type=_cli.uuid,
            help="The instances' uuids, as many as --count (repeatable): with --request-id, "
            "a real request's, so ties fall as they did for it (default: made up).",
        ),
        one_of(
            arg(
                "--all-hosts",
                action="store_true",
                help="With --json: every stage's surviving hosts by name, the reason of every "
                "host removed, and the whole weighed list with each weigher's normalised "
                "value, multiplier and contribution. Needs --json (-f json; refused without "
                "it: the summary is the readable form).",
            ),
            arg(
                "--only-filter",
                metavar="FILTER",
                type=_cli.name,
                help="Run this one host filter alone on every host, for the request, and "
                "print the hosts it removes with its reason (no other stage runs; a "
                "registered filter that is not enabled may be tried).",
            ),
        ),
        arg(
            "--timeout",
            type=_cli.seconds(),
            default=30.0,
            metavar="S",
            help="Seconds to wait at most: for the broker, then for a worker's answer "
            "(default 30). A broker that cannot be reached, or a topic no worker consumes, "
            "is said at once (exit status 2).",
        ),
    ),
)
