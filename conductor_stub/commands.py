"""What each ``conductor-stub`` command does (the parser and the entry point are
:mod:`conductor_stub.cmd`'s): ``serve`` runs the conductor's endpoint, its
sweeper and its reconciler; the others drive one operation each (boot,
resize, migrate, live-migrate, evacuate, delete, shelve and unshelve) or
read the records (list, show). Each returns what it did as an
:class:`~scheduler.cmd._commands.Output` (its exit status with it), which the
dispatcher prints as ``-f table``, ``json`` or ``value``; or only an exit
status when it has nothing to show (``serve``; a refusal, said in one line).

What ``-f value`` prints, one line per instance: its uuid and state (and,
for the moves, list and show, its host)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import oslo_messaging
from oslo_config import cfg

from conductor_stub.manager import ConductorEndpoint
from conductor_stub.pending import PendingRetrier, PendingSettings
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
from scheduler import broker, health, log, notify_transport, rpc, steps
from scheduler.cmd import _cli, _commands
from scheduler.cmd._commands import Output, Result
from scheduler.cmd._daemon import wait_for_signal
from scheduler.conf.priority import priority_classes
from scheduler.exceptions import InvalidRequest, NoConsumer, SchedulerError
from scheduler.filters.different_host import HINT as DIFFERENT_HOST
from scheduler.filters.same_host import HINT as SAME_HOST
from scheduler.flavors import flavor_with, load_catalog
from scheduler.notifier import Notifier
from scheduler.objects import (
    ACTIVE,
    FINAL_STATES,
    MAX_INSTANCES_PER_REQUEST,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    Image,
    InstanceRecord,
    validate_uuid,
)
from scheduler.render import flavor_name, table, when
from scheduler.store import Store, make_store
from scheduler.store.services import ServiceResolver

LOG = log.get_logger("conductor_stub")

#: Reconnections a command's send tries (about a second apart, then more) when
#: the broker goes away after it answered, before the command gives up (a boot's
#: unsent instances go to ERROR).
SEND_RETRIES = 2


def open_store(conf: cfg.ConfigOpts) -> Store:
    """The command's store: opened once per run, closed when the command ends
    (its dispatcher, :func:`conductor_stub.cmd.run`, runs it in
    :func:`_cli.closing`)."""
    return _cli.opened("store", lambda: make_store(conf), lambda store: store.close())


def open_transport(conf: cfg.ConfigOpts) -> Any:
    """The command's RPC transport: opened once per run, cleaned up when the
    command ends (as :func:`open_store`)."""
    return _cli.opened("transport", lambda: rpc.get_transport(conf), _cleanup)


def open_notification_transport(conf: cfg.ConfigOpts) -> Any:
    """The command's notification transport (``serve``'s), as :func:`open_transport`."""
    return _cli.opened(
        "notification transport", lambda: rpc.get_notification_transport(conf), _cleanup
    )


def _cleanup(transport: Any) -> None:
    transport.cleanup()


def scheduler_client(conf: cfg.ConfigOpts, transport: Any) -> rpc.SchedulerClient:
    """The scheduler client a command sends with (its sends retried)."""
    return rpc.SchedulerClient(transport, conf.scheduler.topic, retry=SEND_RETRIES)


def compute_client(conf: cfg.ConfigOpts, transport: Any, store: Any) -> rpc.ComputeClient:
    """The compute client a command sends with (its sends retried)."""
    return rpc.ComputeClient(
        transport,
        ServiceResolver(store),
        conf.compute.topic,
        retry=SEND_RETRIES,
        version_cap=conf.upgrade_levels.compute,
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


def pending_settings(conf: cfg.ConfigOpts, settings: ConductorSettings) -> PendingSettings:
    p = conf.priority
    return PendingSettings(
        retry_interval=float(p.pending_retry_interval),
        retry_batch=int(p.pending_retry_batch),
        build_timeout=settings.build_timeout,
    )


def reconcile_settings(conf: cfg.ConfigOpts) -> ReconcileSettings:
    c = conf.conductor
    return ReconcileSettings(
        interval=float(c.reconcile_interval),
        orphan_grace=float(c.orphan_grace),
        report_max_age=float(c.report_max_age),
        lost_vm_action=str(c.lost_vm_action),
        deleted_retention=float(c.deleted_retention),
        resize_timeout=float(c.resize_timeout),
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


def _notifier(conf: cfg.ConfigOpts, transport: Any) -> Notifier | None:
    """The reconciler's notifier (``scheduler.reconcile.action``), publishing
    as ``scheduler-conductor:<host>`` where ``[notifications]`` says, as a
    worker does; None when notifications are off."""
    if transport is None:
        return None
    return Notifier(
        transport,
        conf.host,
        topic=conf.notifications.topic,
        notification_format=conf.notifications.format,
        versioned_topic=conf.notifications.versioned_topic,
        channel=notify_transport.channel_for(conf, transport),
        service="scheduler-conductor",
    )


def serve(conf: cfg.ConfigOpts) -> int:
    transport = open_transport(conf)
    store = open_store(conf)
    settings = conductor_settings(conf)
    compute = rpc.ComputeClient(
        transport,
        ServiceResolver(store),
        conf.compute.topic,
        version_cap=conf.upgrade_levels.compute,
    )
    scheduler = rpc.SchedulerClient(transport, conf.scheduler.topic)
    endpoint = ConductorEndpoint(store, compute, scheduler, settings)
    server = rpc.get_server(
        transport, conf.conductor.topic, conf.host, [endpoint], access_policy=steps.ACCESS_POLICY
    )
    sweeper = Sweeper(store, scheduler, Resizer(store, scheduler, compute, settings), settings)
    stop = threading.Event()
    sweeping = threading.Thread(target=sweeper.run, args=(stop,), name="sweeper", daemon=True)
    notifying = open_notification_transport(conf) if conf.notifications.enabled else None
    notifier = _notifier(conf, notifying)
    reconciler = Reconciler(store, compute, reconcile_settings(conf), notifier=notifier)
    reconciling = threading.Thread(
        target=reconciler.run, args=(stop,), name="reconciler", daemon=True
    )
    retrier = PendingRetrier(store, scheduler, pending_settings(conf, settings))
    retrying = threading.Thread(target=retrier.run, args=(stop,), name="pending", daemon=True)
    endpoint_http = _health(conf, store) if conf.conductor.health_port else None
    server.start()
    sweeping.start()
    reconciling.start()
    retrying.start()
    LOG.info(
        "conductor_started",
        build_timeout=settings.build_timeout,
        max_redrives=settings.max_redrives,
        return_alternates=settings.return_alternates,
        reconcile_interval=conf.conductor.reconcile_interval,
    )

    def _stop() -> None:  # (the transports and the store: closed by the dispatcher)
        stop.set()
        server.stop()
        server.wait()
        sweeping.join(timeout=5)
        reconciling.join(timeout=5)
        retrying.join(timeout=5)
        if endpoint_http is not None:
            endpoint_http.shutdown()
        if notifier is not None:
            notifier.stop()
        LOG.info(
            "conductor_stopped",
            redriven=dict(sweeper.counts),
            reconciled=dict(reconciler.counts),
            pending=retrier.counts,
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
            _cli.say(
                "conductor-stub boot",
                f"warning: hint {key} needs {BOOT_HINTS[key]} in "
                "[filter_scheduler] enabled_filters (not in this config's)",
            )
    return hints


def boot(conf: cfg.ConfigOpts) -> Result:
    args = conf.command
    if args.count < 1 or args.per_request < 1:
        _cli.say("conductor-stub boot", "--count and --per-request must be at least 1")
        return 2
    if args.per_request > MAX_INSTANCES_PER_REQUEST:
        _cli.say(
            "conductor-stub boot",
            f"--per-request must be at most {MAX_INSTANCES_PER_REQUEST} "
            "(the scheduler refuses a larger request whole)",
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
    classes = priority_classes(conf)
    classes.of(flavor.extra_specs)
    if args.wait_for_capacity and not conf.priority.max_wait:
        _cli.say(
            "conductor-stub boot",
            "--wait-for-capacity: waiting is turned off ([priority] max_wait = 0)",
        )
        return 2
    # A request refused above says only why; one that will be sent, whether
    # anything is there to take it.
    warn_missing_consumers(conf)
    store = open_store(conf)
    group = (
        server_group(store, validate_uuid(args.group, "--group"))
        if args.group is not None
        else None
    )
    transport = open_transport(conf)
    settings = conductor_settings(conf)
    booter = Booter(
        store,
        scheduler_client(conf, transport),
        compute_client(conf, transport, store),
        build_timeout=settings.build_timeout,
        return_alternates=settings.return_alternates,
        lost_after=reconcile_settings(conf).lost_after,
        priority_classes=classes,
        max_wait=float(conf.priority.max_wait),
    )
    started = time.monotonic()
    ctxt = rpc.RequestContext(user_id=args.user, project_id=args.project)
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
        wait_for_capacity=args.wait_for_capacity,
    )
    if not args.wait:
        return Output(
            document={
                "instances": uuids,
                "group_uuid": booter.group.uuid if booter.group else None,
            },
            table=format_booted(uuids, booter.group),
            values=[(uuid,) for uuid in uuids],
        )
    report = booter.wait(uuids, args.timeout, started)
    return Output(
        document=report.to_primitive(),
        table=format_report(report, each=True),
        values=[(r.uuid, r.state) for r in report.instances],
        status=boot_status(report, len(uuids), args.timeout),
    )


#: What must consume its topic for a boot to go anywhere: the option group
#: naming the topic, and the daemon that consumes it.
BOOT_CONSUMERS = (("scheduler", "scheduler-worker"), ("conductor", "conductor-stub serve"))
#: How long a boot asks the broker whether they consume (it was just reached).
CONSUMER_CHECK_TIMEOUT = 5.0


def warn_missing_consumers(conf: cfg.ConfigOpts) -> None:
    """Say, one line each, which of :data:`BOOT_CONSUMERS` nothing consumes
    now (``boot``, before it sends). The boot is still recorded and sent (the
    conductor's sweep re-drives what no worker took), but ``--wait`` would
    otherwise wait its whole timeout without a word."""
    for group, what in BOOT_CONSUMERS:
        try:
            topic = getattr(conf, group).topic
            broker.reach(conf, CONSUMER_CHECK_TIMEOUT, topic=topic, what=what)
        except NoConsumer as exc:
            _cli.say(
                "conductor-stub boot",
                f"warning: {exc.message}; the instances stay BUILDING until one does "
                "(the conductor re-drives them past [conductor] build_timeout)",
            )


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
    _cli.say(
        "conductor-stub boot",
        f"{asked - active} of {asked} instance(s) did not become ACTIVE"
        f" ({others})" + (f"; timed out after {timeout:g} s" if report.timed_out else ""),
    )
    return 1


def resize(conf: cfg.ConfigOpts) -> Result:
    args = conf.command
    catalog = load_catalog(conf.conductor.flavors_file)
    if args.flavor is not None and args.flavor not in catalog:
        _cli.say(
            "conductor-stub resize",
            f"unknown flavor {args.flavor!r}; known: {', '.join(sorted(catalog))}",
        )
        return 2
    if args.flavor is None and not (args.confirm or args.revert):
        _cli.say("conductor-stub resize", "give --flavor to resize, or --confirm / --revert")
        return 2
    flavor = catalog[args.flavor] if args.flavor is not None else None
    return _move(
        conf,
        None if flavor is None else lambda resizer: resizer.resize(args.uuid, flavor),
    )


def migrate(conf: cfg.ConfigOpts) -> Result:
    args = conf.command
    if args.destination is not None and not args.destination:
        _cli.say("conductor-stub migrate", "--host needs a host name")
        return 2
    finishing = (args.confirm or args.revert) and _is_resized(conf, args.uuid)
    return _move(
        conf,
        None
        if finishing  # already migrated: only confirm or revert it
        else lambda resizer: resizer.migrate(args.uuid, host=args.destination, admin=args.admin),
    )


def _is_resized(conf: cfg.ConfigOpts, uuid: str) -> bool:
    return open_store(conf).get_instance(uuid).state == RESIZED


def _move(conf: cfg.ConfigOpts, start: Callable[[Resizer], InstanceRecord] | None) -> Output:
    """Start a resize or cold migration (``start``; None: only confirm or
    revert one), wait as asked and print the instance."""
    args = conf.command
    transport = open_transport(conf)
    store = open_store(conf)
    resizer = Resizer(
        store,
        scheduler_client(conf, transport),
        compute_client(conf, transport, store),
        conductor_settings(conf),
    )
    record, timed_out = _run_move(resizer, args, start)
    failed = record.state == RESIZING or (start is not None and record.fault is not None)
    return _one_instance(summary(record), record, 1 if timed_out or failed else 0)


def _one_instance(shown: dict[str, Any], record: InstanceRecord, status: int) -> Output:
    """A move's instance: ``key=value`` of what is set, its JSON object, or its
    uuid, state and host."""
    return Output(
        document=shown,
        table=" ".join(f"{k}={v}" for k, v in shown.items() if v not in (None, [])),
        values=[(record.uuid, record.state, record.host)],
        status=status,
    )


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


def live_migrate(conf: cfg.ConfigOpts) -> Output:
    args = conf.command
    transport = open_transport(conf)
    store = open_store(conf)
    migrator = LiveMigrator(
        store,
        scheduler_client(conf, transport),
        compute_client(conf, transport, store),
        conductor_settings(conf),
    )
    record = migrator.start(
        args.uuid,
        host=args.dest_host,
        admin=args.admin,
        block_migration=args.block_migration,
    )
    timed_out = False
    if args.wait:
        record, timed_out = migrator.wait(args.uuid, args.timeout)
    # The start clears the fault: one now is this migration's (e.g. no valid host).
    failed = record.fault is not None or (args.wait and record.state != ACTIVE)
    return _one_instance(live_summary(record), record, 1 if timed_out or failed else 0)


def delete(conf: cfg.ConfigOpts) -> Result:
    args = conf.command

    def refuse(message: str) -> int:
        _cli.say("conductor-stub delete", message)
        return 2

    if args.all == bool(args.uuids):
        return refuse("give instance uuids, or --all")
    if (args.state or args.project) and not args.all:
        return refuse("--state and --project narrow --all only")
    store = open_store(conf)
    if args.all:
        uuids = [r.uuid for r in store.scan_instances() if selected(r, args.state, args.project)]
    else:
        uuids = list(dict.fromkeys(args.uuids))
        known = {r.uuid for r in store.list_instances(uuids)}
        missing = [u for u in uuids if u not in known]
        if missing:  # nothing is deleted
            return refuse(f"no such instance: {', '.join(missing)}")
    transport = open_transport(conf)
    deleter = Deleter(
        store,
        compute_client(conf, transport, store),
        conductor_settings(conf),
    )
    records = [deleter.delete(uuid) for uuid in uuids]
    if args.wait:
        left, timed_out = deleter.wait(uuids, args.timeout)
        if timed_out:
            _cli.say(
                "conductor-stub delete",
                f"timed out after {args.timeout:g} s; not yet DELETED: "
                + ", ".join(
                    f"{r.uuid} ({r.state}, waiting on {', '.join(r.pending_hosts) or '-'})"
                    for r in left
                ),
            )
            return 1
        records = store.list_instances(uuids)
    shown = [{"uuid": r.uuid, "state": r.state, "host": r.host} for r in records]
    return Output(
        document={"instances": shown},
        table="\n".join(f"{r['uuid']} {r['state']}" for r in shown),
        values=[(r.uuid, r.state) for r in records],
    )


def evacuate(conf: cfg.ConfigOpts) -> Result:
    args = conf.command

    def refuse(message: str) -> int:
        _cli.say("conductor-stub evacuate", message)
        return 2

    if bool(args.from_host) == bool(args.uuids):
        return refuse("give instance uuids, or --from-host HOST")
    store = open_store(conf)
    transport = open_transport(conf)
    evacuator = Evacuator(
        store,
        scheduler_client(conf, transport),
        compute_client(conf, transport, store),
        conductor_settings(conf),
        service_down_time=float(conf.scheduler.service_down_time),
    )
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
    shown = [evacuate_summary(r) for r in found]
    return Output(
        document={"instances": shown},
        table="\n".join(" ".join(f"{k}={v}" for k, v in r.items() if v is not None) for r in shown)
        or "no instances",
        values=[(r.uuid, r.state, r.host) for r in found],
        status=1 if timed_out or (args.wait and any(r.fault for r in found)) else 0,
    )


def shelve(conf: cfg.ConfigOpts) -> Result:
    """``shelve`` / ``unshelve``: check every instance first (nothing is done if
    one is unknown or in the wrong state), then start each, then wait."""
    args = conf.command
    shelving = args.name == "shelve"
    uuids = list(dict.fromkeys(args.uuids))
    store = open_store(conf)
    found = {r.uuid: r for r in store.list_instances(uuids)}
    wanted, done = (ACTIVE, SHELVED_OFFLOADED) if shelving else (SHELVED_OFFLOADED, None)
    for uuid in uuids:
        record = found.get(uuid)
        if record is None:
            _cli.say(f"conductor-stub {args.name}", f"no such instance: {uuid}")
            return 2
        if record.state != wanted:
            _cli.say(
                f"conductor-stub {args.name}", f"instance {uuid} is {record.state}, not {wanted}"
            )
            return 2
    transport = open_transport(conf)
    shelver = Shelver(
        store,
        scheduler_client(conf, transport),
        compute_client(conf, transport, store),
        conductor_settings(conf),
    )
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
    if timed_out:
        _cli.say(f"conductor-stub {args.name}", f"timed out after {args.timeout:g} s")
    return _listed([list_row(r) for r in records], 1 if timed_out else 0)


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
        "priority_class": record.priority_class,
        "priority": record.priority,
        "preemptible": record.preemptible,
        "project_id": spec.get("project_id"),
        "fault": record.fault,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


#: The longest fault ``list``'s table shows (``show`` shows it whole).
FAULT_SHOWN = 40


def format_list(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "no instances"
    keys: tuple[str, ...] = ("uuid", "state", "task_state", "host", "availability_zone")
    keys += ("flavor", "priority_class", "project_id")
    headers: tuple[str, ...] = ("uuid", "state", "task", "host", "zone", "flavor", "class")
    headers += ("project",)
    headers += ("updated (UTC)", "fault")
    cells = [
        [("-" if r[k] is None else str(r[k])) for k in keys]
        + [when(r["updated_at"]) if r["updated_at"] else "-", _shortened(r["fault"])]
        for r in rows
    ]
    return "\n".join(table(headers, cells, left=len(headers)) + [f"{len(rows)} instance(s)"])


def _shortened(fault: str | None) -> str:
    if not fault:
        return "-"
    return fault if len(fault) <= FAULT_SHOWN else fault[: FAULT_SHOWN - 3] + "..."


#: How ``list --sort`` orders the rows: by uuid (the default), or by the
#: column named, newest first for the times.
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "uuid": lambda r: r["uuid"],
    "state": lambda r: (r["state"], r["uuid"]),
    "host": lambda r: (r["host"] or "", r["uuid"]),
    "created": lambda r: (-r["created_at"], r["uuid"]),
    "updated": lambda r: (-r["updated_at"], r["uuid"]),
}


def _listed(rows: list[dict[str, Any]], status: int = 0) -> Output:
    """Instances as ``list`` shows them: the table, ``{instances: [...]}``, or
    each one's uuid, state and host."""
    return Output(
        document={"instances": rows},
        table=format_list(rows),
        values=[(r["uuid"], r["state"], r["host"]) for r in rows],
        status=status,
    )


def list_instances(conf: cfg.ConfigOpts) -> Output:
    args = conf.command
    rows = [
        list_row(r)
        for r in open_store(conf).scan_instances()
        if selected(r, args.state, args.project, args.on_host)
    ]
    return _listed(sorted(rows, key=SORTS[args.sort]))


def show(conf: cfg.ConfigOpts) -> Output:
    args = conf.command
    return _commands.instance_output(open_store(conf), args.uuid, admin=args.admin)


#: The commands that send over the broker: each asks it first (:func:`broker.reach`),
#: so one that cannot be reached is said in one line, before anything is recorded.
