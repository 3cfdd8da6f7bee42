"""What the operators' commands print of the store, in one place for all of
them: aligned tables (``scheduler-admin``, and ``conductor-stub``'s boot and
fill reports) and one instance's record with what it holds (``scheduler-admin
instance show`` and ``conductor-stub show``). Below the commands: it reads
the store and formats, nothing more.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.exceptions import NotFound
from scheduler.objects import MIGRATING, PENDING, RESIZED, InstanceRecord
from scheduler.priority import PriorityClass
from scheduler.store.base import PlacementReader, Refusal, Store


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "", left: int = 1
) -> list[str]:
    """Aligned columns: the first ``left`` left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for row in cells:
        parts = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append((indent + "  ".join(parts)).rstrip())
    return out


def resources_line(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={amount}" for rc, amount in resources.items()) or "nothing"


# --- one instance ------------------------------------------------------------------


#: What only an admin sees of an instance (``conductor-stub show`` without
#: ``--admin`` leaves them out; ``scheduler-admin`` is an admin's tool).
ADMIN_FIELDS = (
    "node",
    "tried_hosts",
    "fault_details",
    "allocations",
    "claimed_host",
    "redrives",
)


def flavor_name(record: InstanceRecord) -> str | None:
    """The name of the flavor the instance runs with: the new one once RESIZED
    (it runs on the destination with it, waiting for a confirm or a revert,
    as Nova shows it in VERIFY_RESIZE), else the one it was booted (or last
    resized) with."""
    if record.state == RESIZED and record.new_flavor:
        name = record.new_flavor.get("name")
        return name if isinstance(name, str) else None
    spec = record.request_spec or {}
    flavor = spec.get("flavor") if isinstance(spec, Mapping) else None
    return flavor.get("name") if isinstance(flavor, Mapping) else None


def instance_view(
    record: InstanceRecord,
    allocations: Mapping[str, Mapping[str, int]],
    migration_allocations: Mapping[str, Mapping[str, int]] | None = None,
    admin: bool = True,
    claimed_host: str | None = None,
) -> dict[str, Any]:
    """What ``instance show`` (and ``conductor-stub show``) prints: the record
    without its request spec, plus the allocations it holds (by provider name)
    and its flavor; during a resize or a live migration, the migration too (the
    source's allocation is parked on it; an admin sees where the live
    migration's destination is claimed). Without ``admin``, the
    :data:`ADMIN_FIELDS` are left out. ``claimed_host`` is the host whose
    provider tree holds the instance's claim (None: it holds none): shown
    while the record names no host yet (a build cast, not yet reported)."""
    resize: dict[str, Any] | None = None
    live: dict[str, Any] | None = None
    parked = {name: dict(amounts) for name, amounts in (migration_allocations or {}).items()}
    if record.migration_uuid and record.state == MIGRATING:
        live = {
            "migration_uuid": record.migration_uuid,
            "source_host": record.source_host,
            "requested_host": (record.requested_destination or {}).get("host"),
            "block_migration": record.block_migration,
        }
        if admin:
            live["destination"] = next(iter(allocations), None)
            live["allocations"] = parked
    elif record.migration_uuid:
        resize = {
            "migration_uuid": record.migration_uuid,
            "source_host": record.source_host,
            "new_flavor": (record.new_flavor or {}).get("name"),
        }
        if admin:
            resize["allocations"] = parked
    view = {
        "uuid": record.uuid,
        "state": record.state,
        "task_state": record.task_state,
        "host": record.host,
        "node": record.node,
        "availability_zone": record.availability_zone,
        "request_id": record.request_id,
        "attempts": record.attempts,
        "tried_hosts": list(record.tried_hosts),
        "fault": record.fault,
        "fault_details": record.fault_details,
        "flavor": flavor_name(record),
        "priority_class": record.priority_class,
        "priority": record.priority,
        "preemptible": record.preemptible,
        "max_wait": record.max_wait,
        "waiting_since": record.waiting_since,
        "waits_until": record.deadline if record.state == PENDING else None,
        "allocations": {name: dict(amounts) for name, amounts in allocations.items()},
        "claimed_host": claimed_host,
        "redrives": record.redrives,
        "resize": resize,
        "live_migration": live,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }
    return view if admin else {k: v for k, v in view.items() if k not in ADMIN_FIELDS}


def priority_line(view: Mapping[str, Any]) -> str:
    """``spot (priority 10, preemptible)``; ``- (priority 0)`` with no class."""
    name, priority = view.get("priority_class"), view.get("priority", 0)
    if not name:
        return f"- (priority {priority})"
    return str(PriorityClass(name, priority, view.get("preemptible") is True))


def waiting_line(view: Mapping[str, Any]) -> str:
    """How an instance that may wait for capacity waits: ``up to 3600 s``, and
    since when (and, PENDING, until when) once it has waited."""
    line = f"for capacity, up to {view['max_wait']:g} s"
    if view.get("waiting_since") is not None:
        line += f"; since {when(view['waiting_since'])}"
    if view.get("waits_until") is not None:
        line += f", until {when(view['waits_until'])}"
    return line


def format_instance(view: Mapping[str, Any]) -> str:
    def show(value: Any) -> str:
        if value is None or value == "" or value == []:
            return "-"
        return ", ".join(value) if isinstance(value, list) else str(value)

    def held(allocations: Mapping[str, Mapping[str, int]]) -> str:
        return (
            "; ".join(
                f"{name}: {resources_line(amounts)}" for name, amounts in allocations.items()
            )
            or "-"
        )

    resize = view.get("resize")
    admin = "fault_details" in view
    migration = ""
    if resize:
        migration = (
            f"to {show(resize['new_flavor'])} from {show(resize['source_host'])}; "
            f"migration {resize['migration_uuid']}"
        )
        if admin:
            migration += f" holds {held(resize['allocations'])}"
    live = view.get("live_migration")
    moving = ""
    if live:
        moving = (
            f"from {show(live['source_host'])}"
            + (f" to {live['requested_host']} (requested)" if live["requested_host"] else "")
            + (", block migration" if live["block_migration"] else "")
            + f"; migration {live['migration_uuid']}"
        )
        if admin:
            moving += (
                f"; destination claimed: {show(live['destination'])}; migration holds "
                f"{held(live['allocations'])}"
            )
    node = f" (node {show(view['node'])})" if admin and view["node"] else ""
    claimed = view.get("claimed_host")
    if view["host"] is None and claimed:
        node = f" (its claim is held on {claimed}; no build reported yet)"
    rows = [
        ("state", f"{view['state']} (task: {show(view['task_state'])})"),
        ("flavor", show(view["flavor"])),
        ("priority", priority_line(view)),
        ("host", f"{show(view['host'])}{node}"),
        ("zone", show(view.get("availability_zone"))),
        ("request id", show(view.get("request_id"))),
        ("attempts", show(view["attempts"])),
        *([("waiting", waiting_line(view))] if view.get("max_wait") is not None else []),
        *([("resize", migration)] if resize else []),
        *([("live migration", moving)] if live else []),
        ("fault", show(view["fault"])),
    ]
    if admin:
        rows += [
            ("tried hosts", show(view["tried_hosts"])),
            ("allocations", held(view["allocations"])),
            ("re-drives", show(view.get("redrives", 0))),
            (
                "fault details",
                show(view["fault_details"]) + "   [admin only]" if view["fault_details"] else "-",
            ),
        ]
    rows.append(
        (
            "updated",
            when(view["updated_at"]) + " UTC" if view["updated_at"] else "-",
        )
    )
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"instance {view['uuid']}", *(f"  {k.ljust(width)}  {v}" for k, v in rows)])


