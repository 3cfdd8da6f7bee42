"""Who may do what: the admin-only operations and request fields.

The scheduler trusts the request context its caller sends, as Nova's scheduler
trusts the conductor's: the API in front decides who is an admin and says so
in ``is_admin``. What is checked here is that the operations which reveal the
cloud's layout or bypass its placement rules are asked for in an admin
context:

* ``explain`` and ``run_filter`` — they name hosts, filters, traits and
  aggregates;
* forcing a host or node, or requesting a destination — they steer a request
  past the weighers (we differ from Nova, which also skips every host filter
  for a forced host: here a forced request still passes through every filter
  and the atomic claim; see :mod:`scheduler.request_filters.destination`).

A refusal is :class:`~scheduler.exceptions.Forbidden` with a message that
says what needs an admin context and names nothing of the cloud.

What a user may read about any failure is decided here too, in one place,
for the scheduler and the conductor alike (:func:`user_reason`): a fault or
an ERROR notification never names a host, filter, trait or aggregate; those
go to the admin-only details (:func:`admin_details`) and the logs.
"""

from __future__ import annotations

from typing import Any

from scheduler.exceptions import (
    Forbidden,
    InternalError,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    RequestTimedOut,
    SchedulerError,
    SchedulerUnavailable,
)
from scheduler.log import mask_secrets

#: Request spec fields only an admin may set, and what setting them means.
#: A field listed here that the request spec does not (yet) have is skipped,
#: so this is the one place to name a new admin-only field.
ADMIN_ONLY_FIELDS: dict[str, str] = {
    "force_hosts": "forcing a host",
    "force_nodes": "forcing a node",
    "requested_destination": "requesting a destination",
}


def is_admin(ctxt: Any) -> bool:
    """True only for a context that says ``is_admin`` (roles alone do not count)."""
    return getattr(ctxt, "is_admin", False) is True


def require_admin(ctxt: Any, action: str) -> None:
    """:class:`Forbidden` unless ``ctxt`` is an admin context."""
    if not is_admin(ctxt):
        raise Forbidden(reason=f"{action} requires an admin context")


def check_request(ctxt: Any, spec: Any) -> None:
    """:class:`Forbidden` when a non-admin request sets an admin-only field."""
    if is_admin(ctxt):
        return
    for name, action in ADMIN_ONLY_FIELDS.items():
        if getattr(spec, name, None):
            raise Forbidden(reason=f"{action} requires an admin context")


# --- what a user reads about a failure ----------------------------------------------

#: What a user reads when scheduling failed for a reason that is not theirs
#: to fix (an internal error); the error itself goes to the logs.
INTERNAL_ERROR_MESSAGE = InternalError.msg


def user_reason(exc: BaseException) -> str:
    """The part of a failure a user may read: the one place that decides it.

    No valid host is always the generic message (the reasons name hosts,
    filters, traits and aggregates: admin details); so are retries exhausted
    (the hosts tried are admin details) and a request the conductor re-drove
    until it gave up. Invalid input and refusals describe the request
    itself, and a scheduler that cannot reach its store says only that.
    Anything else is an internal error the user cannot act on.
    """
    if isinstance(exc, NoValidHost | MaxRetriesExceeded | RequestTimedOut):
        return exc.USER_MESSAGE
    if isinstance(exc, InvalidRequest | Forbidden | SchedulerUnavailable):
        return exc.message
    return INTERNAL_ERROR_MESSAGE


def admin_details(exc: BaseException) -> str:
    """The admin-only account of a failure (fault details, logs), with any
    password an error's text may quote masked."""
    if isinstance(exc, NoValidHost):
        return exc.details or NoValidHost.USER_MESSAGE
    if isinstance(exc, SchedulerError):
        return mask_secrets(exc.message)
    return mask_secrets(f"{type(exc).__name__}: {exc}")
