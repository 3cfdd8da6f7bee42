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

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import oslo_messaging
from oslo_config import cfg

from conductor_stub.flavors import load_catalog
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.reconcile import Reconciler, ReconcileSettings
from conductor_stub.records import ConductorSettings, server_group
from conductor_stub.redrive import Sweeper
from conductor_stub.report import format_booted, format_report
from conductor_stub.tasks.base import wait_until
from conductor_stub.tasks.build import Booter, BootReport, boot_spec
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import Evacuator, compute_is_up
from conductor_stub.tasks.evacuate import summary as evacuate_summary
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.live_migrate import summary as live_summary
from conductor_stub.tasks.resize import Resizer, finished, settled, summary
from conductor_stub.tasks.shelve import Shelver
from scheduler import broker, health, log, rpc, steps
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.cmd._daemon import wait_for_signal
from scheduler.cmd.admin import (
    add_spec_options,
    flavor_name,
    flavor_with,
    key_value,
    render_instance,
    table,
)
from scheduler.exceptions import InvalidRequest, SchedulerError
from scheduler.filters.different_host import HINT as DIFFERENT_HOST
from scheduler.filters.same_host import HINT as SAME_HOST
from scheduler.objects import (
    ACTIVE,
    FINAL_STATES,
    GROUP_POLICIES,
    MAX_INSTANCES_PER_REQUEST,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    Image,
    InstanceRecord,
    validate_uuid,
)
from scheduler.service import ServiceResolver, make_store

LOG = log.get_logger("conductor_stub")


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
    boot.add_argument(
        "--timeout", type=float, default=300.0, help="Seconds --wait waits at most (default 300)."
    )
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
    delete.add_argument(
        "--timeout", type=float, default=120.0, help="Seconds --wait waits at most (default 120)."
    )
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
    live.add_argument(
        "--timeout", type=float, default=300.0, help="Seconds --wait waits at most (default 300)."
    )
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
    evacuate.add_argument(
        "--timeout", type=float, default=120.0, help="Seconds --wait waits at most (default 120)."
    )
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
        shelving.add_argument(
            "--timeout",
            type=float,
            default=120.0,
            help="Seconds --wait waits at most (default 120).",
        )
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
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="Seconds to wait at most (default 300)."
    )
    parser.add_argument("--json", action="store_true", help="Print the instance as JSON.")


command_opt = cfg.SubCommandOpt(
    "command",
    title="Commands",
    handler=_add_commands,
    help="serve | boot | resize | migrate | live-migrate | evacuate | delete | shelve | "
    "unshelve | list | show",
)


def conductor_settings(conf: cfg.ConfigOpts) -> ConductorSettings:
    c = conf.conductor
    return ConductorSettings(
        build_timeout=float(c.build_timeout),
        resize_timeout=float(c.resize_timeout),
        live_migration_timeout=float(c.live_migration_timeout),
        delete_timeout=float(c.delete_timeout),
        deleted_retention=float(c.deleted_retention),
        max_redrives=c.max_redrives,
        sweep_interval=c.sweep_interval,
        return_alternates=c.return_alternates,
        max_attempts=conf.scheduler.max_attempts,
        allow_resize_to_same_host=conf.scheduler.allow_resize_to_same_host,
    )


def reconcile_settings(conf: cfg.ConfigOpts) -> ReconcileSettings:
    c = conf.conductor
    return ReconcileSettings(
        interval=float(c.reconcile_interval),
        orphan_grace=float(c.orphan_grace),
        report_max_age=float(c.report_max_age),
    )


def _health(conf: cfg.ConfigOpts, store: Any) -> Any:
    """The conductor's /healthz (broker, store) and /metrics (the reconciler's
    actions per kind), as a worker serves its own."""
    monitor = health.HealthMonitor(
        {
            "broker": health.broker_probe(oslo_messaging.TransportURL.parse(conf)),
            "store": store.ping,
        }
    )
    monitor.start()
    return health.serve(monitor, conf.scheduler.health_listen, conf.conductor.health_port)


