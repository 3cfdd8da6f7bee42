"""Notifications: ``scheduler.<event>.start`` / ``.end`` and failures at ERROR.

Published as oslo.messaging's Notifier (driver ``messagingv2``) publishes
them (over RabbitMQ on a channel of the notifier's own,
:mod:`scheduler.notify_transport`, which sends the same messages), in two
formats (``[notifications] format``: ``unversioned``, ``versioned`` or
``both``, the default): the legacy payloads on ``[notifications] topic``,
publisher id ``scheduler.<host>``, failures as ``scheduler.<action>`` at
ERROR; and the versioned ones (:mod:`scheduler.notifications`, Nova's
envelope) on ``[notifications] versioned_topic``, publisher id
``scheduler-worker:<host>``, failures as ``scheduler.<action>.error``. A
request describes a notification once, by its payload object; the notifier's
thread makes each format from it and publishes each.
:meth:`Notifier.action` makes the pairing a structural guarantee: the
``.end`` is sent in a ``finally``, so every ``.start`` has its ``.end`` even
when the request fails, in each format.

Publishing is off the request's path: the request only queues the
notification and one thread of the notifier's own publishes them (on the
channel, what queued up meanwhile as one batch, one wait for the broker's
confirms; see :data:`LINGER`), in the order queued (a ``.start`` always goes out before its
``.end``), each in the logging context of the request that sent it. The
queue is bounded (``queue_size``): when it is full, the request waits for
room, so a notification is never dropped for lack of it.
:meth:`Notifier.stop` publishes what is queued before it returns; whatever
is notified after that is published on the caller's thread.

With no consumer, the broker keeps every notification: the rabbit driver
declares ``<topic>.<priority>`` (``notifications.info``, ...) so that a
consumer that joins later finds what it missed, and offers no option to
bound that queue (its quorum options bound only what is held in memory). A
queue argument of the project's own would clash with the driver's declare,
so the bound is a RabbitMQ policy, :func:`queue_policy` (applied with
``rabbitmqctl set_policy``, see the README): at most ``max_length``
messages, the oldest dropped first, in each queue of both topics.
"""

from __future__ import annotations

import contextvars
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import oslo_messaging

from scheduler.log import get_logger, masked
from scheduler.notifications import EventPayload
from scheduler.notify_transport import NotificationChannel, Outgoing, context, message

LOG = get_logger(__name__)

#: The name of the policy :func:`queue_policy` gives.
POLICY_NAME = "scheduler-notifications"


def queue_policy(topics: str | Sequence[str], max_length: int) -> list[str]:
    """``rabbitmqctl set_policy`` arguments (after ``-p VHOST``) that bound every
    notification queue of ``topics`` (``<topic>.info``, ``<topic>.error``, ...,
    classic or quorum; the legacy topic and the versioned one) to
    ``max_length`` messages each, dropping the oldest."""
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, not {max_length}")
    names = [topics] if isinstance(topics, str) else list(topics)
    if not names:
        raise ValueError("name at least one topic")
    definition = json.dumps({"max-length": max_length, "overflow": "drop-head"})
    pattern = "^(" + "|".join(re.escape(name) for name in names) + ")\\.[a-z]+$"
    return ["--apply-to", "queues", POLICY_NAME, pattern, definition]


#: Notifications waiting to be published, at most (then a request waits).
QUEUE_SIZE = 1000


@dataclass(frozen=True)
class Route:
    """Where a notification of another format than the scheduler's own goes:
    its publisher id, exchange and topic (for example Nova's,
    :mod:`scheduler.nova_compat.notifications`)."""

    publisher_id: str
    exchange: str
    topic: str


@dataclass(frozen=True)
class Foreign:
    """A notification of another format: its route and what makes its payload
    (called on the notifier's thread, once)."""

    route: Route
    make: Callable[[], dict[str, Any]]


#: One notification to publish: the logging context it was sent in, then
#: priority, request context, event type and payload (the scheduler's own, or
#: another format's).
_Pending = tuple[contextvars.Context, str, Any, str, EventPayload | Foreign]

#: Notifications the publisher thread takes off the queue per wake-up, at most.
BATCH = 64

#: Seconds the publisher thread waits, once woken, for more notifications to
#: publish in the same batch (a notification goes out that much later; a
#: batch is one wait for the broker's confirms, and one wake-up of the thread
#: instead of one per notification).
LINGER = 0.02


@dataclass(frozen=True)
class _Target:
    """Where the notification channel publishes one format (exchange None:
    the control exchange)."""

    publisher_id: str
    topic: str
    exchange: str | None = None


#: The values of ``[notifications] format``, each with what it publishes
#: (the config option's choices).
FORMATS = {
    "unversioned": "only the legacy payloads, on [notifications] topic",
    "versioned": "only the versioned payloads, on [notifications] versioned_topic",
    "both": "each notification in both formats (as Nova's default)",
}


