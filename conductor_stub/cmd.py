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

import argparse
import sys
from collections.abc import Callable, Sequence

from oslo_config import cfg

from conductor_stub import commands
from scheduler import broker, log
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.cmd._cli import add_spec_options, key_value
from scheduler.exceptions import SchedulerError
from scheduler.filters.different_host import HINT as DIFFERENT_HOST
from scheduler.filters.same_host import HINT as SAME_HOST
from scheduler.objects import (
    GROUP_POLICIES,
    MAX_INSTANCES_PER_REQUEST,
)
from scheduler.store.services import known_host

LOG = log.get_logger("conductor_stub")

_TIMEOUT = _cli.seconds()


def _add_commands(subparsers) -> None:  # type: ignore[no-untyped-def]
    subparsers.add_parser("serve", help="Serve the conductor topic (a daemon).")
    boot = subparsers.add_parser("boot", help="Boot instances and report their fate.")
    boot.add_argument("--count", type=int, default=1, help="How many instances (default 1).")
    boot.add_argument(
        "--flavor", default="m1.small", help="Flavor name from the catalog (default m1.small)."
    )
    boot.add_argument(
        "--mode",
        choices=["run_instance", "select_destinations"],
        default="run_instance",
        help="run_instance: the scheduler casts the builds; select_destinations: "
        "ask for destinations, then cast builds from here (Nova's modern flow).",
    )
    boot.add_argument(
        "--per-request",
        type=int,
        default=1,
        help="Instances per scheduling request (all-or-nothing inside one; at most "
        f"{MAX_INSTANCES_PER_REQUEST}, the scheduler's limit: more is refused before "
        "anything is recorded).",
    )
    grouping = boot.add_mutually_exclusive_group()
    grouping.add_argument(
        "--group-policy",
        choices=GROUP_POLICIES,
        help="Put all instances in one new server group with this policy (its uuid is "
        "printed: give it to --group later, or to scheduler-admin explain --group-uuid).",
    )
    grouping.add_argument(
        "--group",
        metavar="UUID",
        help="Put the instances in this existing server group (one an earlier boot "
        "printed); its policy is read from its members' records.",
    )
    boot.add_argument("--availability-zone", help="Boot into this zone.")
    add_spec_options(boot)
    boot.add_argument("--image-id", metavar="ID", help="The image's id (isolated images).")
    boot.add_argument(
        "--project", default="demo", help="Project the instances belong to (default demo)."
    )
    boot.add_argument("--user", default="demo", help="User who boots them (default demo).")
    boot.add_argument(
        "--hint",
        metavar="KEY=UUID",
        type=key_value,
        nargs="+",
        action="extend",
        default=[],
        help=f"A scheduler hint (repeatable): {SAME_HOST}=UUID (only hosts running that "
        f"instance) or {DIFFERENT_HOST}=UUID (none of them). They act only with "
        "SameHostFilter / DifferentHostFilter in [filter_scheduler] enabled_filters.",
    )
    boot.add_argument(
        "--wait",
        action="store_true",
        help="Wait until every instance is ACTIVE or ERROR; a record that vanished "
        "from the store with nothing running it is reported lost (and kept in ERROR). "
        "Exit status 1 when any instance did not end ACTIVE (how many, and their "
        "states, on stderr).",
    )
    _add_timeout(boot, 300.0)
    boot.add_argument(
        "--json",
        action="store_true",
        help="Print one JSON object: {instances: [uuid...], group_uuid}; with --wait, "
        "{summary (group_uuid and group_policy included), instances: [{uuid, state, host, "
        "availability_zone, attempts, redrives, fault}]}.",
    )

    resize = subparsers.add_parser(
        "resize", help="Resize an ACTIVE instance; or confirm / revert a RESIZED one."
    )
    resize.add_argument("uuid", help="The instance.")
    resize.add_argument(
        "--flavor",
        help="Flavor name from the catalog to resize to (not "
        "needed to confirm or revert an instance already RESIZED).",
    )
    _add_finish_options(resize, "resize")

    migrate = subparsers.add_parser(
        "migrate",
        help="Cold-migrate an ACTIVE instance to another host (a resize to its own "
        "flavor); or confirm / revert a RESIZED one.",
        description="Cold-migrate an ACTIVE instance: the scheduler picks another host "
        "for its own flavor and request spec (group, zone, traits, hints), with "
        "alternates; the instance is RESIZED there until confirmed (the source's "
        "allocation dropped) or reverted (back to the source). --host names the "
        "destination, which needs --admin and still passes the filters and the claim.",
    )
    migrate.add_argument("uuid", help="The instance.")
    migrate.add_argument(
        "--host",
        dest="destination",
        metavar="HOST",
        help="The destination host (needs --admin; not the host it runs on).",
    )
    migrate.add_argument(
        "--admin", action="store_true", help="Send the request with an admin context."
    )
    # With --confirm / --revert, an instance already RESIZED is only confirmed
    # or reverted; an ACTIVE one is migrated first.
    _add_finish_options(migrate, "migration")

    delete = subparsers.add_parser(
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
    )
    delete.add_argument("uuids", nargs="*", metavar="UUID", help="The instances.")
    delete.add_argument(
        "--all",
        action="store_true",
        help="Every live instance (for test clean-up), narrowed by --state and --project.",
    )
    delete.add_argument(
        "--state",
        action="append",
        default=[],
        help="With --all: only instances in this state (repeatable; e.g. ERROR).",
    )
    delete.add_argument("--project", help="With --all: only this project's instances.")
    delete.add_argument(
        "--wait", action="store_true", help="Wait until every instance is DELETED."
    )
    _add_timeout(delete, 120.0)
    delete.add_argument("--json", action="store_true", help="Print the instances as JSON.")

    live = subparsers.add_parser(
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
    )
    live.add_argument("uuid", help="The instance.")
    live.add_argument(
        "--host",
        dest="dest_host",
        metavar="HOST",
        help="The destination (needs --admin); it is still checked and claimed.",
    )
    live.add_argument(
        "--admin", action="store_true", help="Ask with an admin context (needed for --host)."
    )
    live.add_argument(
        "--block-migration",
        action="store_true",
        help="Copy the disk too (no shared storage); passed to the computes' pre-checks.",
    )
    live.add_argument(
        "--wait",
        action="store_true",
        help="Wait until the instance is ACTIVE again, on the destination or (failed) "
        "on its source.",
    )
    _add_timeout(live, 300.0)
    live.add_argument("--json", action="store_true", help="Print the instance as JSON.")

    evacuate = subparsers.add_parser(
        "evacuate",
        help="Rebuild instances of a down compute host on other hosts (refused while "
        "its compute is up).",
        description="Rebuild ACTIVE instances of a host whose compute is down "
        "(no heartbeat within [scheduler] service_down_time) on hosts the scheduler "
        "chooses with each instance's own request spec (its group, zone, traits): "
        "the source's allocation is released once the rebuild succeeds. If no host "
        "can take one, it stays ACTIVE on the down host with a fault. Refused, "
        "nothing changed, exit status 2: an unknown uuid, an instance not ACTIVE, a "
        "compute that is up, --host without --admin, --host naming the source.",
    )
    evacuate.add_argument("uuids", nargs="*", metavar="UUID", help="The instances.")
    evacuate.add_argument(
        "--from-host",
        metavar="HOST",
        help="Every ACTIVE instance of HOST (instead of uuids).",
    )
    evacuate.add_argument(
        "--host",
        dest="to_host",
        metavar="HOST",
        help="Rebuild on HOST (it still passes every filter and the claim); needs --admin.",
    )
    evacuate.add_argument(
        "--admin", action="store_true", help="Send the request in an admin context."
    )
    evacuate.add_argument(
        "--wait", action="store_true", help="Wait until no instance is REBUILDING."
    )
    _add_timeout(evacuate, 120.0)
    evacuate.add_argument("--json", action="store_true", help="Print the instances as JSON.")

    for name, what in (
        (
            "shelve",
            "Shelve ACTIVE instances: each one's host destroys its VM, its allocation "
            "(server-group membership with it) is released and it is SHELVED_OFFLOADED, "
            "on no host.",
        ),
        (
            "unshelve",
            "Unshelve SHELVED_OFFLOADED instances: each is scheduled again as a boot, with "
            "its original request spec (flavor, zone, server group, traits, hints), and is "
            "ACTIVE where it is built (ERROR if it cannot be placed).",
        ),
    ):
        shelving = subparsers.add_parser(
            name,
            help=what.split(":")[0] + ".",
            description=what + " If any uuid is unknown or in the wrong state, nothing is "
            "done and the exit status is 2.",
        )
        shelving.add_argument("uuids", nargs="+", metavar="UUID", help="The instances.")
        shelving.add_argument(
            "--wait",
            action="store_true",
            help="Wait until every instance is SHELVED_OFFLOADED (shelve) or ACTIVE or "
            "ERROR (unshelve).",
        )
        _add_timeout(shelving, 120.0)
        shelving.add_argument("--json", action="store_true", help="Print the instances as JSON.")

    listing = subparsers.add_parser(
        "list",
        help="List instances: uuid, state, task state, host, zone, flavor, project.",
        description="List the live instance records (DELETED ones are not listed), "
        "narrowed by --state, --host and --project (all of those given must match).",
    )
    listing.add_argument(
        "--state", action="append", default=[], help="Only this state (repeatable; e.g. ERROR)."
    )
    listing.add_argument("--host", dest="on_host", metavar="HOST", help="Only those on HOST.")
    listing.add_argument("--project", help="Only this project's instances.")
    listing.add_argument("--json", action="store_true", help="Print the instances as JSON.")

    show = subparsers.add_parser(
        "show",
        help="One instance: state, task state, host, zone, flavor, request id, attempts, "
        "resize in flight, fault (--admin: the admin details too).",
        description="Print one instance's record as its user sees it: state, task state, "
        "host, zone, flavor, request id, attempts, the resize in flight and the fault. "
        "With --admin (an admin's view): node, tried hosts, allocations, re-drives and the "
        "admin-only fault details too. An unknown uuid is an error (exit status 2).",
    )
    show.add_argument("uuid", help="The instance uuid.")
    show.add_argument(
        "--admin", action="store_true", help="Show the admin details (an admin's view)."
    )
    show.add_argument("--json", action="store_true", help="Print the record as JSON.")


