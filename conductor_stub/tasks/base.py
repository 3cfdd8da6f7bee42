"""What the conductor's operations share.

:func:`request_context` is the context a record's request is sent and
re-sent with. :func:`wait_for` is the one wait: every ``--wait`` of a
command, a boot's wait for its instances and a drain's rounds poll through
it, so a timeout, a poll interval and a store that restarts meanwhile mean
the same everywhere. :func:`summary` is the head of what a command prints of
an instance. :class:`Task` is what every operation's task is built with.

:class:`ReschedulingTask` is the base of the operations whose failed host is
tried again: a build, a resize or cold migration, a live migration's
pre-checks, an evacuation's rebuild. They all do it one way:

1. **Count the failure** (:meth:`~ReschedulingTask.count_failure`): one more
   attempt, the failed host among those tried, written with the deadline
   pushed out *before* anything is cast, so a conductor that dies half way
   leaves a record the sweeper re-drives. With alternates off,
   ``max_attempts`` failures end the operation there.
2. **Try the alternates** (:meth:`~ReschedulingTask.reschedule`): the
   first that can still take the instance is claimed with nothing but what
   its Selection holds, with no scheduler round trip, and the operation's
   step cast there with the alternates after it. An alternate whose
   resources were taken meanwhile is skipped for the next one (Nova's bug
   1837955 gave up instead); so is one a strict server-group policy now
   forbids: its claim carries the group check, exactly as the scheduler's
   claim does, so a reschedule cannot put two anti-affinity members on one
   host.
3. **Ask the scheduler again** (:meth:`~ReschedulingTask.select_again`), the
   hosts tried ignored: with alternates off, at once (up to ``max_attempts``
   hosts); with alternates, once none of those left can be claimed. An
   alternate refused at its claim was never tried, so it is no attempt: the
   scheduler is asked while fewer than ``max_attempts`` hosts really failed
   (with alternates, their number is the bound: the scheduler returns
   ``max_attempts - 1``).
4. **Give up** (:meth:`~ReschedulingTask.give_up`): a build goes to ERROR, a
   move back ACTIVE on its source with the fault. "Max retries exceeded"
   (distinct from "no valid host") means that ``max_attempts`` hosts failed,
   or that the request names its hosts and every one of them failed. What
   a user reads is generic (:func:`scheduler.policy.user_reason`); the
   admin-only ``fault_details`` say how many hosts failed, which, and which
   alternates were refused at their claim and why.

A re-driven request can have placed the instance meanwhile (it then holds a
claim), and a delete fences it: either stops a reschedule where it stands.
A move's first destination is asked for one way too
(:meth:`~ReschedulingTask.select_move`: a live migration's, an evacuation's).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

import oslo_messaging

from conductor_stub import metrics, records
from conductor_stub.records import ConductorSettings, ConductorStore
from scheduler import policy
from scheduler.exceptions import (
    ClaimFailed,
    ConsumerConflict,
    ConsumerDeleted,
    Forbidden,
    InternalError,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    ProviderNotFound,
    SchedulerError,
    SchedulerUnavailable,
    StoreUnavailable,
)
from scheduler.log import get_logger
from scheduler.objects import InstanceRecord, RequestSpec, Selection
from scheduler.rpc import ComputeClient, RequestContext, SchedulerClient
from scheduler.store import GroupClaim, InstanceStore

LOG = get_logger(__name__)

T = TypeVar("T")

#: The least a wait sleeps before asking a store that did not answer again.
STORE_DOWN_POLL = 0.5

#: What asking the scheduler can be refused with: the operation fails.
REFUSALS = (NoValidHost, InvalidRequest, Forbidden, InternalError)
#: What leaves a request unanswered for now: its record's deadline re-drives it.
NO_ANSWER = (oslo_messaging.MessagingTimeout, SchedulerUnavailable)


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


def summary(record: InstanceRecord, **fields: object) -> dict[str, object]:
    """What a command prints of an instance: its uuid, state, task and host,
    then the operation's own ``fields``, in order."""
    return {
        "uuid": record.uuid,
        "state": record.state,
        "task_state": record.task_state,
        "host": record.host,
        **fields,
    }


def refused_text(refused: Sequence[str]) -> str:
    """The admin details' account of the alternates refused at their claim
    (none tried, so none counted as a failed attempt)."""
    return f"; alternates refused: {', '.join(refused)}" if refused else ""


