"""What the conductor's operations share.

:func:`request_context` is the context a record's request is sent and
re-sent with. :func:`wait_for` is the one wait: every ``--wait`` of a
command, a boot's wait for its instances and a drain's rounds poll through
it, so a timeout, a poll interval and a store that restarts meanwhile mean
the same everywhere.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from scheduler.exceptions import StoreUnavailable
from scheduler.objects import InstanceRecord
from scheduler.rpc import RequestContext
from scheduler.store import InstanceStore

T = TypeVar("T")

#: The least a wait sleeps before asking a store that did not answer again.
STORE_DOWN_POLL = 0.5


def request_context(record: InstanceRecord) -> RequestContext:
    """The context a record's request is (re-)sent with: its own request id,
    and the rights it was made with."""
    spec = record.request_spec or {}
    return RequestContext(
        request_id=record.request_id or f"req-{uuidlib.uuid4()}",
        user_id=spec.get("user_id"),
        project_id=spec.get("project_id"),
        roles=list(record.roles),
        is_admin=record.is_admin,
    )


def wait_for(
    read: Callable[[], T],
    done: Callable[[T], bool],
    timeout: float,
    poll: float = 0.1,
    *,
    store_down: Callable[[StoreUnavailable], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[T, bool]:
    """Call ``read`` every ``poll`` seconds until ``done`` holds of what it
    returned, or ``timeout`` seconds have passed; (what it returned last,
    timed out?). ``read`` is called at least once, ``done`` after each call.

    A store that does not answer (:class:`StoreUnavailable`) ends the wait,
    unless ``store_down`` is given: then it is told, and the store asked
    again (after at least :data:`STORE_DOWN_POLL` seconds: a store that
    restarts is not hammered) until the timeout, when the error is raised.
    ``sleep`` and ``monotonic`` are the clock's (a test plays them).
    """
    deadline = monotonic() + timeout
    while True:
        try:
            value = read()
        except StoreUnavailable as exc:
            if store_down is None or monotonic() >= deadline:
                raise
            store_down(exc)
            sleep(max(poll, STORE_DOWN_POLL))
            continue
        if done(value):
            return value, False
        if monotonic() >= deadline:
            return value, True
        sleep(poll)


def wait_until(
    store: InstanceStore,
    uuids: Sequence[str],
    until: Callable[[InstanceRecord], bool],
    timeout: float,
    poll: float = 0.1,
) -> tuple[list[InstanceRecord], bool]:
    """Poll the records of ``uuids`` until ``until`` holds for each of those
    still there; (the records, timed out?)."""
    return wait_for(
        lambda: store.list_instances(uuids),
        lambda found: all(until(r) for r in found),
        timeout,
        poll,
    )


def wait_for_record(
    store: InstanceStore,
    uuid: str,
    until: Callable[[InstanceRecord], bool],
    timeout: float,
    poll: float = 0.1,
) -> tuple[InstanceRecord, bool]:
    """Poll one record until ``until`` holds; (the record, timed out?)."""
    return wait_for(lambda: store.get_instance(uuid), until, timeout, poll)