def _serve(conf: cfg.ConfigOpts) -> int:
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    settings = conductor_settings(conf)
    compute = rpc.ComputeClient(transport, ServiceResolver(store), conf.compute.topic)
    scheduler = rpc.SchedulerClient(transport, conf.scheduler.topic)
    endpoint = ConductorEndpoint(store, compute, scheduler, settings)
    server = rpc.get_server(
        transport, conf.conductor.topic, conf.host, [endpoint], access_policy=steps.ACCESS_POLICY
    )
    sweeper = Sweeper(store, scheduler, Resizer(store, scheduler, compute, settings), settings)
    stop = threading.Event()
    sweeping = threading.Thread(target=sweeper.run, args=(stop,), name="sweeper", daemon=True)
    reconciler = Reconciler(store, compute, reconcile_settings(conf))
    reconciling = threading.Thread(
        target=reconciler.run, args=(stop,), name="reconciler", daemon=True
    )
    endpoint_http = _health(conf, store) if conf.conductor.health_port else None
    server.start()
    sweeping.start()
    reconciling.start()
    LOG.info(
        "conductor_started",
        build_timeout=settings.build_timeout,
        max_redrives=settings.max_redrives,
        return_alternates=settings.return_alternates,
        reconcile_interval=conf.conductor.reconcile_interval,
    )

    def _stop() -> None:
        stop.set()
        server.stop()
        server.wait()
        sweeping.join(timeout=5)
        reconciling.join(timeout=5)
        if endpoint_http is not None:
            endpoint_http.shutdown()
        transport.cleanup()
        LOG.info(
            "conductor_stopped", redriven=dict(sweeper.counts), reconciled=dict(reconciler.counts)
        )

    return _cli.exit_status(wait_for_signal(_stop))


#: The scheduler hints ``boot --hint`` takes: each names instances by uuid.
BOOT_HINTS = {SAME_HOST: "SameHostFilter", DIFFERENT_HOST: "DifferentHostFilter"}


