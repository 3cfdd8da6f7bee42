"""Taking a host out of scheduling and putting it back: its service's disabled
flag and reason, and its root provider's ``COMPUTE_STATUS_DISABLED`` trait,
in one atomic store step (:meth:`~scheduler.store.base.ServiceStore.set_service_disabled`).

Used by ``scheduler-admin host disable|enable`` and by the conductor's drain
(:mod:`conductor_stub.drain`), which disables the host before it moves
anything off it.
"""

from __future__ import annotations

from scheduler.exceptions import NotFound
from scheduler.store.base import ServiceStore
from scheduler.store.records import Service


def set_host_disabled(
    store: ServiceStore, hostname: str, disable: bool, reason: str | None = None
) -> tuple[Service, Service]:
    """Disable (with ``reason``) or enable one host's service: its flag and its
    root provider's status trait in one atomic store step. The service before
    and after; :class:`NotFound` (nothing changed) for an unknown host.
    Disabling a disabled host without a reason keeps the one it has."""
    before = store.get_service(hostname)
    if before is None:
        raise NotFound(kind="host", ident=hostname)
    if not disable:
        reason = None
    elif before.disabled and reason is None:
        reason = before.disabled_reason  # no new reason: disabling again changes nothing
    store.set_service_disabled(hostname, disable, reason)
    return before, store.get_service(hostname) or before
