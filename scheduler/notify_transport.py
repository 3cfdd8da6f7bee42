"""The notifications' own AMQP channel: oslo.messaging's wire format, one
connection, a batch per publish, the broker's confirms per batch.

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

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import amqp
import kombu
import oslo_messaging
from amqp.method_framing import frame_writer
from oslo_config import cfg
from oslo_messaging._drivers import amqp as rpc_amqp
from oslo_messaging._drivers import common as rpc_common
from oslo_messaging._drivers import impl_rabbit
from oslo_messaging.notify.notifier import _sanitize_context
from oslo_utils import timeutils

from scheduler import broker, log

LOG = log.get_logger(__name__)

#: The transports this channel speaks (oslo.messaging's names of its rabbit driver).
RABBIT = ("rabbit", "kombu", "amqp")

#: The properties kombu's producer gives a JSON message (as the rabbit driver
#: publishes it: persistent, no headers of its own).
_PROPERTIES: dict[str, Any] = {
    "content_type": "application/json",
    "content_encoding": "utf-8",
    "application_headers": {},
    "delivery_mode": 2,
    "priority": 0,
}

#: Seconds a batch waits for its confirms before the connection is taken as lost.
CONFIRM_TIMEOUT = 30.0


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


class _Kept:
    """Stands in for py-amqp's transport under a frame writer: keeps each
    frame (a copy: the writer reuses its buffer)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> None:
        self.parts.append(bytes(data))


@dataclass(frozen=True)
class Outgoing:
    """One message to publish: routing key ``<topic>.<priority>``, its body and
    the exchange it goes to (None: the control exchange)."""

    routing_key: str
    body: dict[str, Any]
    exchange: str | None = None


def kombu_urls(url: oslo_messaging.TransportURL) -> list[str]:
    """One kombu URL per broker host of ``url`` (kombu fails over in order)."""
    vhost = quote(url.virtual_host or "/", safe="")
    return [
        "pyamqp://{}:{}@{}:{}/{}".format(
            quote(host.username, safe=""),
            quote(host.password, safe=""),
            host.hostname,
            host.port,
            quote(host.virtual_host, safe=""),
        )
        for host in broker.broker_hosts(url)
    ] or [f"pyamqp://guest:guest@localhost:5672/{vhost}"]


