"""What the scheduler, the conductor and the computes do with the service records.

:class:`ServiceResolver`: the oslo.messaging server a host's compute listens
on, as its record says (every compute client addresses hosts through one).

:func:`set_host_disabled`: taking a host out of scheduling and putting it
back: its service's disabled flag and reason, and its root provider's
``COMPUTE_STATUS_DISABLED`` trait, in one atomic store step
(:meth:`~scheduler.store.base.ServiceStore.set_service_disabled`). Used by
``scheduler-admin host disable|enable`` and by the conductor's drain
(:mod:`conductor_stub.drain`), which disables the host before it moves
anything off it.

:func:`known_host`: the service of a host name a command was given, or a
refusal; every command that takes a host name checks it there.
"""

from __future__ import annotations

import threading
import time

from scheduler.exceptions import InvalidRequest, NotFound
from scheduler.store.base import ServiceStore
from scheduler.store.records import Service

#: The longest host name a service may have (Nova's ``services.host`` column).
HOST_NAME_MAX = 255
#: The longest reason a disabled service keeps (Nova's ``disabled_reason``).
DISABLED_REASON_MAX = 255


def known_host(store: ServiceStore, hostname: str) -> Service:
    """The service of ``hostname``: :class:`NotFound` when no service has that
    name (``*``, a typo, a host never started), :class:`InvalidRequest` for a
    name longer than any host's (not looked up, nor echoed whole)."""
    if len(hostname) > HOST_NAME_MAX:
        raise InvalidRequest(
            reason=f"a host name of {len(hostname)} characters (no host's is over {HOST_NAME_MAX})"
        )
    service = store.get_service(hostname)
    if service is None:
        raise NotFound(kind="host", ident=hostname)
    return service


def set_host_disabled(
    store: ServiceStore, hostname: str, disable: bool, reason: str | None = None
) -> tuple[Service, Service]:
    """Disable (with ``reason``) or enable one host's service: its flag and its
    root provider's status trait in one atomic store step. The service before
    and after; for an unknown host, :func:`known_host`'s refusal (nothing changed).
    Disabling a disabled host without a reason keeps the one it has."""
    before = known_host(store, hostname)
    if not disable:
        reason = None
    elif before.disabled and reason is None:
        reason = before.disabled_reason  # no new reason: disabling again changes nothing
    store.set_service_disabled(hostname, disable, reason)
    return before, store.get_service(hostname) or before


class ServiceResolver:
    """host name -> the oslo.messaging server name its compute service listens on.

    Cached; a miss re-reads the service record. A host with no record is
    addressed by its own name (one host per compute process, as in Nova).
    """

    def __init__(self, store: ServiceStore, ttl: float = 30.0) -> None:
        self._store = store
        self._ttl = ttl
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, host: str) -> str:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(host)
        if hit and now - hit[1] < self._ttl:
            return hit[0]
        service = self._store.get_service(host)
        server = service.rpc_server if service else host
        with self._lock:
            self._cache[host] = (server, now)
        return server
