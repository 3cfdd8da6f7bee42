"""Transports, servers and the client targets: what every client and daemon
builds its RPC on (topics, the exceptions rebuilt on the caller's side, what
a send raises when the broker does not come back)."""

from __future__ import annotations

from collections.abc import Sequence

import kombu.exceptions
import oslo_messaging
from oslo_config import cfg
from oslo_messaging._drivers import amqpdriver

from scheduler.objects import Selection
from scheduler.rpc.context import ContextSerializer

#: Modules whose exceptions are rebuilt on the caller's side (oslo.messaging's
#: dispatcher: so that an older server's ``UnsupportedVersion`` arrives typed).
ALLOWED_EXMODS = ["scheduler.exceptions", "oslo_messaging.rpc.dispatcher"]

#: The default topics (``[scheduler] topic``, ``[compute] topic``, ``[conductor]
#: topic``): every daemon and client of one deployment reads them from its
#: config, so two deployments on one vhost keep apart by topic.
SCHEDULER_TOPIC = "scheduler"
COMPUTE_TOPIC = "compute"
CONDUCTOR_TOPIC = "conductor"


def get_transport(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.Transport:
    return oslo_messaging.get_rpc_transport(conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)


def get_notification_transport(
    conf: cfg.ConfigOpts, url: str | None = None
) -> oslo_messaging.Transport:
    return oslo_messaging.get_notification_transport(conf, url=url)


#: Seconds an idle RPC server's listener waits on the broker at most before it
#: looks again (oslo.messaging's rabbit listener: 5).
IDLE_POLL = 0.25


def prompt_stop(idle_poll: float = IDLE_POLL) -> None:
    """Make every RPC server of this process stop within ``idle_poll`` seconds.

    oslo.messaging's rabbit listener waits on the broker for twice as long
    after each empty wait, up to ``ACK_REQUEUE_EVERY_SECONDS_MAX`` (5 s), and
    its ``stop()`` returns only once that wait has ended: a daemon idle for a
    few seconds took up to 5 s to stop on SIGTERM. With the ceiling at
    ``idle_poll`` it stops within that, and an idle listener wakes
    1/``idle_poll`` times a second (each an empty read of its socket).
    Nothing else changes: the messages received before the stop are still
    served, acknowledged (or requeued) as before."""
    amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX = min(
        amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX, idle_poll
    )


def get_server(
    transport: oslo_messaging.Transport,
    topic: str,
    server: str,
    endpoints: Sequence[object],
    access_policy: type | None = None,
) -> oslo_messaging.RPCServer:
    """An RPC server of ``endpoints``; ``access_policy``: oslo.messaging's (the
    compute's and the conductor's serve only their declared steps:
    :data:`scheduler.steps.ACCESS_POLICY`). It stops within
    :data:`IDLE_POLL` seconds (:func:`prompt_stop`)."""
    prompt_stop()
    target = oslo_messaging.Target(topic=topic, server=server)
    return oslo_messaging.get_rpc_server(
        transport,
        target,
        list(endpoints),
        serializer=ContextSerializer(),
        access_policy=access_policy,
    )


#: What a send raises when the client was given ``retry`` and the broker did not
#: come back in that many attempts (the rabbit driver lets kombu's error through).
SEND_FAILURES: tuple[type[Exception], ...] = (
    oslo_messaging.MessageDeliveryFailure,
    kombu.exceptions.OperationalError,
)


def make_client(
    transport: oslo_messaging.Transport,
    topic: str,
    version: str,
    timeout: float | None,
    server: str | None = None,
    retry: int | None = None,
    version_cap: str | None = None,
) -> oslo_messaging.RPCClient:
    """The oslo.messaging client a service's client class sends through, at
    ``version`` (each call prepares the version it needs), never above
    ``version_cap`` (None: no cap)."""
    target = oslo_messaging.Target(topic=topic, version=version, server=server)
    return oslo_messaging.get_rpc_client(
        transport,
        target,
        serializer=ContextSerializer(),
        timeout=timeout,
        retry=retry,
        version_cap=version_cap,
    )


def names_a_zone(selections: Sequence[Selection]) -> bool:
    """True if any of ``selections`` names an availability zone: a field that
    a compute or conductor older than its 1.2 refuses."""
    return any(s.availability_zone is not None for s in selections)