class NotificationChannel:
    """Publishes batches of notifications on a connection of its own (the
    notifier's thread alone uses it)."""

    def __init__(self, conf: cfg.ConfigOpts, url: str | None = None, confirm: bool = True) -> None:
        parsed = oslo_messaging.TransportURL.parse(conf, url)
        rabbit = conf.oslo_messaging_rabbit
        self._urls = kombu_urls(parsed)
        self._ssl = broker._ssl(conf)
        self._confirm = confirm
        retry = conf.oslo_messaging_notifications.retry
        self._max_retries = None if retry is None or retry < 0 else retry
        self._intervals = {
            "interval_start": rabbit.rabbit_retry_interval,
            "interval_step": rabbit.rabbit_retry_backoff,
            "interval_max": rabbit.rabbit_interval_max,
        }
        self._durable = rabbit.amqp_durable_queues or rabbit.rabbit_quorum_queue
        self._auto_delete = rabbit.amqp_auto_delete
        self._control_exchange = conf.control_exchange
        #: The exchanges published on, by name (the control exchange, and any
        #: other an :class:`Outgoing` names), as the rabbit driver declares them.
        self._exchanges: dict[str, kombu.Exchange] = {}
        self._queue_arguments = impl_rabbit._get_queue_arguments(
            rabbit.rabbit_ha_queues,
            0,
            rabbit.rabbit_quorum_queue,
            impl_rabbit.QuorumMemConfig(
                rabbit.rabbit_quorum_delivery_limit,
                rabbit.rabbit_quorum_max_memory_length,
                rabbit.rabbit_quorum_max_memory_bytes,
            ),
            False,
        )
        self._compression = rabbit.kombu_compression
        self._shown = broker._shown(parsed)
        self._conn: kombu.Connection | None = None
        self._channel: Any = None
        self._producer: kombu.Producer | None = None
        #: Exchanges, and (exchange, routing key) queues, this connection declared.
        self._declared: set[str | tuple[str, str]] = set()
        self._sent = 0  # delivery tags given on this channel
        self._acked = 0  # the highest one the broker confirmed
        self._nacked: list[int] = []
        self._writer: tuple[Any, _Kept, Any] | None = None  # connection, kept, its writer
        probe = kombu.Connection(self._urls[0])  # not connected: its error classes
        self._recoverable = (
            *probe.recoverable_connection_errors,
            *probe.recoverable_channel_errors,
            TimeoutError,
            OSError,
        )

    def publish(self, batch: Sequence[Outgoing]) -> None:
        """Publish ``batch`` in order; with confirms, return once the broker
        holds all of it. A connection lost on the way is opened again and
        the batch published again (at most ``retry`` times, ``-1``: always).

        :raises Exception: the broker could not be reached within the retries,
            or refused a message (a nack).
        """
        if not batch:
            return
        attempt = 0
        while True:
            try:
                self._publish_once(batch)
                return
            except self._recoverable as exc:
                attempt += 1
                self._drop_connection()
                if self._max_retries is not None and attempt > self._max_retries:
                    raise
                LOG.warning(
                    "notification_connection_lost",
                    url=self._shown,
                    error=repr(exc),
                    attempt=attempt,
                    batch=len(batch),
                )

    def close(self) -> None:
        self._drop_connection()

    # -- one attempt ---------------------------------------------------------

    def _publish_once(self, batch: Sequence[Outgoing]) -> None:
        producer = self._connected()
        for exchange, key in {(out.exchange, out.routing_key) for out in batch}:
            self._declare(self._exchange(exchange), key)
        first = self._sent + 1
        with self._corked():
            for out in batch:
                self._publish_one(producer, out)
        if self._confirm:
            self._wait_confirms(first)

    def _exchange(self, name: str | None) -> kombu.Exchange:
        """The topic exchange ``name`` (None: the control exchange)."""
        name = name or self._control_exchange
        exchange = self._exchanges.get(name)
        if exchange is None:
            exchange = self._exchanges[name] = kombu.Exchange(
                name=name, type="topic", durable=self._durable, auto_delete=self._auto_delete
            )
        return exchange

    def _declare_exchange(self, exchange: kombu.Exchange) -> None:
        """``exchange``, once per connection."""
        if exchange.name not in self._declared:
            exchange(self._channel).declare()
            self._declared.add(exchange.name)

    def _declare(self, exchange: kombu.Exchange, routing_key: str) -> None:
        """``exchange`` and the queue the rabbit driver declares for
        ``routing_key``, bound to it: each once per connection."""
        self._declare_exchange(exchange)
        if (exchange.name, routing_key) in self._declared:
            return
        kombu.Queue(
            name=routing_key,
            exchange=exchange,
            routing_key=routing_key,
            durable=exchange.durable,
            auto_delete=exchange.auto_delete,
            queue_arguments=self._queue_arguments,
        )(self._channel).declare()
        self._declared.add((exchange.name, routing_key))

    @contextmanager
    def _corked(self) -> Iterator[None]:
        """The frames the block writes, gathered and sent in one write (one
        system call per batch instead of one per message): py-amqp's frame
        writer is, for the block, one over a transport that keeps what it is
        given (made once per connection)."""
        assert self._conn is not None
        raw = self._conn.connection
        if self._writer is None or self._writer[0] is not raw:
            kept = _Kept()
            self._writer = (raw, kept, frame_writer(raw, kept))
        _, kept, writer = self._writer
        kept.parts.clear()
        plain, raw.frame_writer = raw.frame_writer, writer
        try:
            yield
        finally:
            raw.frame_writer = plain
        raw.transport.write(b"".join(kept.parts))

    def _publish_one(self, producer: kombu.Producer | None, out: Outgoing) -> None:
        exchange = self._exchange(out.exchange)
        if producer is None:
            self._channel.basic_publish(
                amqp.Message(json.dumps(out.body).encode(), **_PROPERTIES),
                exchange=exchange.name,
                routing_key=out.routing_key,
            )
        else:  # compressed: kombu's producer adds its headers
            producer.publish(
                out.body,
                exchange=exchange,
                routing_key=out.routing_key,
                mandatory=False,
                expiration=None,
                compression=self._compression,
            )
        self._sent += 1

    def _wait_confirms(self, first: int) -> None:
        assert self._conn is not None
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        while self._acked < self._sent:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no confirm from the broker within {CONFIRM_TIMEOUT:g} s")
            self._conn.drain_events(timeout=left)
        nacked = [tag for tag in self._nacked if tag >= first]
        self._nacked.clear()
        if nacked:
            raise RuntimeError(f"the broker refused {len(nacked)} notification(s) (nack)")

    def _connected(self) -> kombu.Producer | None:
        """Connect if not connected; kombu's producer if the messages are
        compressed (else they are published on the channel as they are)."""
        if self._channel is not None:
            return self._producer
        conn = kombu.Connection(self._urls, ssl=self._ssl, failover_strategy="round-robin")
        conn.ensure_connection(max_retries=self._max_retries, **self._intervals)
        channel = conn.channel()
        self._conn, self._channel = conn, channel
        self._sent = self._acked = 0
        self._declared.clear()
        self._declare_exchange(self._exchange(None))
        if self._confirm:
            channel.events["basic_ack"].add(self._on_ack)
            channel.events["basic_nack"].add(self._on_nack)
            channel.confirm_select()
        self._producer = kombu.Producer(channel) if self._compression else None
        return self._producer

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._acked = max(self._acked, delivery_tag)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        first = self._acked + 1 if multiple else delivery_tag
        self._nacked.extend(range(first, delivery_tag + 1))
        self._acked = max(self._acked, delivery_tag)

    def _drop_connection(self) -> None:
        conn, self._conn, self._channel, self._producer = self._conn, None, None, None
        if conn is not None:
            try:
                conn.release()
            except Exception:  # noqa: BLE001 - it is gone anyway
                pass


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