def named_hosts_tried(spec: RequestSpec) -> bool:
    """Whether ``spec`` is narrowed to hosts it names (forced hosts or nodes, a
    requested destination) that are all among its ``ignore_hosts`` (tried):
    the scheduler could only answer that no host is valid."""
    tried = {host.lower() for host in spec.ignore_hosts}
    destination = spec.requested_destination
    narrowed = (
        spec.force_hosts,
        spec.force_nodes,
        (destination.host,) if destination is not None else (),
    )
    return any(names and all(n.lower() in tried for n in names) for names in narrowed)


@dataclass(frozen=True)
class Retry:
    """A failed host, counted (:meth:`ReschedulingTask.count_failure`)."""

    #: The instance's record: as written with this failure once it is, else as read.
    record: InstanceRecord
    #: Hosts that failed so far (a build, a move's destination), this one too.
    attempts: int
    #: Which, in order.
    tried: tuple[str, ...]
    #: Why the last one failed.
    reason: str
    #: How the admin details count them (:attr:`ReschedulingTask.failures`).
    failures: str

    @property
    def exhausted(self) -> str:
        """The admin details when no host is left to try."""
        return (
            f"max retries exceeded: {self.attempts} {self.failures}: "
            f"{', '.join(self.tried)}; last failure: {self.reason}"
        )

    def after(self, refused: Sequence[str] = ()) -> str:
        """The admin details' account of the failures so far, after what the
        scheduler said when asked again (``refused``: the alternates refused
        at their claim before it was)."""
        return (
            f" (after {self.attempts} {self.failures}: {', '.join(self.tried)}"
            f"{refused_text(refused)})"
        )


class Task:
    """What an operation's task is built with: the store, the scheduler's
    client (None: there is no asking it, as for a conductor that only takes
    results in a test), the computes' client, the conductor's settings and
    the clock."""

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient | None,
        compute: ComputeClient,
        settings: ConductorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.compute = compute
        self.settings = settings or ConductorSettings()
        self._clock = clock