def _hints(conf: cfg.ConfigOpts, pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """``--hint`` pairs as scheduler hints (:class:`InvalidRequest` for an unknown
    hint or a value that is no uuid). A hint whose filter this config does not
    enable is warned about: the worker's config may differ, so it is sent."""
    hints: dict[str, list[str]] = {}
    for key, value in pairs:
        if key not in BOOT_HINTS:
            raise InvalidRequest(
                reason=f"unknown hint {key!r}; known: {', '.join(sorted(BOOT_HINTS))}"
            )
        hints.setdefault(key, []).append(validate_uuid(value, f"hint {key}"))
    enabled = set(conf.filter_scheduler.enabled_filters)
    for key in hints:
        if BOOT_HINTS[key] not in enabled:
            print(
                f"conductor-stub boot: warning: hint {key} needs {BOOT_HINTS[key]} in "
                "[filter_scheduler] enabled_filters (not in this config's)",
                file=sys.stderr,
            )
    return hints


def _boot(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    if args.count < 1 or args.per_request < 1:
        print("conductor-stub boot: --count and --per-request must be at least 1", file=sys.stderr)
        return 2
    if args.per_request > MAX_INSTANCES_PER_REQUEST:
        print(
            f"conductor-stub boot: --per-request must be at most {MAX_INSTANCES_PER_REQUEST} "
            "(the scheduler refuses a larger request whole)",
            file=sys.stderr,
        )
        return 2
    flavor = flavor_with(load_catalog(conf.conductor.flavors_file), args.flavor, args.extra_spec)
    hints = _hints(conf, args.hint)
    image = (
        Image(id=args.image_id, properties=dict(args.image_property))
        if args.image_property or args.image_id
        else None
    )
    # Checked before the store or the broker is reached; Booter.boot checks again.
    boot_spec(flavor, args.project, args.user, image=image, scheduler_hints=hints)
    store = make_store(conf)
    group = (
        server_group(store, validate_uuid(args.group, "--group"))
        if args.group is not None
        else None
    )
    transport = rpc.get_transport(conf)
    settings = conductor_settings(conf)
    booter = Booter(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES),
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        build_timeout=settings.build_timeout,
        return_alternates=settings.return_alternates,
        lost_after=reconcile_settings(conf).lost_after,
    )
    started = time.monotonic()
    ctxt = rpc.RequestContext(user_id=args.user, project_id=args.project)
    try:
        uuids = booter.boot(
            ctxt,
            flavor,
            args.count,
            per_request=args.per_request,
            mode=args.mode,
            group_policy=args.group_policy,
            group=group,
            availability_zone=args.availability_zone,
            project_id=args.project,
            user_id=args.user,
            image=image,
            scheduler_hints=hints,
        )
        if not args.wait:
            print(
                json.dumps(
                    {"instances": uuids, "group_uuid": booter.group.uuid if booter.group else None}
                )
                if args.json
                else format_booted(uuids, booter.group)
            )
            return 0
        report = booter.wait(uuids, args.timeout, started)
    finally:
        transport.cleanup()
    print(json.dumps(report.to_primitive()) if args.json else format_report(report, each=True))
    return boot_status(report, len(uuids), args.timeout)


def boot_status(report: BootReport, asked: int, timeout: float) -> int:
    """``boot --wait``'s exit status: 0 when every instance is ACTIVE; else 1,
    and one line on stderr saying how many are not, and in which states."""
    active = report.by_state.get(ACTIVE, 0)
    if active == asked and not report.timed_out:
        return 0
    others = ", ".join(
        f"{n} {state}" for state, n in sorted(report.by_state.items()) if state != ACTIVE
    )
    missing = asked - sum(report.by_state.values())
    if missing:
        others = ", ".join(filter(None, [others, f"{missing} not found"]))
    print(
        f"conductor-stub boot: {asked - active} of {asked} instance(s) did not become ACTIVE"
        f" ({others})" + (f"; timed out after {timeout:g} s" if report.timed_out else ""),
        file=sys.stderr,
    )
    return 1


def _resize(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    catalog = load_catalog(conf.conductor.flavors_file)
    if args.flavor is not None and args.flavor not in catalog:
        print(
            f"conductor-stub resize: unknown flavor {args.flavor!r}; known: "
            f"{', '.join(sorted(catalog))}",
            file=sys.stderr,
        )
        return 2
    if args.flavor is None and not (args.confirm or args.revert):
        print(
            "conductor-stub resize: give --flavor to resize, or --confirm / --revert",
            file=sys.stderr,
        )
        return 2
    flavor = catalog[args.flavor] if args.flavor is not None else None
    return _move(
        conf,
        None if flavor is None else lambda resizer: resizer.resize(args.uuid, flavor),
    )


def _migrate(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    if args.destination is not None and not args.destination:
        print("conductor-stub migrate: --host needs a host name", file=sys.stderr)
        return 2
    finishing = (args.confirm or args.revert) and _is_resized(conf, args.uuid)
    return _move(
        conf,
        None
        if finishing  # already migrated: only confirm or revert it
        else lambda resizer: resizer.migrate(args.uuid, host=args.destination, admin=args.admin),
    )


def _is_resized(conf: cfg.ConfigOpts, uuid: str) -> bool:
    store = make_store(conf)
    try:
        return store.get_instance(uuid).state == RESIZED
    finally:
        store.close()


def _move(conf: cfg.ConfigOpts, start: Callable[[Resizer], InstanceRecord] | None) -> int:
    """Start a resize or cold migration (``start``; None: only confirm or
    revert one), wait as asked and print the instance."""
    args = conf.command
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    resizer = Resizer(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES),
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        conductor_settings(conf),
    )
    try:
        record, timed_out = _run_move(resizer, args, start)
    finally:
        transport.cleanup()
    print(
        json.dumps(summary(record))
        if args.json
        else " ".join(f"{k}={v}" for k, v in summary(record).items() if v not in (None, []))
    )
    failed = record.state == RESIZING or (start is not None and record.fault is not None)
    return 1 if timed_out or failed else 0


def _run_move(
    resizer: Resizer,
    args: Any,  # the resize or migrate sub-command's parsed arguments
    start: Callable[[Resizer], InstanceRecord] | None,
) -> tuple[InstanceRecord, bool]:
    started = time.monotonic()

    def left() -> float:
        return max(args.timeout - (time.monotonic() - started), 0.0)

    if start is not None:
        record = start(resizer)
        if not (args.wait or args.confirm or args.revert):
            return record, False
        record, timed_out = resizer.wait(args.uuid, settled, left())
        if timed_out or record.state != RESIZED or not (args.confirm or args.revert):
            return record, timed_out
    if args.confirm:
        resizer.confirm(args.uuid)
    else:
        resizer.revert(args.uuid)
    return resizer.wait(args.uuid, finished, left())


def _live_migrate(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    migrator = LiveMigrator(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES),
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        conductor_settings(conf),
    )
    try:
        record = migrator.start(
            args.uuid,
            host=args.dest_host,
            admin=args.admin,
            block_migration=args.block_migration,
        )
        timed_out = False
        if args.wait:
            record, timed_out = migrator.wait(args.uuid, args.timeout)
    finally:
        transport.cleanup()
    shown = live_summary(record)
    print(
        json.dumps(shown)
        if args.json
        else " ".join(f"{k}={v}" for k, v in shown.items() if v not in (None, []))
    )
    # The start clears the fault: one now is this migration's (e.g. no valid host).
    failed = record.fault is not None or (args.wait and record.state != ACTIVE)
    return 1 if timed_out or failed else 0


def _delete(conf: cfg.ConfigOpts) -> int:
    args = conf.command

    def refuse(message: str) -> int:
        print(f"conductor-stub delete: {message}", file=sys.stderr)
        return 2

    if args.all == bool(args.uuids):
        return refuse("give instance uuids, or --all")
    if (args.state or args.project) and not args.all:
        return refuse("--state and --project narrow --all only")
    store = make_store(conf)
    if args.all:
        uuids = [r.uuid for r in store.scan_instances() if selected(r, args.state, args.project)]
    else:
        uuids = list(dict.fromkeys(args.uuids))
        known = {r.uuid for r in store.list_instances(uuids)}
        missing = [u for u in uuids if u not in known]
        if missing:  # nothing is deleted
            return refuse(f"no such instance: {', '.join(missing)}")
    transport = rpc.get_transport(conf)
    deleter = Deleter(
        store,
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        conductor_settings(conf),
    )
    try:
        records = [deleter.delete(uuid) for uuid in uuids]
        if args.wait:
            left, timed_out = deleter.wait(uuids, args.timeout)
            if timed_out:
                print(
                    f"conductor-stub delete: timed out after {args.timeout:g} s; not yet "
                    "DELETED: "
                    + ", ".join(
                        f"{r.uuid} ({r.state}, waiting on {', '.join(r.pending_hosts) or '-'})"
                        for r in left
                    ),
                    file=sys.stderr,
                )
                return 1
            records = store.list_instances(uuids)
    finally:
        transport.cleanup()
    shown = [{"uuid": r.uuid, "state": r.state, "host": r.host} for r in records]
    print(
        json.dumps({"instances": shown})
        if args.json
        else "\n".join(f"{r['uuid']} {r['state']}" for r in shown)
    )
    return 0


def _evacuate(conf: cfg.ConfigOpts) -> int:
    args = conf.command

    def refuse(message: str) -> int:
        print(f"conductor-stub evacuate: {message}", file=sys.stderr)
        return 2

    if bool(args.from_host) == bool(args.uuids):
        return refuse("give instance uuids, or --from-host HOST")
    store = make_store(conf)
    transport = rpc.get_transport(conf)
    evacuator = Evacuator(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES),
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        conductor_settings(conf),
        service_down_time=float(conf.scheduler.service_down_time),
    )
    try:
        if args.from_host:
            if compute_is_up(store, args.from_host, evacuator.service_down_time, time.time()):
                return refuse(
                    f"compute {args.from_host} is up: evacuate only instances of a down host"
                )
            uuids = [r.uuid for r in evacuator.on_host(args.from_host)]
        else:
            uuids = list(dict.fromkeys(args.uuids))
        try:  # every one checked before any is moved
            for uuid in uuids:
                evacuator.check(uuid, args.to_host, args.admin)
        except SchedulerError as exc:
            return refuse(str(exc.kwargs.get("reason") or exc.message))
        found = [evacuator.start(uuid, args.to_host, args.admin) for uuid in uuids]
        timed_out = False
        if args.wait:
            found, timed_out = evacuator.wait(uuids, args.timeout)
    finally:
        transport.cleanup()
    shown = [evacuate_summary(r) for r in found]
    print(
        json.dumps({"instances": shown})
        if args.json
        else "\n".join(" ".join(f"{k}={v}" for k, v in r.items() if v is not None) for r in shown)
        or "no instances"
    )
    if timed_out:
        return 1
    return 1 if args.wait and any(r.fault for r in found) else 0


def _shelve(conf: cfg.ConfigOpts) -> int:
    """``shelve`` / ``unshelve``: check every instance first (nothing is done if
    one is unknown or in the wrong state), then start each, then wait."""
    args = conf.command
    shelving = args.name == "shelve"
    uuids = list(dict.fromkeys(args.uuids))
    store = make_store(conf)
    found = {r.uuid: r for r in store.list_instances(uuids)}
    wanted, done = (ACTIVE, SHELVED_OFFLOADED) if shelving else (SHELVED_OFFLOADED, None)
    for uuid in uuids:
        record = found.get(uuid)
        if record is None:
            print(f"conductor-stub {args.name}: no such instance: {uuid}", file=sys.stderr)
            return 2
        if record.state != wanted:
            print(
                f"conductor-stub {args.name}: instance {uuid} is {record.state}, not {wanted}",
                file=sys.stderr,
            )
            return 2
    transport = rpc.get_transport(conf)
    shelver = Shelver(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES),
        rpc.ComputeClient(
            transport, ServiceResolver(store), conf.compute.topic, retry=SEND_RETRIES
        ),
        conductor_settings(conf),
    )
    try:
        for uuid in uuids:
            (shelver.shelve if shelving else shelver.unshelve)(uuid)
        timed_out = False
        if args.wait:
            _, timed_out = wait_until(
                store,
                uuids,
                (lambda r: r.state == done) if shelving else (lambda r: r.state in FINAL_STATES),
                args.timeout,
            )
        records = store.list_instances(uuids)
    finally:
        transport.cleanup()
    rows = [list_row(r) for r in records]
    print(json.dumps({"instances": rows}) if args.json else format_list(rows))
    if timed_out:
        print(f"conductor-stub {args.name}: timed out after {args.timeout:g} s", file=sys.stderr)
        return 1
    return 0


