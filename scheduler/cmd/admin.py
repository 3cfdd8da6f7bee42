"""``scheduler-admin``: answers for operators — why no host, what hosts hold, what
became of an instance.

``scheduler-admin explain --flavor m1.large`` asks a running worker to run the
pipeline on a request as a dry run (:mod:`scheduler.cmd.admin_explain`).

``scheduler-admin hosts [--filter K=V] [--sort KEY]``, ``scheduler-admin usage
provider|aggregate|project`` (:mod:`scheduler.cmd.admin_hosts`) and
``scheduler-admin instance show UUID`` read the store directly
(:mod:`scheduler.usage`): usage against capacity per resource class, up/down,
disabled, failed builds, aggregates and traits per host; the sums per
aggregate and per project; an instance's state, attempts, tried hosts,
re-drives, its user-facing fault and the admin-only fault details (and during
a resize the migration, with the source's allocation parked on it).

``scheduler-admin host disable HOST [--reason R]`` and ``host enable HOST``
take a host out of scheduling and put it back: the service's flag and its
root provider's ``COMPUTE_STATUS_DISABLED`` trait in one atomic store write,
seen by every worker through the change feed; instances running there are
untouched. ``host drain HOST [--live] [--wait]`` disables it the same way,
then moves every instance ACTIVE there to other hosts by cold migration
(confirmed) or live migration, a few at a time, and reports what moved and
what could not.

``scheduler-admin audit [--fix] [--grace S]`` runs the conductor's
reconciliation once: each finding in one line and the counts per kind;
``--fix`` compares again after the grace and repairs what was found both
times. Exit status 1 when something is found.

The drain and the audit are the conductor's: declared here with the other
commands, they run through the entry points of :data:`EXTENSIONS_GROUP`
(:mod:`conductor_stub.admin`), so that nothing here imports the conductor.

``scheduler-admin pending`` and ``scheduler-admin preemptions``
(:mod:`scheduler.cmd.admin_queue`) list the requests waiting for capacity in
the order they are retried, and the last preemptions with their victims.

``scheduler-admin dashboard [--port P]`` serves a live, read-only page of the
cloud to a browser (:mod:`scheduler.dashboard`).

Every command but ``dashboard`` prints its result as ``-f table`` (the
default), ``-f json`` (``--json``) or ``-f value`` (:mod:`scheduler.cmd._commands`).
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from typing import Any

from oslo_config import cfg

from scheduler import broker, log, render
from scheduler import conf as conf_mod
from scheduler.cmd import _cli, _commands, admin_explain, admin_hosts, admin_queue
from scheduler.cmd._commands import Command, Output, Result, arg
from scheduler.exceptions import SchedulerError
from scheduler.store import Store, make_store
from scheduler.store.services import DISABLED_REASON_MAX, set_host_disabled

DESCRIPTION = (
    "Operator answers: why a request finds no host (explain, a dry run), what "
    "the hosts hold (hosts; usage per provider, aggregate, project), what became "
    "of an instance (instance show), who waits for capacity (pending) and whom preemption "
    "evicted (preemptions); take a host out "
    "of scheduling and back (host disable, host enable) or empty it (host drain); "
    "compare what the computes run with the store, and repair (audit [--fix]); watch the "
    "cloud live in a browser (dashboard)."
)

#: Exit status of any command that could not do its work (bad arguments,
#: no worker answering, unknown instance).
EXIT_ERROR = 2
BROKER_TIMEOUT = admin_explain.BROKER_TIMEOUT

_positive = _cli.whole(1)
_seconds = _cli.seconds()
#: A host, known (a service's) or refused: by :func:`set_host_disabled` and the
#: drain, with :func:`scheduler.store.services.known_host`.
_HOST = arg("hostname", metavar="HOST", help="The host (its service's name).")


# --- instance show ------------------------------------------------------------------


def _instance_show(conf: cfg.ConfigOpts, store: Store) -> Output:
    return _commands.instance_output(store, conf.command.uuid)


# --- host disable / enable ---------------------------------------------------------


def _host_set(conf: cfg.ConfigOpts, store: Store) -> Output:
    """Disable or enable one host's service (flag and status trait in one store step)."""
    args = conf.command
    disable = args.action == "disable"
    before, after = set_host_disabled(store, args.hostname, disable, getattr(args, "reason", None))
    changed = (before.disabled, before.disabled_reason) != (after.disabled, after.disabled_reason)
    state = "disabled" if after.disabled else "enabled"
    why = f" ({after.disabled_reason})" if after.disabled_reason else ""
    return Output(
        document={
            "host": after.host,
            "disabled": after.disabled,
            "disabled_reason": after.disabled_reason,
            "changed": changed,
        },
        table=f"host {after.host} {state}{why}"
        if changed
        else f"host {after.host} already {state}{why}",
        values=[(after.host, state)],
    )


# --- the conductor's commands: host drain, audit -------------------------------------

#: The entry point group of the commands another package runs for
#: ``scheduler-admin`` (declared here with the others): ``host-drain`` and
#: ``audit``, the conductor's (:mod:`conductor_stub.admin`), so that nothing
#: here imports the conductor.
EXTENSIONS_GROUP = "scheduler.admin"