class ReschedulingTask(Task, ABC):
    """An operation whose failed host is tried again (see the module's
    docstring): its failures counted, its alternates tried, the scheduler
    asked again, or given up, one way for all of them. An operation says
    what its step on a host is (:meth:`cast_to`; on the host the scheduler
    gave when asked again, :meth:`cast_again`) and how long a step may take
    (:meth:`timeout`)."""

    #: The instance's state while the operation is under way (each write's
    #: compare-and-set).
    state: ClassVar[str]
    #: What the reschedule and exhaustion metrics count it as.
    kind: ClassVar[str]
    #: How the admin details count the hosts that failed.
    failures: ClassVar[str] = "destination(s) failed"

    @abstractmethod
    def timeout(self) -> float:
        """Seconds the operation's next step is given before it is re-driven."""

    @abstractmethod
    def cast_to(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        """Cast the operation's step for ``spec`` to the first of ``hosts`` (an
        alternate, claimed, the instance noted placed there), the rest its
        alternates."""

    def cast_again(self, ctxt: Any, retry: Retry, spec: RequestSpec, host: Selection) -> None:
        """Cast the operation's step to ``host``, where the scheduler asked again
        (for ``spec``) placed the instance; as to an alternate unless the
        operation says otherwise."""
        self.cast_to(ctxt, retry, spec, [host])

    def ask_again(
        self, ctxt: Any, retry: Retry, spec: RequestSpec, refused: Sequence[str]
    ) -> None:
        """Go on through the scheduler, the hosts tried ignored (alternates off,
        or none of them could be claimed: ``refused``, for the admin details):
        one host, for :meth:`retry_spec`, then :meth:`cast_again` there."""
        asked = self.retry_spec(retry, spec)
        selection = self.select_again(ctxt, retry, asked, refused)
        if selection is not None:
            self.cast_again(ctxt, retry, asked, selection)

    def can_ask_again(self) -> bool:
        """Whether there is a scheduler to ask again (else the alternates are
        all there is)."""
        return True

    def count_failure(
        self, record: InstanceRecord, failed_host: str, reason: str, **changes: Any
    ) -> Retry | None:
        """``failed_host`` failed the instance (for ``reason``): the one account
        of attempts, hosts tried and what the admin details say of them.

        With alternates off and ``max_attempts`` hosts failed, the operation
        is given up here. Else the attempt is written (with ``changes``) and
        the deadline pushed :meth:`timeout` out, before anything is cast, so
        a conductor that dies below leaves a record the sweeper re-drives.
        Returns the failure counted, its record as written; None when there
        is nothing more to do (given up, or the record left :attr:`state`
        meanwhile).
        """
        retry = Retry(
            record, record.attempts + 1, (*record.tried_hosts, failed_host), reason, self.failures
        )
        if not self.settings.return_alternates and retry.attempts >= self.settings.max_attempts:
            # (With alternates, their number is the bound; see reschedule.)
            self.give_up(retry, MaxRetriesExceeded(), retry.exhausted)
            return None
        now = self._clock()
        updated = self.store.update_instance(
            record.uuid,
            expected_states=[self.state],
            attempts=retry.attempts,
            tried_hosts=retry.tried,
            updated_at=now,
            deadline=now + self.timeout(),
            **changes,
        )
        if updated is None:
            return None
        metrics.RESCHEDULES.labels(self.kind).inc()
        return replace(retry, record=updated)

    def destination_failed(
        self,
        ctxt: Any,
        uuid: str,
        migration_uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        """A move's destination ``failed_host`` failed its step and released its
        claim there (a resize's prep, a live migration's pre-checks): count it
        and :meth:`reschedule`, if the result is the live move's. Not when it
        names another migration (a late copy's, whose allocation is handed
        back: :func:`~conductor_stub.records.undo_stale_migration`), when the
        move is over, or when a re-driven copy has placed the instance
        already."""
        record = self.store.get_instance(uuid)
        if record.migration_uuid != migration_uuid:
            records.undo_stale_migration(self.store, record, migration_uuid)
            return
        if record.state != self.state:
            LOG.info("move_reschedule_ignored", state=record.state, move=self.state)
            return
        if self.store.get_consumer(uuid) is not None:
            LOG.info("move_reschedule_superseded", move=self.state)
            return
        retry = self.count_failure(record, failed_host, reason)
        if retry is not None:
            self.reschedule(ctxt, retry, spec, alternates, migration_uuid)

    def reschedule(
        self,
        ctxt: Any,
        retry: Retry,
        spec: RequestSpec,
        alternates: Sequence[Selection],
        migration_uuid: str | None = None,
    ) -> None:
        """Go on after ``retry``: claim the first of ``alternates`` that can
        still take the instance for ``spec`` (a resize or live migration
        names its ``migration_uuid``: its membership on the source is the
        instance's own), note it placed there (:meth:`placed`) and cast the
        operation's step to it (:meth:`cast_to`); stop if a re-driven copy
        placed the instance meanwhile, or it is deleted or given up.

        None could be claimed: :meth:`ask_again` while :meth:`asks_again`
        says so; else given up, the alternates refused at their claim in the
        admin details. With alternates off, :meth:`ask_again` at once.
        """
        if not self.settings.return_alternates and self.can_ask_again():
            self.ask_again(ctxt, retry, spec, ())
            return
        uuid = retry.record.uuid
        refused: list[str] = []
        for i, alternate in enumerate(alternates):
            claimed = self._claim_alternate(uuid, spec, alternate, refused, migration_uuid)
            if claimed is None:
                return
            if not claimed:
                continue
            if self.placed(uuid, alternate):
                self.cast_to(ctxt, retry, spec, list(alternates[i:]))
            return
        if self.can_ask_again() and self.asks_again(retry, refused, spec):
            self.ask_again(ctxt, retry, spec, refused)
            return
        self.give_up(retry, MaxRetriesExceeded(), retry.exhausted + refused_text(refused))

    def asks_again(self, retry: Retry, refused: Sequence[str], spec: RequestSpec) -> bool:
        """Whether to ask the scheduler again once none of the alternates left
        could be claimed (taken meanwhile, forbidden by the group now): while
        fewer than ``max_attempts`` hosts really failed, unless the request
        names its hosts (forced, or an admin's destination) and every one of
        them failed: then there is nothing else to ask for."""
        if retry.attempts >= self.settings.max_attempts or named_hosts_tried(
            self.retry_spec(retry, spec)
        ):
            return False
        LOG.info(
            "alternates_exhausted",
            attempts=retry.attempts,
            max_attempts=self.settings.max_attempts,
            refused=len(refused),
        )
        return True

    def retry_spec(self, retry: Retry, spec: RequestSpec) -> RequestSpec:
        """The request spec the scheduler is asked again with: a move's own
        (:func:`~conductor_stub.records.move_spec`: its source and the hosts
        tried ignored). ``spec``: the one the alternates were claimed for."""
        return records.move_spec(retry.record)

    def _claim_alternate(
        self,
        uuid: str,
        spec: RequestSpec,
        alternate: Selection,
        refused: list[str],
        migration_uuid: str | None,
    ) -> bool | None:
        """Claim an alternate for the instance, as a member of its group (strict
        policies checked): True if claimed; False if its resources were taken
        meanwhile, the group policy now forbids it or it is gone (noted in
        ``refused``: skip to the next); None if the instance holds a claim
        already (a re-driven copy placed it) or is being deleted: stop here."""
        try:
            self.store.claim(
                uuid,
                alternate.allocation_request,
                GroupClaim.for_spec(spec, alternate.host, migration_uuid),
            )
        except ConsumerConflict:
            LOG.info("reschedule_superseded", alternate=alternate.host)
            return None
        except ConsumerDeleted:
            LOG.info("reschedule_stopped_by_delete", alternate=alternate.host)
            return None
        except (ClaimFailed, ProviderNotFound) as exc:
            LOG.info("alternate_skipped", alternate=alternate.host, reason=type(exc).__name__)
            refused.append(f"{alternate.host} ({type(exc).__name__})")
            return False
        return True

    def placed(self, uuid: str, selection: Selection, **where: Any) -> bool:
        """Note the instance placed on ``selection`` (its claim just made), with
        ``where`` it is, while the operation is under way. False if it was
        given up meanwhile: a move given up has handed the source's
        allocation back to the instance, dropping this claim already."""
        if (
            self.store.update_instance(
                uuid, expected_states=[self.state], updated_at=self._clock(), **where
            )
            is not None
        ):
            return True
        LOG.info("reschedule_given_up_meanwhile")
        return False

    def select_again(
        self, ctxt: Any, retry: Retry, spec: RequestSpec, refused: Sequence[str] = ()
    ) -> Selection | None:
        """Ask the scheduler for one host for ``spec`` (claimed for the
        instance) and note the instance placed there (:meth:`placed`). None
        when there is nothing to cast there: the scheduler refused or found
        no host (given up here, the admin details saying after what), did
        not answer or cannot reach its store for now (the record's deadline
        re-drives the request), the instance is being deleted, or the
        operation was given up meanwhile."""
        uuid = retry.record.uuid
        try:
            if self.scheduler is None:
                raise NoValidHost(details="no scheduler client to ask again")
            [per_instance] = self.scheduler.select_destinations(
                ctxt, spec, [uuid], return_alternates=False
            )
        except REFUSALS as exc:
            self.give_up(retry, exc, f"{policy.admin_details(exc)}{retry.after(refused)}")
            return None
        except NO_ANSWER as exc:
            LOG.warning("select_again_timed_out", error=type(exc).__name__)
            return None
        if not per_instance:  # deleted meanwhile
            return None
        selection = per_instance[0]
        return selection if self.placed(uuid, selection) else None

    def give_up(self, retry: Retry, exc: SchedulerError, details: str) -> bool:
        """The operation failed for good: the user reads what the policy
        allows of ``exc``, the admin ``details`` (:meth:`fail`); retries
        exhausted are counted. False if it had ended already (nothing done)."""
        if not self.fail(retry, policy.user_reason(exc), details):
            return False
        if isinstance(exc, MaxRetriesExceeded):
            metrics.RETRIES_EXHAUSTED.labels(self.kind).inc()
        return True

    def fail(self, retry: Retry, fault: str, details: str) -> bool:
        """End the operation with ``fault``: a move goes back ACTIVE on its
        source (:func:`~conductor_stub.records.fail_move`)."""
        return records.fail_move(self.store, retry.record, fault, details, clock=self._clock)

    def refuse_move(self, record: InstanceRecord, exc: SchedulerError) -> None:
        """A move that cannot be placed (``exc``) goes back ACTIVE on its source:
        the user reads what the policy allows of ``exc``, the admin its details."""
        records.fail_move(
            self.store,
            record,
            policy.user_reason(exc),
            policy.admin_details(exc),
            clock=self._clock,
        )

    def select_move(
        self,
        ctxt: RequestContext,
        record: InstanceRecord,
        spec: RequestSpec,
        move: str,
        *,
        return_alternates: bool = True,
    ) -> list[Selection] | None:
        """A move's destination (claimed for the instance) and its alternates,
        for the ``move`` it is (``live_migration``, ``evacuate``: what the log
        lines say), with ``select_destinations``, which publishes its
        ``.start`` / ``.end``. None when there is nothing to cast to: refused
        or no valid host (the move failed back to its source), no answer
        (the record's deadline re-drives it), or the instance deleted
        meanwhile."""
        assert self.scheduler is not None, "a move is sent with a scheduler client"
        try:
            [selections] = self.scheduler.select_destinations(
                ctxt, spec, [record.uuid], return_alternates=return_alternates
            )
        except REFUSALS as exc:
            self.refuse_move(record, exc)
            return None
        except NO_ANSWER as exc:
            # No answer, or not for now: the deadline stands, the sweeper re-drives.
            LOG.warning("move_select_timed_out", move=move, error=type(exc).__name__)
            return None
        if not selections:  # deleted meanwhile: the delete releases it all
            LOG.info("move_stopped_by_delete", move=move)
            return None
        return list(selections)
