"""Typed failures of the scheduler, its store and its RPC surface.

Callers tell failures apart by type, never by message text. Every exception
that may cross the RPC boundary is listed in the endpoint's expected
exceptions so that oslo.messaging re-raises it on the caller's side without
logging a traceback on the server.
"""

from __future__ import annotations

from typing import Any


class SchedulerError(Exception):
    """Base of every error this project raises on purpose."""

    msg = "scheduler error"

    def __init__(self, message: str | None = None, **kwargs: object) -> None:
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.msg % kwargs if kwargs else self.msg
            except (KeyError, TypeError, ValueError):
                message = self.msg
        super().__init__(message)
        self.message = message


# --- request validation -------------------------------------------------------------


class InvalidRequest(SchedulerError):
    """A request spec (or another RPC argument) failed validation."""

    msg = "invalid request: %(reason)s"


class CannotResizeToSameFlavor(InvalidRequest):
    """A resize names the flavor the instance already has (Nova's compute API
    refuses it the same way; a cold migration is the move to its own flavor)."""

    msg = (
        "invalid request: instance %(uuid)s already has flavor %(flavor)s: resize to "
        "another flavor, or migrate it"
    )


class Forbidden(SchedulerError):
    """The request context lacks the role the operation needs."""

    msg = "forbidden: %(reason)s"


# --- scheduling outcomes ------------------------------------------------------------


class NoValidHost(SchedulerError):
    """Nothing fits. An expected outcome, not a crash.

    ``message`` is user-safe and generic; ``details`` holds the admin-only
    reasons (a count of hosts removed per reason, e.g.
    ``0/1200 hosts available: 800 insufficient MEMORY_MB, 100 disabled``).
    """

    USER_MESSAGE = "No valid host was found."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: str = "",
        reasons: dict[str, int] | None = None,
    ) -> None:
        super().__init__(self.USER_MESSAGE)
        self.details = details
        self.reasons = dict(reasons or {})
        #: The engine's decision traces up to the failure (the failed instance
        #: last), for ``explain`` and the logs. Local only: not sent over RPC.
        self.traces: list[Any] = []
        # What oslo.messaging sends across RPC, so the caller rebuilds it whole.
        self.kwargs = {"details": self.details, "reasons": self.reasons}


class SchedulerUnavailable(SchedulerError):
    """A call could not be served for now: the worker cannot reach its store.

    Its message is all a caller learns (never the store's address or the
    error it gave); the worker logs the rest. Try again later.
    """

    msg = "the scheduler is unavailable for now; try again later"


class InternalError(SchedulerError):
    """A call failed for a reason that is not the caller's to fix (logged in full
    by the worker); its message says nothing more."""

    msg = "An error occurred while scheduling."


class MaxRetriesExceeded(SchedulerError):
    """Every alternate of an instance was tried and failed."""

    USER_MESSAGE = "Exceeded maximum number of retries."
    msg = USER_MESSAGE


class RequestTimedOut(SchedulerError):
    """The conductor re-drove a request as often as allowed and never heard back."""

    USER_MESSAGE = "The request timed out."
    msg = USER_MESSAGE


# --- configuration and reach ------------------------------------------------------


class ConfigInvalid(SchedulerError):
    """An option's value cannot be used: named with its value and the file it
    came from, found before anything is served."""

    msg = "%(option)s = %(value)r in %(source)s: %(reason)s"


class BrokerUnreachable(SchedulerError):
    """A client command could not reach the message broker within its time."""

    msg = "cannot reach the message broker at %(url)s: %(reason)s"


class NoConsumer(SchedulerError):
    """Nothing consumes the topic a call would be sent on."""

    msg = "no %(what)s consumes topic %(topic)r on %(url)s (is one running?)"


# --- store --------------------------------------------------------------------------


class StoreError(SchedulerError):
    msg = "store error"


class StoreUnavailable(StoreError):
    msg = "the store cannot be reached: %(reason)s"


class NotFound(StoreError):
    msg = "%(kind)s %(ident)s not found"


class ProviderNotFound(NotFound):
    def __init__(self, ident: str) -> None:
        super().__init__(kind="resource provider", ident=ident)
        self.ident = ident


class InstanceNotFound(NotFound):
    def __init__(self, ident: str) -> None:
        super().__init__(kind="instance", ident=ident)
        self.ident = ident


class RecordChanged(StoreError):
    """A write guarded by a step's record (:class:`scheduler.store.RecordCheck`)
    found the record no longer at that step: nothing was written."""

    msg = "instance %(uuid)s is no longer at that step: %(why)s"

    def __init__(self, uuid: str, why: str) -> None:
        super().__init__(uuid=uuid, why=why)
        self.why = why


class ProviderExists(StoreError):
    msg = "resource provider %(ident)s already exists"


class GenerationConflict(StoreError):
    """A provider write carried a stale generation: re-read and decide."""

    msg = "provider %(uuid)s generation %(expected)s is stale (now %(actual)s)"


class InventoryInUse(StoreError):
    msg = "provider %(uuid)s: cannot remove %(rc)s inventory while %(used)s is allocated"


class ClaimFailed(StoreError):
    """Base of the typed reasons a claim is refused. Nothing was written."""

    msg = "claim refused"


class CapacityExceeded(ClaimFailed):
    msg = "provider %(uuid)s: %(rc)s request %(requested)s exceeds free capacity %(free)s"


class NoSuchInventory(ClaimFailed):
    msg = "provider %(uuid)s has no %(rc)s inventory"


class UnitRuleViolation(ClaimFailed):
    """min_unit, max_unit or step_size broken; ``rule`` names which."""

    msg = "provider %(uuid)s: %(rc)s amount %(requested)s breaks %(rule)s=%(limit)s"


class ConsumerConflict(ClaimFailed):
    """The consumer already holds different allocations."""

    msg = "consumer %(consumer)s already holds other allocations"


class GroupPolicyViolation(ClaimFailed):
    msg = "server group %(group)s policy %(policy)s forbids host %(host)s"


class ConsumerDeleted(StoreError):
    """The consumer is an instance being deleted (or deleted): nothing may be
    claimed for it. Not a :class:`ClaimFailed`: no other host would do, so
    the claimer drops the instance instead of trying the next one."""

    msg = "instance %(consumer)s is being deleted: nothing is claimed for it"

    def __init__(self, consumer: str) -> None:
        super().__init__(consumer=consumer)
        self.consumer = consumer


class StreamTruncated(StoreError):
    """A change-feed cursor fell off the stream: reload from a snapshot."""

    msg = "change cursor %(cursor)s is older than the retained stream"


class CorruptRecord(StoreError):
    """A key under the prefix holds something this code cannot read."""

    msg = "corrupt record at %(key)s: %(reason)s"
