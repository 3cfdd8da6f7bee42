"""The broker as a client command and a daemon see it from outside oslo.messaging.

oslo.messaging's rabbit driver retries a connection for ever (a command whose
broker is down would wait without end, whatever its ``--timeout``), and a call
to a topic nothing consumes waits the whole ``rpc_response_timeout``. So a
client command asks first, over one short AMQP connection of its own
(:func:`reach`): is the broker there, with these credentials and this vhost,
and (for a call) does something consume the topic? Each failure is one typed
error naming the masked URL.

:func:`delete_queues` removes the queues a process owned alone (its RPC
server queue, a listener pool of its own) when it stops: the driver declares
them without an expiry, and a queue declared again with other arguments is
refused by RabbitMQ (``PRECONDITION_FAILED``), so the process that owns one
deletes it, unless another process still consumes it.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import amqp
import oslo_messaging
from oslo_config import cfg

from scheduler import log
from scheduler.exceptions import BrokerUnreachable, NoConsumer
from scheduler.log import mask_secrets

LOG = log.get_logger("scheduler.broker")

#: Transports that have no broker to reach (the in-process fake).
_NO_BROKER = ("fake",)


def _url(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.TransportURL:
    """``url`` (``transport_url`` when None: the notifications may have their own)."""
    return oslo_messaging.TransportURL.parse(conf, url)


def _shown(url: oslo_messaging.TransportURL) -> str:
    return mask_secrets(str(url))


@dataclass(frozen=True)
class BrokerHost:
    """One broker host of a transport URL, with what the URL leaves out
    filled in as the rabbit driver fills it (localhost, 5672, guest)."""

    hostname: str
    port: int
    username: str
    password: str
    virtual_host: str


def broker_hosts(url: oslo_messaging.TransportURL) -> list[BrokerHost]:
    """The broker hosts of ``url``, in its order (empty when it names none)."""
    return [
        BrokerHost(
            host.hostname or "localhost",
            host.port or 5672,
            host.username or "guest",
            host.password or "guest",
            url.virtual_host or "/",
        )
        for host in url.hosts
    ]


def _ssl(conf: cfg.ConfigOpts) -> bool | dict[str, Any]:
    """The TLS settings of ``[oslo_messaging_rabbit]`` as py-amqp takes them, so
    the check's connection verifies the broker as the driver's will: the CA
    (then the certificate is required, for the server's name), and the
    client's own certificate and key. (``ssl_version`` is left to the
    default: the handshake picks the best both sides speak.)"""
    try:
        rabbit = conf.oslo_messaging_rabbit
        if not rabbit.ssl:
            return False
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):  # no transport built yet
        return False
    params: dict[str, Any] = {}
    if rabbit.ssl_key_file:
        params["keyfile"] = rabbit.ssl_key_file
    if rabbit.ssl_cert_file:
        params["certfile"] = rabbit.ssl_cert_file
    if rabbit.ssl_ca_file:
        params["ca_certs"] = rabbit.ssl_ca_file
        params["cert_reqs"] = ssl.CERT_REQUIRED
        params["server_hostname"] = getattr(rabbit, "ssl_server_hostname", None)
    return params or True


@contextmanager
def _connected(
    conf: cfg.ConfigOpts, timeout: float, url_text: str | None = None
) -> Iterator[amqp.Connection]:
    """One AMQP connection to the first broker host that takes it within
    ``timeout`` seconds in all.

    :raises BrokerUnreachable: none did (the last host's error).
    """
    url = _url(conf, url_text)
    deadline = time.monotonic() + timeout
    reason = "no broker host in the transport URL"
    for host in broker_hosts(url):
        left = deadline - time.monotonic()
        if left <= 0:
            reason = f"no answer within {timeout:g} s"
            break
        conn = amqp.Connection(
            host=f"{host.hostname}:{host.port}",
            userid=host.username,
            password=host.password,
            virtual_host=host.virtual_host,
            ssl=_ssl(conf),
            connect_timeout=left,
            read_timeout=left,
            write_timeout=left,
        )
        try:
            conn.connect()
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
            reason = " ".join(str(exc).split()) or type(exc).__name__
            conn.collect()
            continue
        try:
            yield conn
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing anyway
                conn.collect()
        return
    raise BrokerUnreachable(url=_shown(url), reason=reason)


def reach(
    conf: cfg.ConfigOpts,
    timeout: float,
    topic: str | None = None,
    what: str = "consumer",
    url: str | None = None,
) -> None:
    """Return once the broker of ``conf``'s ``transport_url`` answers (and, with
    ``topic``, once that topic's queue has a consumer), within ``timeout`` s.

    ``url``: another transport URL than ``transport_url`` (the notifications').

    :raises BrokerUnreachable: the broker did not answer, or refused the login.
    :raises NoConsumer: nothing consumes ``topic`` (``what`` names what should).
    """
    parsed = _url(conf, url)
    if parsed.transport in _NO_BROKER:
        return
    with _connected(conf, timeout, url) as conn:
        if topic is None:
            return
        channel = conn.channel()
        try:
            _, _, consumers = channel.queue_declare(queue=topic, passive=True)
        except amqp.exceptions.NotFound:  # the queue was never declared
            consumers = 0
        if not consumers:
            raise NoConsumer(what=what, topic=topic, url=_shown(parsed))


def delete_queues(
    conf: cfg.ConfigOpts, names: Sequence[str], timeout: float = 5.0, url: str | None = None
) -> None:
    """Delete the queues ``names`` (those a stopping process owned alone) unless
    something still consumes one: a second process started with the same
    ``[DEFAULT] host`` by mistake serves the same server queue, and deleting it
    under that process would cut it off. One already gone is fine; a broker
    that does not answer leaves them (logged)."""
    if _url(conf, url).transport in _NO_BROKER or not names:
        return
    deleted, kept = [], []
    try:
        with _connected(conf, timeout, url) as conn:
            for name in names:
                channel = conn.channel()
                try:
                    channel.queue_delete(queue=name, if_unused=True)
                    channel.close()
                    deleted.append(name)
                except amqp.exceptions.NotFound:  # already gone (the channel closed with it)
                    pass
                except amqp.exceptions.PreconditionFailed:  # consumed by another process
                    kept.append(name)
    except BrokerUnreachable as exc:
        LOG.warning("queues_not_deleted", queues=list(names), error=exc.message)
        return
    if kept:
        LOG.warning(
            "queues_kept",
            queues=kept,
            reason="another process consumes them: is [DEFAULT] host set to the same "
            "name for two processes?",
        )
    LOG.info("queues_deleted", queues=deleted)