#: A command run through :data:`EXTENSIONS_GROUP`: the configuration (its
#: arguments in ``conf.command``) and the open store in, its result out.
Extension = Callable[[cfg.ConfigOpts, Store], Result]


class CommandNotInstalled(SchedulerError):
    """No package registers the command ``scheduler-admin`` was asked to run."""

    msg = "%(name)s: no such command installed (entry point group %(group)s)"


def extension(name: str) -> Extension:
    """The command registered as ``name`` in :data:`EXTENSIONS_GROUP`."""
    for ep in importlib.metadata.entry_points(group=EXTENSIONS_GROUP, name=name):
        command: Extension = ep.load()
        return command
    raise CommandNotInstalled(name=name, group=EXTENSIONS_GROUP)


def _drain(conf: cfg.ConfigOpts, store: Store) -> Result:
    broker.reach(conf, min(conf.command.timeout, BROKER_TIMEOUT))
    return extension("host-drain")(conf, store)


def _audit(conf: cfg.ConfigOpts, store: Store) -> Result:
    if conf.command.fix:
        broker.reach(conf, BROKER_TIMEOUT)
    return extension("audit")(conf, store)


def _refusals(conf: cfg.ConfigOpts, store: Store) -> Output:
    refusals = store.recent_refusals(conf.command.limit)
    return Output(
        document={"refusals": [r.to_primitive() for r in refusals]},
        table=render.format_refusals(refusals),
        values=[
            (render.when(r.at), r.request_id or None, r.action, ",".join(r.instance_uuids))
            for r in refusals
        ],
        indent=2,
    )


def _dashboard(conf: cfg.ConfigOpts, store: Store) -> int:
    # Imported here: only this command serves a page.
    from scheduler.dashboard import command as dashboard

    return dashboard.serve(conf, store, conf.command, sys.stdout)


# --- the commands -------------------------------------------------------------------

DASHBOARD = Command(
    "dashboard",
    help="Serve a live, read-only picture of the cloud to a browser.",
    description="Serve a web page that shows, updated every two seconds: each host's "
    "fill per resource class as a heat map grouped by aggregate, hosts down or "
    "disabled, how many of each catalog flavor still fit, decisions per second, the "
    "reasons of recent NoValidHosts, reschedules and re-drives, how many requests wait for "
    "capacity and the last preemptions. Hosts are read from the "
    "store as `hosts` reads them; rates from the workers' and the conductor's /metrics. "
    "Its data needs a token: $SCHEDULER_DASHBOARD_TOKEN, else a random one; the page's "
    "address, token included, is printed at start. Ctrl-C stops it.",
    run=_dashboard,
    arguments=(
        arg(
            "--listen",
            default="127.0.0.1",
            type=_cli.name,
            help="Address to listen on (default: %(default)s, this machine only).",
        ),
        arg(
            "--port",
            type=_cli.port,
            default=8090,
            help="Port to listen on, 0 to 65535; 0: any free one (default: %(default)s).",
        ),
        arg(
            "--metrics-url",
            action="append",
            type=_cli.http_url,
            metavar="URL",
            help="A /metrics to read rates from, http:// or https:// (repeat for each worker "
            "and the conductor; shown with its password masked); by default those "
            "[scheduler] health_port (one per worker) and [conductor] health_port name on "
            "[scheduler] health_listen.",
        ),
        arg(
            "--refresh",
            type=_seconds,
            default=1.0,
            help="Read the store and the metrics at most once per this many seconds, however "
            "many pages poll (default: %(default)s).",
        ),
    ),
)

INSTANCE = Command(
    "instance",
    help="Look at one instance.",
    description="Look at one instance's record.",
    subcommands=(
        Command(
            "show",
            help="State, host, attempts, tried hosts, fault and its admin details.",
            description="Print an instance's state, host, attempts, tried hosts, the fault "
            "its user sees and the admin-only fault details, and the allocations it holds. "
            "An unknown instance is an error (exit status 2).",
            run=_instance_show,
            values="the instance's uuid, state and host",
            arguments=(arg("uuid", help="The instance uuid."),),
        ),
    ),
)

