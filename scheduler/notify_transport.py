"""The notifications' own AMQP channel (a :class:`scheduler.amqp_publish.Channel`):
oslo.messaging's wire format, one connection, a batch per publish, the
broker's confirms per batch.

oslo.messaging's ``Notifier`` (driver ``messagingv2``) costs a worker about
0.2 ms of CPU and a broker round trip per notification: every publish goes
through the driver's connection pool and ``ensure``, and waits for the
broker's confirm of that one message (the rabbit driver asks for publisher
confirms on every connection, with no option to turn them off). The worker's
notifier thread publishes what has queued up back to back instead, on a kombu
connection of its own, and waits once for the confirms of the whole batch.

What goes on the wire is what the messagingv2 driver sends, made with
oslo.messaging's own helpers (:func:`message`): the context sanitised as the
Notifier does it, packed into ``_context_*`` keys (once per notification,
for both formats), a ``_unique_id``, the
``oslo.version`` / ``oslo.message`` envelope, published with kombu's JSON
serializer on the control exchange with routing key ``<topic>.<priority>``.
As the driver does, the queue named by the routing key is declared (with the
driver's queue arguments: durable, HA or quorum as ``[oslo_messaging_rabbit]``
says) once per connection, so that notifications nobody consumes yet are
kept; :func:`scheduler.notifier.queue_policy` bounds it as before.

Delivery (``[notifications] publish_confirm``): with confirms, a batch is
done when the broker has acknowledged every message of it; a connection lost
before that is opened again (kombu's ``ensure_connection``, with
``[oslo_messaging_rabbit]`` retry intervals and ``[oslo_messaging_notifications]
retry``) and the whole batch published again, so a notification can arrive
twice, never not at all while the worker lives. Without confirms, a batch is
done once written to the socket: a broker that fails right after may lose
it. Either way the queue in the worker's memory is lost if the worker dies.
"""

from __future__ import annotations

import uuid
from typing import Any

import oslo_messaging
from oslo_config import cfg
from oslo_messaging._drivers import amqp as rpc_amqp
from oslo_messaging._drivers import common as rpc_common
from oslo_messaging.notify.notifier import _sanitize_context
from oslo_utils import timeutils

from scheduler.amqp_publish import RABBIT, Channel, Outgoing

__all__ = ["NotificationChannel", "Outgoing", "channel_for", "context", "message"]


def context(ctxt: Any) -> dict[str, Any]:
    """The request context as a notification carries it: sanitised as
    oslo.messaging's Notifier does (no token; a plain dict or None is
    dropped), packed into ``_context_*`` keys as its AMQP driver packs it.
    Made once per notification, for each of its formats (:func:`message`)."""
    safe = _sanitize_context(ctxt)
    packed: dict[str, Any] = {}
    rpc_amqp.pack_context(packed, safe if isinstance(safe, dict) else safe.to_dict())
    return packed


def message(
    context: dict[str, Any], publisher_id: str, event_type: str, priority: str, payload: Any
) -> dict[str, Any]:
    """The body the messagingv2 driver publishes for this notification, made
    as oslo.messaging's Notifier and AMQP driver make it (``context`` is
    :func:`context`'s, already packed)."""
    msg = {
        "message_id": str(uuid.uuid4()),
        "publisher_id": publisher_id,
        "event_type": event_type,
        "priority": priority.upper(),
        "payload": payload,
        "timestamp": str(timeutils.utcnow()),
    }
    rpc_amqp._add_unique_id(msg)
    msg.update(context)
    return rpc_common.serialize_msg(msg)


class NotificationChannel(Channel):
    """Publishes batches of notifications on a connection of its own (the
    notifier's thread alone uses it): the notification queues declared, a
    batch published again up to ``[oslo_messaging_notifications] retry``
    times."""

    def __init__(self, conf: cfg.ConfigOpts, url: str | None = None, confirm: bool = True) -> None:
        super().__init__(
            conf,
            url,
            confirm=confirm,
            retry=conf.oslo_messaging_notifications.retry,
            declare_queues=True,
            kind="notification",
        )


def channel_for(
    conf: cfg.ConfigOpts, transport: oslo_messaging.Transport | None
) -> NotificationChannel | None:
    """The channel for ``conf``'s notification transport, or None when the
    notifications go elsewhere than a RabbitMQ broker (the in-process fake
    transport: oslo.messaging's Notifier then publishes them)."""
    if transport is None:
        return None
    url = conf.oslo_messaging_notifications.transport_url
    if oslo_messaging.TransportURL.parse(conf, url).transport not in RABBIT:
        return None
    return NotificationChannel(conf, url, confirm=conf.notifications.publish_confirm)