def held_by(store: PlacementReader, consumer_uuid: str) -> dict[str, Mapping[str, int]]:
    """A consumer's allocations by provider name."""
    consumer = store.get_consumer(consumer_uuid)
    allocations: dict[str, Mapping[str, int]] = {}
    for rp, amounts in consumer.allocations.items() if consumer else ():
        try:
            name = store.get_provider(rp).name
        except NotFound:
            name = rp
        allocations[name] = amounts
    return allocations


def claimed_host(store: PlacementReader, consumer_uuid: str) -> str | None:
    """The host (root provider) whose tree holds the consumer's allocations
    (None: it holds none). A claim is on one host's tree."""
    consumer = store.get_consumer(consumer_uuid)
    for rp in consumer.allocations if consumer else ():
        try:
            provider = store.get_provider(rp)
            root = provider.root_uuid or provider.uuid
            return provider.name if root == provider.uuid else store.get_provider(root).name
        except NotFound:
            continue
    return None


def instance_of(store: Store, uuid: str, admin: bool = True) -> dict[str, Any]:
    """One instance as ``instance show`` and ``conductor-stub show`` show it
    (:func:`instance_view`, read from the store; :class:`InstanceNotFound` if
    there is no such record)."""
    record = store.get_instance(uuid)
    return instance_view(
        record,
        held_by(store, record.uuid),
        held_by(store, record.migration_uuid) if record.migration_uuid else None,
        admin=admin,
        claimed_host=claimed_host(store, record.uuid) if record.host is None else None,
    )


def render_instance(store: Store, uuid: str, admin: bool = True, as_json: bool = False) -> str:
    """:func:`instance_of` as text (or JSON)."""
    view = instance_of(store, uuid, admin=admin)
    return json.dumps(view, indent=2) if as_json else format_instance(view)


# --- the last NoValidHosts ---------------------------------------------------------


def when(at: float) -> str:
    """A time as the commands print it: UTC, to the second."""
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def reasons_line(reasons: Mapping[str, int]) -> str:
    """``800 insufficient MEMORY_MB, 100 disabled``: the most hosts first."""
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {reason}" for reason, n in ranked) or "-"


def format_refusals(refusals: Sequence[Refusal]) -> str:
    """The last NoValidHosts as ``scheduler-admin refusals`` prints them."""
    if not refusals:
        return "no NoValidHost kept"
    rows = [
        (
            when(r.at),
            r.request_id or "-",
            r.action,
            (r.instance_uuids[0] if r.instance_uuids else "-")
            + (f" (+{len(r.instance_uuids) - 1})" if len(r.instance_uuids) > 1 else ""),
            reasons_line(r.reasons),
        )
        for r in refusals
    ]
    return "\n".join(
        table(
            ("time (UTC)", "request", "action", "instance", "hosts removed, by reason"),
            rows,
            left=5,
        )
    )