def _add_timeout(
    parser: argparse.ArgumentParser, default: float, what: str = "Seconds --wait waits at most"
) -> None:
    """``--timeout``: positive, finite seconds (:func:`_cli.seconds`)."""
    parser.add_argument(
        "--timeout", type=_TIMEOUT, default=default, help=f"{what} (default {default:g})."
    )


def _add_finish_options(parser, what: str) -> None:  # type: ignore[no-untyped-def]
    """--confirm / --revert / --wait / --timeout / --json, shared by resize and migrate."""
    finish = parser.add_mutually_exclusive_group()
    finish.add_argument(
        "--confirm",
        action="store_true",
        help=f"Once the {what} is RESIZED, confirm: drop the source's allocation.",
    )
    finish.add_argument(
        "--revert",
        action="store_true",
        help=f"Once the {what} is RESIZED, revert: back to the source (and the old flavor).",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help=f"Wait until the {what} is RESIZED or has failed (--confirm and "
        "--revert always wait, then wait for the instance to be ACTIVE).",
    )
    _add_timeout(parser, 300.0, "Seconds to wait at most")
    parser.add_argument("--json", action="store_true", help="Print the instance as JSON.")


command_opt = cfg.SubCommandOpt(
    "command",
    title="Commands",
    handler=_add_commands,
    help="serve | boot | resize | migrate | live-migrate | evacuate | delete | shelve | "
    "unshelve | list | show",
)


BROKER_COMMANDS = frozenset(
    {"boot", "resize", "migrate", "live-migrate", "evacuate", "delete", "shelve", "unshelve"}
)
#: Seconds a command waits at most for the broker to answer (less if its --timeout is).
BROKER_TIMEOUT = 10.0


#: What runs each command.
COMMANDS: dict[str, Callable[[cfg.ConfigOpts], int]] = {
    "serve": commands.serve,
    "boot": commands.boot,
    "resize": commands.resize,
    "migrate": commands.migrate,
    "live-migrate": commands.live_migrate,
    "evacuate": commands.evacuate,
    "delete": commands.delete,
    "shelve": commands.shelve,
    "unshelve": commands.shelve,
    "list": commands.list_instances,
    "show": commands.show,
}


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opt(command_opt)
    conf = _cli.parse(argv, prog="conductor-stub", description=__doc__.split("\n")[0])
    log.setup(
        process=f"conductor-stub.{conf.command.name}",
        level="INFO" if conf.command.name == "serve" else "WARNING",
    )
    return run(conf)


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
            return COMMANDS[args.name](conf)
    except _cli.ONE_LINE_ERRORS:
        raise
    except SchedulerError as exc:
        _cli.say("conductor-stub", exc.message)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("conductor-stub", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
