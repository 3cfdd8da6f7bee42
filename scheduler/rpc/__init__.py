"""The RPC surface: transports, the context serializer, one client per service.

Each client has one method per remote call and pins the version it sends;
each server endpoint declares its Target version and accepts every 1.x it
knows. Typed objects are converted to primitives here, at the boundary, and
nowhere else.

Delivery is at most once for casts (oslo.messaging acknowledges before the
endpoint runs), so callers that must not lose work keep deadlines and
re-drive; every endpoint is idempotent per instance uuid.

The modules: :mod:`~scheduler.rpc.context` (the request context and its
serializer), :mod:`~scheduler.rpc.transport` (transports, servers, topics, the
client target), :mod:`~scheduler.rpc.expected` (what an endpoint's expected
errors send back), and one client per service
(:mod:`~scheduler.rpc.scheduler_client`, :mod:`~scheduler.rpc.compute_client`,
:mod:`~scheduler.rpc.conductor_client`). The names below are imported when
first used (:mod:`scheduler.lazy`), so a module that wants the context does not
load every client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler import lazy

if TYPE_CHECKING:
    from scheduler.rpc.compute_client import ComputeClient
    from scheduler.rpc.conductor_client import ConductorClient
    from scheduler.rpc.context import ContextSerializer, RequestContext
    from scheduler.rpc.expected import expected_exceptions
    from scheduler.rpc.scheduler_client import SchedulerClient
    from scheduler.rpc.transport import (
        ALLOWED_EXMODS,
        COMPUTE_TOPIC,
        CONDUCTOR_TOPIC,
        SCHEDULER_TOPIC,
        SEND_FAILURES,
        get_notification_transport,
        get_server,
        get_transport,
    )

__all__ = [
    "ALLOWED_EXMODS",
    "COMPUTE_TOPIC",
    "CONDUCTOR_TOPIC",
    "SCHEDULER_TOPIC",
    "SEND_FAILURES",
    "ComputeClient",
    "ConductorClient",
    "ContextSerializer",
    "RequestContext",
    "SchedulerClient",
    "expected_exceptions",
    "get_notification_transport",
    "get_server",
    "get_transport",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "ALLOWED_EXMODS": "scheduler.rpc.transport",
            "COMPUTE_TOPIC": "scheduler.rpc.transport",
            "CONDUCTOR_TOPIC": "scheduler.rpc.transport",
            "SCHEDULER_TOPIC": "scheduler.rpc.transport",
            "SEND_FAILURES": "scheduler.rpc.transport",
            "ComputeClient": "scheduler.rpc.compute_client",
            "ConductorClient": "scheduler.rpc.conductor_client",
            "ContextSerializer": "scheduler.rpc.context",
            "RequestContext": "scheduler.rpc.context",
            "SchedulerClient": "scheduler.rpc.scheduler_client",
            "expected_exceptions": "scheduler.rpc.expected",
            "get_notification_transport": "scheduler.rpc.transport",
            "get_server": "scheduler.rpc.transport",
            "get_transport": "scheduler.rpc.transport",
        },
    )
