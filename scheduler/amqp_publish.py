"""Publishing on a connection of the publisher's own, in oslo.messaging's
rabbit driver's wire format: a batch per publish, written in one system call,
the broker's confirms waited for once per batch.

oslo.messaging's rabbit driver asks for publisher confirms on every
connection and waits for each message's confirm before the next (about
0.2 ms of CPU and a broker round trip per message, through its connection
pool and ``ensure``). :class:`Channel` publishes a batch back to back on a
kombu connection of its own instead and waits once for the confirms of the
whole batch; what goes on the wire is what the driver sends (kombu's JSON
serializer, the same properties, exchange and routing key, the body made by
the caller with oslo.messaging's own helpers: :mod:`scheduler.notify_transport`
for notifications, :func:`cast` for RPC casts).

Delivery: with confirms, :meth:`Channel.publish` returns once the broker has
acknowledged every message of the batch, else raises; a connection lost
before that is opened again (kombu's ``ensure_connection``, with
``[oslo_messaging_rabbit]`` retry intervals) and the whole batch published
again, so a message can arrive twice, never not at all unless the publish
raised. :class:`SharedChannel` lets many threads publish on one channel: what
they publish while a batch waits for its confirms goes out as the next batch,
under one wait (a group commit).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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


class _Kept:
    """Stands in for py-amqp's transport under a frame writer: keeps each
    frame (a copy: the writer reuses its buffer)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> None:
        self.parts.append(bytes(data))


@dataclass(frozen=True)
class Outgoing:
    """One message to publish: its routing key (a notification's
    ``<topic>.<priority>``, a cast's ``<topic>.<server>``), its body and the
    exchange it goes to (None: the control exchange)."""

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


class Channel:
    """Publishes batches of messages on a connection of its own (one thread
    at a time: :class:`SharedChannel` for many)."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        url: str | None = None,
        confirm: bool = True,
        retry: int | None = None,
        declare_queues: bool = True,
        kind: str = "message",
    ) -> None:
        """``retry``: how many times a batch is published again after a lost
        connection (None or below 0: always); ``declare_queues``: declare the
        queue each routing key names (as the notification driver does; an
        RPC cast declares only the exchange); ``kind`` names the messages in
        logs and errors."""
        parsed = oslo_messaging.TransportURL.parse(conf, url)
        rabbit = conf.oslo_messaging_rabbit
        self._urls = kombu_urls(parsed)
        self._ssl = broker._ssl(conf)
        self._confirm = confirm
        self._max_retries = None if retry is None or retry < 0 else retry
        self._declare_queues = declare_queues
        self._kind = kind
        self._lost_event = f"{kind}_connection_lost"
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
                    self._lost_event,
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
        if not self._declare_queues or (exchange.name, routing_key) in self._declared:
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
            raise RuntimeError(f"the broker refused {len(nacked)} {self._kind}(s) (nack)")

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


class _Ticket:
    """One caller's messages in a :class:`SharedChannel`, and how their batch went."""

    __slots__ = ("done", "error", "messages")

    def __init__(self, messages: Sequence[Outgoing]) -> None:
        self.messages = messages
        self.done = False
        self.error: BaseException | None = None


class SharedChannel:
    """A :class:`Channel` (made on first use by ``make``) that many threads
    publish on. A caller's messages join those queued by the others; the
    first caller to get the channel publishes all that are queued as one
    batch (one wait for the confirms) and hands each caller its outcome, so
    the callers that queued while a batch was out go together in the next
    one. :meth:`publish` returns when the caller's messages are confirmed,
    or raises what their batch raised."""

    def __init__(self, make: Callable[[], Channel]) -> None:
        self._make = make
        self._channel: Channel | None = None
        self._queued: list[_Ticket] = []
        self._queue_lock = threading.Lock()
        self._publish_lock = threading.Lock()

    def publish(self, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        ticket = _Ticket(messages)
        with self._queue_lock:
            self._queued.append(ticket)
        with self._publish_lock:
            if not ticket.done:  # else published by another caller's batch
                with self._queue_lock:
                    batch, self._queued = self._queued, []
                error: BaseException | None = None
                try:
                    if self._channel is None:
                        self._channel = self._make()
                    self._channel.publish([m for t in batch for m in t.messages])
                except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                    error = exc
                for queued in batch:
                    queued.error, queued.done = error, True
        if ticket.error is not None:
            raise ticket.error

    def close(self) -> None:
        with self._publish_lock:
            if self._channel is not None:
                self._channel.close()


def cast(prepared: Any, ctxt: Any, method: str, **kwargs: Any) -> Outgoing:
    """The message oslo.messaging's ``prepared.cast(ctxt, method, **kwargs)``
    publishes over the rabbit driver (``prepared``: an RPC client's
    ``prepare()``), made with oslo.messaging's own steps: the message (method,
    its arguments serialized, namespace, version), the version cap checked
    (:class:`oslo_messaging.RPCVersionCapError` above it), a ``_unique_id``,
    the context serialized and packed into ``_context_*`` keys, the
    ``oslo.version`` / ``oslo.message`` envelope; to the target's exchange
    (None: the control exchange) with routing key ``<topic>.<server>``
    (``<topic>`` without a server)."""
    msg = prepared._make_message(ctxt, method, kwargs)
    msg_ctxt = prepared.serializer.serialize_context(ctxt)
    prepared._check_version_cap(msg.get("version"))
    rpc_amqp._add_unique_id(msg)
    rpc_amqp.pack_context(msg, msg_ctxt)
    target = prepared.target
    if target.fanout:
        raise ValueError("a fanout cast is not published on a channel")
    key = f"{target.topic}.{target.server}" if target.server else target.topic
    return Outgoing(key, rpc_common.serialize_msg(msg), target.exchange)


def cast_channel_for(
    transport: oslo_messaging.Transport | None, retry: int | None = None
) -> SharedChannel | None:
    """A channel for RPC casts over ``transport`` (its URL and options; casts
    with confirms, a batch published again up to ``retry`` times after a lost
    connection, None: always, as the rabbit driver's), made on first use; None
    when the transport is not a RabbitMQ broker's (the in-process fake
    transport: oslo.messaging casts then)."""
    driver = getattr(transport, "_driver", None)
    url = getattr(driver, "_url", None)
    if transport is None or not isinstance(url, oslo_messaging.TransportURL):
        return None
    if url.transport not in RABBIT:
        return None
    conf = transport.conf
    shown = str(url)
    return SharedChannel(
        lambda: Channel(conf, shown, retry=retry, declare_queues=False, kind="cast")
    )