HOST = Command(
    "host",
    help="Disable, enable or drain one host's compute service.",
    description="Disable or enable one host's compute service, or drain it. The service "
    "flag and the host's COMPUTE_STATUS_DISABLED trait are written in one atomic store "
    "step, so every worker sees it through the store's change feed within its poll "
    "interval.",
    subcommands=(
        Command(
            "disable",
            help="Take no new instances on HOST; those running there are untouched.",
            description="Disable HOST: no boot, reschedule or resize picks it from now on "
            "(the disabled-computes request filter and ComputeFilter both skip it); "
            "instances running there are untouched. Disabling a disabled host replaces its "
            "reason when --reason is given and does nothing otherwise. A compute restarting "
            "does not enable it again. An unknown host is an error (exit status 2), nothing "
            "changed.",
            run=_host_set,
            values="the host and its state (enabled or disabled)",
            arguments=(
                _HOST,
                arg(
                    "--reason",
                    type=_cli.text(DISABLED_REASON_MAX),
                    help=f"Why, kept with the service and shown by scheduler-admin hosts (at "
                    f"most {DISABLED_REASON_MAX} characters, on one line).",
                ),
            ),
        ),
        Command(
            "enable",
            help="Let HOST take new instances again (its reason is cleared).",
            description="Enable HOST: it takes new instances again and its disabled reason "
            "is cleared. Enabling an enabled host does nothing. An unknown host is an error "
            "(exit status 2), nothing changed.",
            run=_host_set,
            values="the host and its state (enabled or disabled)",
            arguments=(_HOST,),
        ),
        Command(
            "drain",
            help="Disable HOST, then migrate (or live-migrate) every ACTIVE instance off it.",
            description="Drain HOST: disable it as 'host disable HOST --reason draining' "
            "does (no new boot or move lands there), then move every instance ACTIVE on it "
            "to a host the scheduler picks with the instance's own request spec: by cold "
            "migration, confirmed once RESIZED, or with --live by live migration. Up to "
            "--parallel moves run at once; the drain follows each to its end and prints one "
            "line per instance (moved to which host, or could not move and why), then a "
            "summary. Instances in other states (BUILDING, RESIZING, ...) are skipped with "
            "their state; --wait waits for those under way to settle and moves the ones that "
            "end ACTIVE there. The host stays disabled: 'host enable' puts it back.",
            epilog="exit status: 0 the host ended empty of ACTIVE instances, 1 some instance "
            "could not move or the drain timed out, 2 bad input (an unknown host: nothing "
            "changed).",
            run=_drain,
            values="one line per instance: its uuid, outcome (moved, failed, skipped, "
            "timed_out), state and host",
            arguments=(
                _HOST,
                arg(
                    "--live",
                    action="store_true",
                    help="Live-migrate the instances (default: cold).",
                ),
                arg(
                    "--wait",
                    action="store_true",
                    help="Also wait for instances under way on HOST (BUILDING, RESIZING, "
                    "MIGRATING, ...) to settle, and move those that end ACTIVE there (default: "
                    "skip them).",
                ),
                arg(
                    "--timeout",
                    type=_seconds,
                    default=600.0,
                    metavar="S",
                    help="Seconds the whole drain may take (default 600); moves not done by "
                    "then are reported as timed out (exit status 1) and left to finish (a cold "
                    "migration then waits RESIZED for 'conductor-stub migrate UUID --confirm').",
                ),
                arg(
                    "--parallel",
                    type=_positive,
                    default=4,
                    metavar="N",
                    help="Moves in flight at once (default 4).",
                ),
            ),
        ),
    ),
)

AUDIT = Command(
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
    run=_audit,
    values="one line per finding: its kind, instance or consumer, host and action",
    arguments=(
        arg(
            "--fix",
            action="store_true",
            help="Repair what persists past the grace (reap casts need the broker).",
        ),
        arg(
            "--grace",
            type=_cli.seconds(0.0, inclusive=True),
            metavar="S",
            help="Seconds a finding must persist before --fix acts on it (default: "
            "[conductor] orphan_grace; 0 acts on the first comparison).",
        ),
    ),
)

REFUSALS = Command(
    "refusals",
    help="The last NoValidHosts: when, request id, instances, hosts removed per reason.",
    description="Print the last NoValidHosts the workers kept in the store (newest "
    "first, at most 200 kept): when (UTC), the request id, the request (run_instance, "
    "select_destinations, resize), its instances and how many hosts each reason "
    "removed: what 'why did the last requests fail?' asks. explain --instance-uuid "
    "replays one of them host by host.",
    run=_refusals,
    values="one line per NoValidHost: its time, request id, action and instance uuids",
    arguments=(admin_queue.NEWEST,),
)

#: Every command of ``scheduler-admin``, in the order --help lists them.
COMMANDS: tuple[Command, ...] = (
    admin_explain.COMMAND,
    admin_hosts.HOSTS,
    admin_hosts.USAGE,
    DASHBOARD,
    INSTANCE,
    HOST,
    REFUSALS,
    admin_queue.PENDING_COMMAND,
    admin_queue.PREEMPTIONS_COMMAND,
    AUDIT,
)


def _add_commands(subparsers: Any) -> None:
    _commands.add_commands(subparsers, COMMANDS)


command_opt = _commands.command_opt(COMMANDS)


# --- main ---------------------------------------------------------------------------


def run(conf: cfg.ConfigOpts) -> int:
    """Run the parsed command and print what it returns, in the format asked
    for; every command but ``explain`` on the store, closed when it ends."""
    fmt = _commands.fmt_of(conf.command)
    if conf.command.name == admin_explain.COMMAND.name:
        return _commands.emit(_commands.call(COMMANDS, conf.command, conf), fmt)
    store = make_store(conf)
    try:
        return _commands.emit(_commands.call(COMMANDS, conf.command, conf, store), fmt)
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
