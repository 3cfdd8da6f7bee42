"""Transports, servers and the client targets: what every client and daemon
builds its RPC on (topics, the exceptions rebuilt on the caller's side, what
a send raises when the broker does not come back)."""

from __future__ import annotations

from collections.abc import Sequence

import kombu.exceptions
import oslo_messaging
from oslo_config import cfg

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


def get_server(
    transport: oslo_messaging.Transport,
    topic: str,
    server: str,
    endpoints: Sequence[object],
    access_policy: type | None = None,
) -> oslo_messaging.RPCServer:
    """An RPC server of ``endpoints``; ``access_policy``: oslo.messaging's (the
    compute's and the conductor's serve only their declared steps:
    :data:`scheduler.steps.ACCESS_POLICY`)."""
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
) -> oslo_messaging.RPCClient:
    """The oslo.messaging client a service's client class sends through, at
    ``version`` (each call prepares the version it needs)."""
    target = oslo_messaging.Target(topic=topic, version=version, server=server)
    return oslo_messaging.get_rpc_client(
        transport, target, serializer=ContextSerializer(), timeout=timeout, retry=retry
    )


def names_a_zone(selections: Sequence[Selection]) -> bool:
    """True if any of ``selections`` names an availability zone: a field that
    a compute or conductor older than its 1.2 refuses."""
    return any(s.availability_zone is not None for s in selections)