def versioned_event_type(priority: str, event_type: str) -> str:
    """The versioned name of an event: a failure (``scheduler.resize`` at
    ERROR in the legacy format) is ``scheduler.resize.error``, as Nova names
    its versioned error events; the others keep their name."""
    return f"{event_type}.error" if priority == "error" else event_type


class _Shared:
    """What the notifications of one batch share, made once for all of them:
    each request context as carried (:func:`context`), and the envelopes of
    the payload objects they share. Keyed by object id: it lives only while
    the batch, which holds every one of those objects, is made."""

    def __init__(self) -> None:
        self.contexts: dict[int, dict[str, Any]] = {}
        self.envelopes: dict[int, Any] = {}

    def context(self, ctxt: Any) -> dict[str, Any]:
        carried = self.contexts.get(id(ctxt))
        if carried is None:
            carried = self.contexts[id(ctxt)] = context(ctxt)
        return carried


class Notifier:
    def __init__(
        self,
        transport: oslo_messaging.Transport | None,
        host: str,
        topic: str = "notifications",
        enabled: bool = True,
        queue_size: int = QUEUE_SIZE,
        notification_format: str = "both",
        versioned_topic: str = "versioned_notifications",
        channel: NotificationChannel | None = None,
        service: str = "scheduler-worker",
    ) -> None:
        """``service`` names the publisher of the versioned notifications
        (``<service>:<host>``): ``scheduler-worker``, or ``scheduler-conductor``
        for the conductor's reconciler."""
        if notification_format not in FORMATS:
            raise ValueError(f"notification format must be one of {', '.join(FORMATS)}")
        wanted = enabled and transport is not None
        self._transport = transport if wanted else None
        #: oslo.messaging's Notifier of each route, when there is no channel.
        self._routes: dict[Route, oslo_messaging.Notifier] = {}

        def publisher(publisher_id: str, topic: str, formats: tuple[str, ...]) -> Any:
            if not wanted or notification_format not in formats:
                return None
            if channel is not None:
                return _Target(publisher_id, topic)
            return oslo_messaging.Notifier(
                transport, publisher_id=publisher_id, driver="messagingv2", topics=[topic]
            )

        # Each format's publisher: oslo.messaging's Notifier, or where the
        # notification channel publishes it.
        self._legacy: Any = publisher(f"scheduler.{host}", topic, ("unversioned", "both"))
        self._versioned: Any = publisher(
            f"{service}:{host}", versioned_topic, ("versioned", "both")
        )
        self._channel = channel if wanted else None
        self._channel_lock = threading.Lock()  # the publisher thread's, then a caller's after stop
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()  # guards the publisher's start and stop
        self._publisher: threading.Thread | None = None
        self._stopped = False

    def info(self, ctxt: Any, event_type: str, payload: EventPayload) -> None:
        self._emit("info", ctxt, event_type, payload)

    def error(self, ctxt: Any, event_type: str, payload: EventPayload) -> None:
        """A failure: ``event_type`` at ERROR (legacy), ``<event_type>.error`` (versioned)."""
        self._emit("error", ctxt, event_type, payload)

    def info_as(self, route: Route, ctxt: Any, event_type: str, make: Callable[[], Any]) -> None:
        """``event_type`` at INFO in another format: published on ``route`` alone,
        the payload made by ``make`` on the notifier's thread, in order with
        the scheduler's own notifications. Published whatever ``[notifications]
        format`` says, unless notifications are off. Without the notification
        channel (a transport other than RabbitMQ), oslo.messaging publishes it
        on the transport's control exchange: its Notifier names no other."""
        if self._transport is not None:
            self._emit("info", ctxt, event_type, Foreign(route, make))

    def stop(self, timeout: float = 30.0) -> None:
        """Publish every notification queued so far, then stop the publisher."""
        with self._lock:
            self._stopped = True
            publisher = self._publisher
            if publisher is not None:
                self._queue.put(None)
        if publisher is not None:
            publisher.join(timeout)
            if publisher.is_alive():
                LOG.warning("notifications_not_flushed", waiting=self._queue.qsize())
                return
        if self._channel is not None:  # a later notification opens it again
            with self._channel_lock:
                self._channel.close()

    def _emit(
        self, priority: str, ctxt: Any, event_type: str, payload: EventPayload | Foreign
    ) -> None:
        if self._legacy is None and self._versioned is None and not isinstance(payload, Foreign):
            return
        pending = (contextvars.copy_context(), priority, ctxt, event_type, payload)
        with self._lock:
            if not self._stopped:
                if self._publisher is None:
                    self._publisher = threading.Thread(
                        target=self._publish_queued, name="notifier", daemon=True
                    )
                    self._publisher.start()
                self._queue.put(pending)  # waits while the queue is full
                return
        self._publish([pending])  # stopped: on the caller's thread

    def _publish_queued(self) -> None:
        """Publish what has queued up, a batch (at most :data:`BATCH`) per
        wake-up, until :meth:`stop`'s None (always the last one queued)."""
        while True:
            batch = [self._queue.get()]
            if batch[0] is not None and self._channel is not None:
                time.sleep(LINGER)  # what the other requests notify meanwhile joins the batch
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._publish([pending for pending in batch if pending is not None])
            if batch[-1] is None:
                return

    def _publish(self, batch: list[_Pending]) -> None:
        if self._channel is None:
            for logging_context, *notification in batch:
                logging_context.run(self._send, *notification)
            return
        # What the batch's notifications share is made once: a request's
        # context (its .start and .end carry the same), and the payload
        # objects they share (its request spec). Each message's payload is
        # masked, a copy, so nothing shared leaves this batch.
        shared = _Shared()
        made: list[tuple[contextvars.Context, str, list[Outgoing]]] = [
            (pending[0], pending[3], pending[0].run(self._messages, *pending[1:], shared))
            for pending in batch
        ]
        try:
            with self._channel_lock:
                self._channel.publish([out for _, _, outs in made for out in outs])
        except Exception as exc:  # noqa: BLE001 - logged, the requests go on
            for logging_context, event_type, _ in made:
                logging_context.run(
                    LOG.warning, "notification_failed", event_type=event_type, error=repr(exc)
                )

    def _messages(
        self,
        priority: str,
        ctxt: Any,
        event_type: str,
        payload: EventPayload | Foreign,
        shared: _Shared | None = None,
    ) -> list[Outgoing]:
        """The messages of one notification, each format made once (the legacy
        one first), as the channel publishes them; ``shared``: what the batch's
        notifications made already (see :class:`_Shared`)."""
        made = []
        shared = shared if shared is not None else _Shared()
        carried = shared.context(ctxt)
        for target, name, make in self._formats(priority, event_type, payload, shared.envelopes):
            try:
                body = message(carried, target.publisher_id, name, priority, masked(make()))
            except Exception as exc:  # noqa: BLE001 - logged, the other format goes on
                LOG.warning("notification_failed", event_type=name, error=repr(exc))
                continue
            made.append(Outgoing(f"{target.topic}.{priority}", body, target.exchange))
        return made

    def _formats(
        self,
        priority: str,
        event_type: str,
        payload: EventPayload | Foreign,
        envelopes: dict[int, Any] | None = None,
    ) -> Iterator[tuple[Any, str, Callable[[], dict[str, Any]]]]:
        """Each format's publisher, event type and payload maker, the legacy one
        first; another format's, alone. ``envelopes``: the nested objects'
        envelopes made already (see :meth:`NotificationObject.to_primitive`;
        only for a caller that copies what it is given)."""
        if isinstance(payload, Foreign):
            yield self._route(payload.route), event_type, payload.make
            return
        if self._legacy is not None:
            yield self._legacy, event_type, payload.legacy
        if self._versioned is not None:
            yield (
                self._versioned,
                versioned_event_type(priority, event_type),
                payload.to_primitive
                if envelopes is None
                else partial(payload.to_primitive, envelopes),
            )

    def _route(self, route: Route) -> Any:
        """Where ``route`` is published: by the channel, or by oslo.messaging."""
        if self._channel is not None:
            return _Target(route.publisher_id, route.topic, route.exchange)
        notifier = self._routes.get(route)
        if notifier is None:
            notifier = self._routes[route] = oslo_messaging.Notifier(
                self._transport,
                publisher_id=route.publisher_id,
                driver="messagingv2",
                topics=[route.topic],
            )
        return notifier

    def _send(
        self, priority: str, ctxt: Any, event_type: str, payload: EventPayload | Foreign
    ) -> None:
        """Each format made from ``payload`` once and published through
        oslo.messaging's Notifier (the legacy one first)."""
        for notifier, name, make in self._formats(priority, event_type, payload):
            self._send_one(notifier, priority, ctxt, name, make)

    @staticmethod
    def _send_one(
        notifier: oslo_messaging.Notifier,
        priority: str,
        ctxt: Any,
        event_type: str,
        make: Callable[[], dict[str, Any]],
    ) -> None:
        # A notification that cannot be sent must not fail the request it
        # describes (the decision and the claim already happened), nor keep
        # its other format from going out.
        try:
            getattr(notifier, priority)(ctxt, event_type, masked(make()))
        except Exception as exc:  # noqa: BLE001 - logged, the request goes on
            LOG.warning("notification_failed", event_type=event_type, error=repr(exc))

    @contextmanager
    def action(self, ctxt: Any, name: str, payload: EventPayload) -> Iterator[dict[str, Any]]:
        """``<name>.start`` now, ``<name>.end`` on leaving the block, however it is left.

        The block puts the outcome's fields into the yielded dict (``state``,
        ``selections`` ...); the ``.end`` carries ``payload`` with them
        replaced, ``state`` being ``scheduled`` unless the block said
        otherwise or raised (``error``).
        """
        self.info(ctxt, f"scheduler.{name}.start", payload)
        outcome: dict[str, Any] = {}
        try:
            yield outcome
        except BaseException:
            outcome.setdefault("state", "error")
            raise
        finally:
            outcome.setdefault("state", "scheduled")
            self.info(ctxt, f"scheduler.{name}.end", replace(payload, **outcome))  # type: ignore[type-var]
