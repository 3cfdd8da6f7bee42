"""``scheduler-notify-tail``: print scheduler notifications as they arrive.

Listens on the notifications topic with its own pool (so it does not steal
messages from other consumers) and prints one JSON line per notification:
timestamp, message id, request id, priority, event type, publisher, payload.
``--format versioned`` listens on ``[notifications] versioned_topic`` (the
versioned payloads, in Nova's envelope) instead of the legacy topic; by
default the tail reads the versioned ones when those are all the scheduler
publishes (``[notifications] format = versioned``), else the legacy ones.
``--event PATTERN`` (repeatable; shell-style, e.g. ``'scheduler.resize.*'``)
prints only the event types it matches. Once its output is closed under it
(``| head -1`` has its line) the tail stops listening, deletes its pool's
queue and exits with status 141, as every command does (:func:`_cli.run`).
"""

from __future__ import annotations

import fnmatch
import json
import sys
import threading
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import Any

import oslo_messaging
from oslo_config import cfg

from scheduler import broker, log, rpc
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.cmd._daemon import wait_for_signal

#: Seconds the tail waits at most for the broker to answer before it says so.
BROKER_TIMEOUT = 10.0

#: The name of the policy :func:`pool_policy` gives.
POOL_POLICY_NAME = "scheduler-tail-pools"


def fresh_pool() -> str:
    """A listener pool of the tail's own (its queue is deleted when it stops)."""
    return f"tail-{uuidlib.uuid4().hex[:8]}"


def pool_policy(expires: float) -> list[str]:
    """``rabbitmqctl set_policy`` arguments (after ``-p VHOST``) that expire the
    queue of a tail's own pool (:func:`fresh_pool`) once it has had no consumer
    for ``expires`` seconds: the queue of a tail killed with SIGKILL, which
    could not delete it. (The driver declares the queue without an expiry, and
    RabbitMQ refuses one declared again with other arguments: a policy is the
    way.) A live tail consumes from its queue, so it never expires under it."""
    if expires <= 0:
        raise ValueError(f"expires must be above 0 seconds, not {expires}")
    definition = json.dumps({"expires": round(expires * 1000)})
    return ["--apply-to", "queues", POOL_POLICY_NAME, "^tail-[0-9a-f]{8}$", definition]


def _field(source: Any, key: str) -> Any:
    """``key`` of a dict (a context off the wire, the metadata) or an attribute
    of a context object (as an in-process transport hands it over)."""
    return source.get(key) if isinstance(source, dict) else getattr(source, key, None)


class NotificationCollector:
    """A notification endpoint handing every notification (those of ``events``
    only, shell-style patterns, when given) to ``sink``."""

    def __init__(self, sink: Callable[[dict[str, Any]], None], events: Sequence[str] = ()) -> None:
        self._sink = sink
        self._events = tuple(events)
        self._lock = threading.Lock()

    def wants(self, event_type: str) -> bool:
        return not self._events or any(fnmatch.fnmatchcase(event_type, p) for p in self._events)

    def _record(
        self,
        priority: str,
        ctxt: Any,
        publisher_id: str,
        event_type: str,
        payload: Any,
        metadata: Any,
    ) -> None:
        if not self.wants(str(event_type)):
            return
        with self._lock:
            self._sink(
                {
                    "timestamp": _field(metadata, "timestamp"),
                    "message_id": _field(metadata, "message_id"),
                    "request_id": _field(ctxt, "request_id"),
                    "priority": priority,
                    "event_type": event_type,
                    "publisher_id": publisher_id,
                    "payload": payload,
                }
            )

    def info(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("INFO", ctxt, publisher_id, event_type, payload, metadata)

    def warn(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("WARN", ctxt, publisher_id, event_type, payload, metadata)

    def error(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("ERROR", ctxt, publisher_id, event_type, payload, metadata)


def stdout_sink(closed: threading.Event) -> Callable[[dict[str, Any]], None]:
    """What the tail hands each notification to: one JSON line on standard
    output, flushed; once that output is closed under it, nothing more, and
    ``closed`` set so that the tail stops listening (a notification that
    could not be printed is dropped, not handed back to be redelivered)."""

    def _print(note: dict[str, Any]) -> None:
        if closed.is_set():
            return
        try:
            print(json.dumps(note, default=str), flush=True)
        except BrokenPipeError:
            closed.set()

    return _print


def listen(
    transport: oslo_messaging.Transport,
    topic: str,
    sink: Callable[[dict[str, Any]], None],
    pool: str | None = None,
    events: Sequence[str] = (),
) -> oslo_messaging.server.MessageHandlingServer:
    """Start a listener of ``topic`` (its own ``pool``) handing what arrives to ``sink``."""
    targets = [oslo_messaging.Target(topic=topic)]
    listener = oslo_messaging.get_notification_listener(
        transport,
        targets,
        [NotificationCollector(sink, events)],
        pool=pool or fresh_pool(),
    )
    listener.start()
    return listener


def tail_topic(conf: cfg.ConfigOpts, notification_format: str | None) -> str:
    """The topic to read: the versioned one if ``notification_format`` (``--format``)
    says ``versioned``, or if it is unset and the scheduler publishes only those."""
    chosen = notification_format or conf.notifications.format
    return (
        conf.notifications.versioned_topic if chosen == "versioned" else conf.notifications.topic
    )


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opts(
        [
            cfg.StrOpt(
                "pool",
                help="Listener pool name (default: a fresh one, whose queue is deleted "
                "when the tail stops; a named pool's queue is kept for the next tail).",
            ),
            cfg.StrOpt(
                "format",
                choices=["unversioned", "versioned"],
                help="Which notifications to print: the legacy ones ([notifications] "
                "topic) or the versioned ones ([notifications] versioned_topic). "
                "Default: versioned if [notifications] format is versioned, else unversioned.",
            ),
            cfg.MultiStrOpt(
                "event",
                default=[],
                help="Print only the event types this shell-style pattern matches "
                "(e.g. 'scheduler.resize.*'); repeat for several. Default: all.",
            ),
        ]
    )
    conf = _cli.parse(argv, prog="scheduler-notify-tail", description=__doc__.split("\n")[0])
    log.setup(level="WARNING", process="scheduler-notify-tail")
    transport = rpc.get_notification_transport(conf)  # connects only when listening
    url = conf.oslo_messaging_notifications.transport_url  # None: transport_url's
    broker.reach(conf, BROKER_TIMEOUT, url=url)

    pool = conf.pool or fresh_pool()
    topic = tail_topic(conf, conf.format)
    closed = threading.Event()
    listener = listen(transport, topic, stdout_sink(closed), pool, conf.event)

    def _stop() -> None:
        listener.stop()
        listener.wait()
        transport.cleanup()
        if not conf.pool:  # its own queue: nobody else reads it
            broker.delete_queues(conf, [pool], url=url)

    signum = wait_for_signal(_stop, closed)
    return _cli.exit_status(signum) if signum else _cli.stdout_gone()


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("scheduler-notify-tail", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