def selected(
    record: InstanceRecord, states: Sequence[str], project: str | None, host: str | None = None
) -> bool:
    """Whether ``delete --all`` and ``list`` take the record: in one of
    ``states`` (any, if none), of ``project`` and on ``host`` (any, if None)."""
    if states and record.state not in {s.upper() for s in states}:
        return False
    if host is not None and record.host != host:
        return False
    return project is None or (record.request_spec or {}).get("project_id") == project


def list_row(record: InstanceRecord) -> dict[str, Any]:
    """One instance as ``list`` prints it."""
    spec = record.request_spec or {}
    return {
        "uuid": record.uuid,
        "state": record.state,
        "task_state": record.task_state,
        "host": record.host,
        "availability_zone": record.availability_zone,
        "flavor": flavor_name(record),
        "project_id": spec.get("project_id"),
    }


def format_list(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "no instances"
    keys = ("uuid", "state", "task_state", "host", "availability_zone", "flavor", "project_id")
    headers = ("uuid", "state", "task", "host", "zone", "flavor", "project")
    cells = [[("-" if r[k] is None else str(r[k])) for k in keys] for r in rows]
    return "\n".join(table(headers, cells, left=len(headers)) + [f"{len(rows)} instance(s)"])


def _list(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    store = make_store(conf)
    try:
        rows = [
            list_row(r)
            for r in store.scan_instances()
            if selected(r, args.state, args.project, args.on_host)
        ]
    finally:
        store.close()
    print(json.dumps({"instances": rows}) if args.json else format_list(rows))
    return 0


def _show(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    store = make_store(conf)
    try:
        print(render_instance(store, args.uuid, admin=args.admin, as_json=args.json))
    finally:
        store.close()
    return 0


#: The commands that send over the broker: each asks it first (:func:`broker.reach`),
#: so one that cannot be reached is said in one line, before anything is recorded.
BROKER_COMMANDS = frozenset(
    {"boot", "resize", "migrate", "live-migrate", "evacuate", "delete", "shelve", "unshelve"}
)
#: Seconds a command waits at most for the broker to answer (less if its --timeout is).
BROKER_TIMEOUT = 10.0
#: Reconnections a command's send tries (about a second apart, then more) when
#: the broker goes away after it answered, before the command gives up (a boot's
#: unsent instances go to ERROR).
SEND_RETRIES = 2


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opt(command_opt)
    conf = _cli.parse(argv, prog="conductor-stub", description=__doc__.split("\n")[0])
    log.setup(
        process=f"conductor-stub.{conf.command.name}",
        level="INFO" if conf.command.name == "serve" else "WARNING",
    )
    if conf.command.name in BROKER_COMMANDS:
        broker.reach(conf, min(conf.command.timeout, BROKER_TIMEOUT))
    try:
        if conf.command.name == "serve":
            return _serve(conf)
        if conf.command.name == "resize":
            return _resize(conf)
        if conf.command.name == "migrate":
            return _migrate(conf)
        if conf.command.name == "evacuate":
            return _evacuate(conf)
        if conf.command.name == "live-migrate":
            return _live_migrate(conf)
        if conf.command.name == "delete":
            return _delete(conf)
        if conf.command.name in ("shelve", "unshelve"):
            return _shelve(conf)
        if conf.command.name == "list":
            return _list(conf)
        if conf.command.name == "show":
            return _show(conf)
        return _boot(conf)
    except _cli.ONE_LINE_ERRORS:
        raise
    except SchedulerError as exc:
        print(f"conductor-stub: {exc.message}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("conductor-stub", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
