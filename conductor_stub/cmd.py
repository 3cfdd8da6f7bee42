"""``conductor-stub``: the API + conductor role, cut to what drives the scheduler.

``conductor-stub serve`` owns instance records, receives build and resize
results, re-drives the requests it has not heard back on and reconciles the
store with what the computes report they run (:mod:`conductor_stub.reconcile`;
run it as a daemon next to the workers). ``conductor-stub boot --count N --flavor NAME
[--extra-spec K=V ...] [--image-property K=V ...] [--project P --user U]
[--group-policy POLICY | --group UUID] [--hint same_host=UUID ...] --wait`` boots
instances (the request checked as a worker checks it, before anything is
recorded) and prints their uuids, their server group's and, with ``--wait``,
what became of each. ``conductor-stub
resize UUID --flavor NAME [--confirm|--revert] --wait`` resizes one and
``conductor-stub migrate UUID [--host H --admin] [--confirm|--revert]``
cold-migrates one;
``conductor-stub evacuate UUID... [--host H --admin] [--wait]`` (or
``--from-host H``) rebuilds the instances of a down host elsewhere;
``conductor-stub live-migrate UUID [--host H --admin] [--block-migration]
--wait`` live-migrates one.
``conductor-stub delete UUID... [--wait]`` (or ``--all [--state S]
[--project P]``) deletes instances. ``conductor-stub list [--state S] [--host H]
[--project P]`` lists them, ``conductor-stub shelve UUID...`` /
``unshelve UUID...`` take instances off their hosts and place them again, and
``conductor-stub show UUID [--admin]`` shows one (the renderer is
``scheduler-admin instance show``'s).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from conductor_stub import commands
from scheduler import broker, log
from scheduler import conf as conf_mod
from scheduler.cmd import _cli, _commands, _daemon
from scheduler.cmd._commands import Arg, Command, OneOf, arg, one_of
from scheduler.conf.unread import warn_unread
from scheduler.exceptions import SchedulerError
from scheduler.filters.different_host import HINT as DIFFERENT_HOST
from scheduler.filters.same_host import HINT as SAME_HOST
from scheduler.objects import (
    GROUP_POLICIES,
    MAX_INSTANCES_PER_REQUEST,
    STATES,
)
from scheduler.store.services import known_host

LOG = log.get_logger("conductor_stub")

#: What ``conductor-stub --help`` says it does.
DESCRIPTION = (
    "The API and conductor role, cut to what drives the scheduler: serve the conductor "
    "(a daemon: records, build and move results, re-drives, reconciliation); boot, "
    "resize, migrate, live-migrate, evacuate, delete, shelve and unshelve instances; "
    "list and show them. Each command's --help says what it does; each but serve "
    "prints -f table (default), json or value."
)

_TIMEOUT = _cli.seconds()
_count = _cli.whole(1)
#: What ``-f value`` prints of the commands that show instances.
_UUID_STATE = "one line per instance, its uuid and state"
_UUID_STATE_HOST = "one line per instance, its uuid, state and host"


def _timeout(default: float, what: str = "Seconds --wait waits at most") -> Arg:
    """``--timeout``: positive, finite seconds (:func:`_cli.seconds`)."""
    return arg("--timeout", type=_TIMEOUT, default=default, help=f"{what} (default {default:g}).")


def _finish_options(what: str) -> list[Arg | OneOf]:
    """--confirm / --revert / --wait / --timeout, shared by resize and migrate."""
    return [
        one_of(
            arg(
                "--confirm",
                action="store_true",
                help=f"Once the {what} is RESIZED, confirm: drop the source's allocation.",
            ),
            arg(
                "--revert",
                action="store_true",
                help=f"Once the {what} is RESIZED, revert: back to the source (and the old "
                "flavor).",
            ),
        ),
        arg(
            "--wait",
            action="store_true",
            help=f"Wait until the {what} is RESIZED or has failed (--confirm and "
            "--revert always wait, then wait for the instance to be ACTIVE).",
        ),
        _timeout(300.0, "Seconds to wait at most"),
    ]


def _host(*flags: str, dest: str, help: str) -> Arg:
    """An argument naming a host: a service's, checked by :func:`run`
    (:data:`HOST_ARGUMENTS`, :func:`known_host`) before anything is done."""
    return arg(*flags, dest=dest, metavar="HOST", help=help)


_UUID = arg("uuid", help="The instance.")
_UUIDS = arg("uuids", nargs="*", metavar="UUID", help="The instances.")
_ADMIN = arg("--admin", action="store_true", help="Send the request in an admin context.")


def _shelving(name: str, what: str) -> Command:
    return Command(
        name,
        help=what.split(":")[0] + ".",
        description=what + " If any uuid is unknown or in the wrong state, nothing is "
        "done and the exit status is 2.",
        run=commands.shelve,
        values=_UUID_STATE_HOST,
        arguments=(
            arg("uuids", nargs="+", metavar="UUID", help="The instances."),
            arg(
                "--wait",
                action="store_true",
                help="Wait until every instance is SHELVED_OFFLOADED (shelve) or ACTIVE or "
                "ERROR (unshelve).",
            ),
            _timeout(120.0),
        ),
    )


#: Every command of ``conductor-stub``, in the order --help lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        help="Serve the conductor topic (a daemon).",
        description="Run the conductor: own the instance records, take build and resize "
        "results, re-drive the requests not heard back on and reconcile the store with "
        "what the computes report they run, until SIGTERM or Ctrl-C.",
        run=commands.serve,
    ),
    Command(
        "boot",
        help="Boot instances and report their fate.",
        description="Boot instances: the request is checked as a worker checks it before "
        "anything is recorded, then sent; prints the instances' uuids and their server "
        "group's and, with --wait, what became of each.",
        run=commands.boot,
        values="one line per instance, its uuid (with --wait, and its state)",
        arguments=(
            arg("--count", type=_count, default=1, help="How many instances (default 1)."),
            arg(
                "--flavor",
                default="m1.small",
                type=_cli.name,
                help="Flavor name from the catalog (default m1.small).",
            ),
            arg(
                "--mode",
                choices=["run_instance", "select_destinations"],
                default="run_instance",
                help="run_instance: the scheduler casts the builds; select_destinations: "
                "ask for destinations, then cast builds from here (Nova's modern flow).",
            ),
            arg(
                "--per-request",
                type=_count,
                default=1,
                help="Instances per scheduling request (all-or-nothing inside one; at most "
                f"{MAX_INSTANCES_PER_REQUEST}, the scheduler's limit: more is refused before "
                "anything is recorded).",
            ),
            one_of(
                arg(
                    "--group-policy",
                    choices=GROUP_POLICIES,
                    help="Put all instances in one new server group with this policy (its "
                    "uuid is printed: give it to --group later, or to scheduler-admin "
                    "explain --group-uuid).",
                ),
                arg(
                    "--group",
                    metavar="UUID",
                    help="Put the instances in this existing server group (one an earlier "
                    "boot printed); its policy is read from its members' records.",
                ),
            ),
            arg("--availability-zone", type=_cli.name, help="Boot into this zone."),
            *_cli.spec_arguments(),
            arg(
                "--image-id",
                metavar="ID",
                type=_cli.name,
                help="The image's id (isolated images).",
            ),
            arg(
                "--project",
                default="demo",
                type=_cli.name,
                help="Project the instances belong to (default demo).",
            ),
            arg(
                "--user",
                default="demo",
                type=_cli.name,
                help="User who boots them (default demo).",
            ),
            arg(
                "--hint",
                metavar="KEY=UUID",
                type=_cli.key_value,
                nargs="+",
                action="extend",
                default=[],
                help=f"A scheduler hint (repeatable): {SAME_HOST}=UUID (only hosts running "
                f"that instance) or {DIFFERENT_HOST}=UUID (none of them). They act only with "
                "SameHostFilter / DifferentHostFilter in [filter_scheduler] enabled_filters.",
            ),
            one_of(
                arg(
                    "--wait-for-capacity",
                    dest="wait_for_capacity",
                    action="store_const",
                    const=True,
                    default=None,
                    help="When no host fits, wait PENDING for capacity (up to [priority] "
                    "max_wait seconds, retried when capacity may have come back) instead of "
                    "failing. Default: as the request's priority class says (its wait flag).",
                ),
                arg(
                    "--no-wait-for-capacity",
                    dest="wait_for_capacity",
                    action="store_const",
                    const=False,
                    help="Fail at once when no host fits, whatever the priority class says.",
                ),
            ),
            arg(
                "--wait",
                action="store_true",
                help="Wait until every instance is ACTIVE or ERROR; a record that vanished "
                "from the store with nothing running it is reported lost (and kept in "
                "ERROR). Exit status 1 when any instance did not end ACTIVE (how many, and "
                "their states, on stderr).",
            ),
            _timeout(300.0),
        ),
        epilog="JSON: {instances: [uuid...], group_uuid}; with --wait, {summary "
        "(group_uuid and group_policy included), instances: [{uuid, state, host, "
        "availability_zone, attempts, redrives, fault}]}.",
    ),
    Command(
        "resize",
        help="Resize an ACTIVE instance; or confirm / revert a RESIZED one.",
        description="Resize an ACTIVE instance to another flavor: the scheduler picks a "
        "host for it (its own, when it fits there), and it is RESIZED there until "
        "confirmed or reverted; or confirm / revert one already RESIZED.",
        run=commands.resize,
        values=_UUID_STATE_HOST,
        arguments=(
            _UUID,
            arg(
                "--flavor",
                type=_cli.name,
                help="Flavor name from the catalog to resize to (not "
                "needed to confirm or revert an instance already RESIZED).",
            ),
            *_finish_options("resize"),
        ),
    ),
    Command(
        "migrate",
        help="Cold-migrate an ACTIVE instance to another host (a resize to its own "
        "flavor); or confirm / revert a RESIZED one.",
        description="Cold-migrate an ACTIVE instance: the scheduler picks another host "
        "for its own flavor and request spec (group, zone, traits, hints), with "
        "alternates; the instance is RESIZED there until confirmed (the source's "
        "allocation dropped) or reverted (back to the source). --host names the "
        "destination, which needs --admin and still passes the filters and the claim.",
        run=commands.migrate,
        values=_UUID_STATE_HOST,
        arguments=(
            _UUID,
            _host(
                "--host",
                dest="destination",
                help="The destination host (needs --admin; not the host it runs on).",
            ),
            arg("--admin", action="store_true", help="Send the request with an admin context."),
            # With --confirm / --revert, an instance already RESIZED is only confirmed
            # or reverted; an ACTIVE one is migrated first.
            *_finish_options("migration"),
        ),
    ),
    Command(
        "live-migrate",
        help="Live-migrate an ACTIVE instance to a host the scheduler chooses (or, "
        "with --admin, one named with --host); pre-checks on both hosts, the next "
        "alternate on a failure, back ACTIVE on the source when none is left.",
        description="Live-migrate an ACTIVE instance: the scheduler chooses the "
        "destination with the instance's own flavor and request spec (group, zone, "
        "traits, hints), never its source; a host named with --host (admin only) "
        "still passes capacity, the filters and the atomic claim. The destination "
        "and then the source run pre-checks; a failure tries the next alternate, "
        "and when none is left the instance stays ACTIVE on its source with a "
        "fault. Exit status 2 for an unknown uuid, an instance not ACTIVE, --host "
        "without --admin or --host naming the source (nothing changed); 1 if "
        "--wait timed out or the migration failed.",
        run=commands.live_migrate,
        values=_UUID_STATE_HOST,
        arguments=(
            _UUID,
            _host(
                "--host",
                dest="dest_host",
                help="The destination (needs --admin); it is still checked and claimed.",
            ),
            arg(
                "--admin",
                action="store_true",
                help="Ask with an admin context (needed for --host).",
            ),
            arg(
                "--block-migration",
                action="store_true",
                help="Copy the disk too (no shared storage); passed to the computes' pre-checks.",
            ),
            arg(
                "--wait",
                action="store_true",
                help="Wait until the instance is ACTIVE again, on the destination or "
                "(failed) on its source.",
            ),
            _timeout(300.0),
        ),
    ),
    Command(
        "evacuate",
        help="Rebuild instances of a down compute host on other hosts (refused while "
        "its compute is up).",
        description="Rebuild ACTIVE instances of a host whose compute is down "
        "(no heartbeat within [scheduler] service_down_time) on hosts the scheduler "
        "chooses with each instance's own request spec (its group, zone, traits): "
        "the source's allocation is released once the rebuild succeeds. If no host "
        "can take one, it stays ACTIVE on the down host with a fault. Refused, "
        "nothing changed, exit status 2: an unknown uuid or host, an instance not "
        "ACTIVE, a compute that is up, --host without --admin, --host naming the source.",
        run=commands.evacuate,
        values=_UUID_STATE_HOST,
        arguments=(
            _UUIDS,
            _host(
                "--from-host",
                dest="from_host",
                help="Every ACTIVE instance of HOST (instead of uuids).",
            ),
            _host(
                "--host",
                dest="to_host",
                help="Rebuild on HOST (it still passes every filter and the claim); needs "
                "--admin.",
            ),
            _ADMIN,
            arg("--wait", action="store_true", help="Wait until no instance is REBUILDING."),
            _timeout(120.0),
        ),
    ),
    Command(
        "delete",
        help="Delete instances: each host that may run one destroys its VM (a "
        "build or resize in flight is cancelled), its claims are released and "
        "it goes DELETED; the record is kept [conductor] deleted_retention "
        "seconds. Deleting a deleted instance does nothing; an unknown uuid is "
        "an error and nothing is deleted.",
        description="Delete instances: each host that may run one destroys its VM "
        "(a build or resize in flight is cancelled), its allocations are released "
        "(server-group membership with them) and it goes DELETED. The record is "
        "kept [conductor] deleted_retention seconds, then the store removes it. "
        "Deleting a DELETING or DELETED instance does nothing; if any uuid is "
        "unknown, nothing is deleted and the exit status is 2.",
        run=commands.delete,
        values=_UUID_STATE,
        arguments=(
            _UUIDS,
            arg(
                "--all",
                action="store_true",
                help="Every live instance (for test clean-up), narrowed by --state and --project.",
            ),
            arg(
                "--state",
                action="append",
                default=[],
                type=_cli.name,
                help="With --all: only instances in this state (repeatable; e.g. ERROR).",
            ),
            arg("--project", type=_cli.name, help="With --all: only this project's instances."),
            arg("--wait", action="store_true", help="Wait until every instance is DELETED."),
            _timeout(120.0),
        ),
    ),
    _shelving(
        "shelve",
        "Shelve ACTIVE instances: each one's host destroys its VM, its allocation "
        "(server-group membership with it) is released and it is SHELVED_OFFLOADED, "
        "on no host.",
    ),
    _shelving(
        "unshelve",
        "Unshelve SHELVED_OFFLOADED instances: each is scheduled again as a boot, with "
        "its original request spec (flavor, zone, server group, traits, hints), and is "
        "ACTIVE where it is built (ERROR if it cannot be placed).",
    ),
    Command(
        "list",
        help="List instances: uuid, state, task state, host, zone, flavor, priority "
        "class, project, last change and fault.",
        description="List the live instance records (DELETED ones are not listed), "
        "narrowed by --state, --host and --project (all of those given must match), "
        "ordered by --sort. Each row's fault is the one its user sees, cut to 40 "
        "characters (show prints it whole; scheduler-admin refusals says why no host "
        "took a request).",
        run=commands.list_instances,
        values=_UUID_STATE_HOST,
        arguments=(
            arg(
                "--state",
                action="append",
                default=[],
                type=_commands.choice(STATES),
                help=f"Only this state (repeatable; one of {', '.join(STATES)}).",
            ),
            _host("--host", dest="on_host", help="Only those on HOST."),
            arg("--project", type=_cli.name, help="Only this project's instances."),
            arg(
                "--sort",
                choices=tuple(commands.SORTS),
                default="uuid",
                help="Order the rows by uuid (the default), state, host, or by when each "
                "record was created or last changed (newest first): '--sort updated "
                "--state ERROR' lists the latest failures first.",
            ),
        ),
    ),
    Command(
        "show",
        help="One instance: state, task state, host, zone, flavor, priority class, "
        "request id, attempts, resize in flight, fault (--admin: the admin details too).",
        description="Print one instance's record as its user sees it: state, task state, "
        "host, zone, flavor, priority class (with its priority and whether it is "
        "preemptible, as when it was scheduled), request id, attempts, the resize in "
        "flight and the fault. "
        "With --admin (an admin's view): node, tried hosts, allocations, re-drives and "
        "the admin-only fault details too. An unknown uuid is an error (exit status 2).",
        run=commands.show,
        values="the instance's uuid, state and host",
        arguments=(
            arg("uuid", help="The instance uuid."),
            arg("--admin", action="store_true", help="Show the admin details (an admin's view)."),
        ),
    ),
)


def _add_commands(subparsers: Any) -> None:
    _commands.add_commands(subparsers, COMMANDS)


command_opt = _commands.command_opt(COMMANDS)


BROKER_COMMANDS = frozenset(
    {"boot", "resize", "migrate", "live-migrate", "evacuate", "delete", "shelve", "unshelve"}
)
#: Seconds a command waits at most for the broker to answer (less if its --timeout is).
BROKER_TIMEOUT = 10.0


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opt(command_opt)
    conf = _cli.parse(argv, prog="conductor-stub", description=DESCRIPTION)
    log.setup(
        process=f"conductor-stub.{conf.command.name}",
        level="INFO" if conf.command.name == "serve" else "WARNING",
    )
    if conf.command.name != "serve":
        return run(conf)
    warn_unread(conf)
    # Stopped, its transports and store closed: the process ends now.
    _daemon.exit_now(run(conf))


#: The arguments that name a host (``dest`` of each): checked by :func:`run`.
HOST_ARGUMENTS = ("from_host", "to_host", "destination", "dest_host", "on_host")


def run(conf: cfg.ConfigOpts) -> int:
    """Run the parsed command; a refusal (:class:`SchedulerError`) is one
    line and exit status 2. Each host it was given must be a service's
    (:func:`known_host`), before the broker is asked or anything is done. The
    store and the transports it opened are closed when it ends, however it
    ends (:func:`_cli.closing`; the commands open them with
    :func:`commands.open_store` and :func:`commands.open_transport`)."""
    args = conf.command
    try:
        with _cli.closing():
            hosts = [getattr(args, dest, None) for dest in HOST_ARGUMENTS]
            for hostname in filter(None, hosts):
                known_host(commands.open_store(conf), hostname)
            if args.name in BROKER_COMMANDS:
                broker.reach(conf, min(args.timeout, BROKER_TIMEOUT))
            return _commands.emit(_commands.call(COMMANDS, args, conf), _commands.fmt_of(args))
    except _cli.ONE_LINE_ERRORS:
        raise
    except SchedulerError as exc:
        _cli.say("conductor-stub", exc.message)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("conductor-stub", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
