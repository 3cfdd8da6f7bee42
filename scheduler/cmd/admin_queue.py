"""``scheduler-admin pending`` and ``scheduler-admin preemptions``: who waits for
capacity, and whom preemption evicted lately.

``pending`` reads the store's pending index in retry order (priority, then
age: :class:`~scheduler.store.base.PendingIndex`) a page at a time, and each
page's records in one read, so no store call grows with the queue's length;
an entry whose record is no longer PENDING (the conductor drops it on its
next pass) is skipped. ``preemptions`` reads the store's log of the last
preemptions, each written by its preempting claim's own step
(:class:`~scheduler.store.base.PreemptionLog`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oslo_config import cfg

from scheduler import render
from scheduler.cmd import _cli
from scheduler.cmd._commands import Command, Output, arg
from scheduler.objects import PENDING, InstanceRecord
from scheduler.store import Store
from scheduler.store.records import PREEMPTIONS_KEPT, PreemptionEntry

#: Entries read from the pending index per store call (a ZRANGE of this many,
#: then one read of their records).
PAGE = 200
#: How much of a pending request's last refusal the table shows.
SUMMARY_CHARS = 72

_positive = _cli.whole(1)

#: ``--limit`` of a command that prints the last of something the store keeps
#: (``preemptions``, ``refusals``).
NEWEST = arg(
    "--limit",
    type=_positive,
    default=20,
    metavar="N",
    help="How many to print, newest first (default 20).",
)


def _summary(details: str | None) -> str:
    """The last refusal's reasons on one short line (``-`` for none)."""
    text = " ".join((details or "").split())
    if len(text) > SUMMARY_CHARS:
        text = text[: SUMMARY_CHARS - 3] + "..."
    return text or "-"


def pending_view(record: InstanceRecord, now: float) -> dict[str, Any]:
    """One PENDING request as ``pending`` shows it."""
    since = record.waiting_since
    return {
        "uuid": record.uuid,
        "priority_class": record.priority_class,
        "priority": record.priority,
        "waiting_since": since,
        "waited": None if since is None else max(now - since, 0.0),
        "waits_until": record.deadline,
        "max_wait": record.max_wait,
        "last_refusal": record.fault_details,
    }


def read_pending(store: Store, limit: int, page: int = PAGE) -> list[InstanceRecord]:
    """The first ``limit`` PENDING records in retry order, read ``page``
    index entries (and their records) per store call."""
    found: list[InstanceRecord] = []
    offset = 0
    while len(found) < limit:
        uuids = store.list_pending(page, offset)
        if not uuids:
            break
        offset += len(uuids)
        records = {r.uuid: r for r in store.list_instances(uuids)}
        for uuid in uuids:
            record = records.get(uuid)
            if record is not None and record.state == PENDING:
                found.append(record)
    return found[:limit]


def _class_line(name: str | None, priority: int) -> str:
    return f"{name or '-'} ({priority})"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return (
        f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"
    )


def format_pending(views: Sequence[Mapping[str, Any]], indexed: int) -> str:
    """The table of ``pending``: one line per request, then how many are indexed."""
    if not views:
        return f"no request waits for capacity ({indexed} in the pending index)"

    def at(value: float | None) -> str:
        return "-" if value is None else render.when(value)

    rows = [
        (
            v["uuid"],
            _class_line(v["priority_class"], v["priority"]),
            at(v["waiting_since"]),
            _duration(v["waited"]),
            at(v["waits_until"]),
            _summary(v["last_refusal"]),
        )
        for v in views
    ]
    lines = render.table(
        (
            "instance",
            "class (priority)",
            "waiting since (UTC)",
            "waited",
            "waits until (UTC)",
            "last refusal",
        ),
        rows,
        left=6,
    )
    lines.append(f"{len(views)} shown, {indexed} in the pending index")
    return "\n".join(lines)


def _pending(conf: cfg.ConfigOpts, store: Store, clock: Callable[[], float] = time.time) -> Output:
    now = clock()
    records = read_pending(store, conf.command.limit)
    indexed = store.count_pending()
    views = [pending_view(r, now) for r in records]
    return Output(
        document={"pending": views, "indexed": indexed},
        table=format_pending(views, indexed),
        values=[
            (v["uuid"], v["priority_class"], v["priority"], v["waiting_since"], v["waits_until"])
            for v in views
        ],
        indent=2,
    )


def _victims_line(entry: PreemptionEntry) -> str:
    return ", ".join(
        f"{v.uuid} {_class_line(v.priority_class, v.priority)}" for v in entry.victims
    )


def format_preemptions(entries: Sequence[PreemptionEntry]) -> str:
    """The table of ``preemptions``: one line per preemption, newest first."""
    if not entries:
        return "no preemption kept"
    rows = [
        (
            render.when(e.at),
            e.instance_uuid,
            e.host,
            _class_line(e.priority_class, e.priority),
            _victims_line(e),
        )
        for e in entries
    ]
    return "\n".join(
        render.table(
            ("time (UTC)", "preemptor", "host", "class (priority)", "victims (class, priority)"),
            rows,
            left=5,
        )
    )


def _preemptions(conf: cfg.ConfigOpts, store: Store) -> Output:
    entries = store.recent_preemptions(conf.command.limit)
    return Output(
        document={"preemptions": [e.to_primitive() for e in entries]},
        table=format_preemptions(entries),
        values=[
            (render.when(e.at), e.instance_uuid, e.host, [v.uuid for v in e.victims])
            for e in entries
        ],
        indent=2,
    )


PENDING_COMMAND = Command(
    "pending",
    help="The requests waiting for capacity (PENDING), in the order they are retried.",
    description="Print the PENDING requests in the order the conductor retries them "
    "(higher priority first, then the oldest): each one's instance, priority class and "
    "priority, since when it waits and for how long, when its wait ends (it then goes to "
    "ERROR, no valid host) and a summary of why its last try found no host (-f json has "
    "it whole). Read from the store's pending index a page at a time.",
    run=_pending,
    values="one line per request: its uuid, class, priority, waiting since and waits "
    "until (seconds since the epoch)",
    arguments=(
        arg(
            "--limit",
            type=_positive,
            default=50,
            metavar="N",
            help="How many to print, first in line first (default 50).",
        ),
    ),
)

PREEMPTIONS_COMMAND = Command(
    "preemptions",
    help="The last preemptions: when, preemptor, host, class, victims.",
    description="Print the last preemptions the store keeps (newest first, at most "
    f"{PREEMPTIONS_KEPT}; each written in the same store step as its eviction): when "
    "(UTC), the preempting instance, the host, its priority class and priority, and each "
    "victim with its class and priority.",
    run=_preemptions,
    values="one line per preemption: its time, preemptor uuid, host and victim uuids",
    arguments=(NEWEST,),
)
