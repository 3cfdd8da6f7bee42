"""``scheduler-notify-tail``: print scheduler notifications as they arrive.

Listens on the notifications topic with its own pool (so it does not steal
messages from other consumers) and prints one JSON line per notification:
priority, event type, publisher, payload.
"""

from __future__ import annotations

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


class NotificationCollector:
    """A notification endpoint handing every notification to ``sink``."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        self._sink = sink
        self._lock = threading.Lock()

    def _record(self, priority: str, publisher_id: str, event_type: str, payload: Any) -> None:
        with self._lock:
            self._sink(
                {
                    "priority": priority,
                    "event_type": event_type,
                    "publisher_id": publisher_id,
                    "payload": payload,
                }
            )

    def info(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("INFO", publisher_id, event_type, payload)

    def warn(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("WARN", publisher_id, event_type, payload)

    def error(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._record("ERROR", publisher_id, event_type, payload)


def listen(
    transport: oslo_messaging.Transport,
    topic: str,
    sink: Callable[[dict[str, Any]], None],
    pool: str | None = None,
) -> oslo_messaging.server.MessageHandlingServer:
    targets = [oslo_messaging.Target(topic=topic)]
    listener = oslo_messaging.get_notification_listener(
        transport,
        targets,
        [NotificationCollector(sink)],
        pool=pool or f"tail-{uuidlib.uuid4().hex[:8]}",
    )
    listener.start()
    return listener


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opt(
        cfg.StrOpt(
            "pool",
            help="Listener pool name (default: a fresh one, whose queue is deleted "
            "when the tail stops; a named pool's queue is kept for the next tail).",
        )
    )
    conf = _cli.parse(argv, prog="scheduler-notify-tail", description=__doc__.split("\n")[0])
    log.setup(level="WARNING", process="scheduler-notify-tail")
    transport = rpc.get_notification_transport(conf)  # connects only when listening
    url = conf.oslo_messaging_notifications.transport_url  # None: transport_url's
    broker.reach(conf, BROKER_TIMEOUT, url=url)

    def _print(note: dict[str, Any]) -> None:
        print(json.dumps(note, default=str), flush=True)

    pool = conf.pool or f"tail-{uuidlib.uuid4().hex[:8]}"
    listener = listen(transport, conf.notifications.topic, _print, pool)

    def _stop() -> None:
        listener.stop()
        listener.wait()
        transport.cleanup()
        if not conf.pool:  # its own queue: nobody else reads it
            broker.delete_queues(conf, [pool], url=url)

    return _cli.exit_status(wait_for_signal(_stop))


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("scheduler-notify-tail", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
