"""The stages every request of the scheduler endpoint goes through: the request
spec read and validated whole, the decision (timed and counted), its
notifications; and the one error policy of a call (:func:`call_errors`) and
of a cast (:meth:`Stages._cast_failed`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scheduler.engine.pipeline import Engine
from scheduler.engine.preemption import Preemption, may_preempt
from scheduler.exceptions import (
    ClaimFailed,
    ConsumerConflict,
    ConsumerDeleted,
    Forbidden,
    InternalError,
    InvalidRequest,
    NoValidHost,
    RecordChanged,
    SchedulerUnavailable,
    StoreError,
    StoreUnavailable,
)
from scheduler.filters.validation import validate_request
from scheduler.log import RepeatLimiter, get_logger
from scheduler.manager.stats import DecisionStats, count_preemption, count_rejections
from scheduler.notifications import (
    PreemptionPayload,
    PriorityClassPayload,
    SchedulingErrorPayload,
    SchedulingPayload,
    VictimPayload,
)
from scheduler.notifier import Notifier
from scheduler.objects import MAX_INSTANCES_PER_REQUEST, Flavor, RequestSpec, Selection
from scheduler.policy import admin_details, user_reason
from scheduler.priority import PriorityClass
from scheduler.rpc import ComputeClient, ConductorClient
from scheduler.store.base import GroupClaim, RefusalLog
from scheduler.store.records import Refusal

#: How many times a boot searches when the store refused its preempting step
#: because what it read changed meanwhile. Another request that evicted the
#: same instances changed their host's usage, so the next search leaves that
#: host out; a victim whose delete began without its host's usage changing
#: stays in the search's pool until it is read again (``POOL_AGE``), and the
#: boot then fails as it would have without preemption.
PREEMPT_ATTEMPTS = 2

#: One logger for the whole endpoint (its lines say ``scheduler.manager``).
LOG = get_logger("scheduler.manager")
#: The warnings a stream of requests can repeat without end (the same refusal,
#: a store that is down): identical ones a few times a minute at most.
REPEATS = RepeatLimiter()


@contextmanager
def call_errors(method: str) -> Iterator[None]:
    """What a call raises to its caller: its own typed refusals as they are; a
    store that cannot be reached as :class:`SchedulerUnavailable`; anything
    else as :class:`InternalError`. Neither says more than its generic
    message (no address, no traceback); the worker logs the error itself."""
    try:
        yield
    except (InvalidRequest, Forbidden, NoValidHost):
        raise
    except StoreUnavailable as exc:
        REPEATS.log(LOG, "warning", "store_unavailable", method=method, error=exc.message)
        raise SchedulerUnavailable() from None
    except Exception:
        LOG.exception("call_failed", method=method)
        raise InternalError() from None


@dataclass(frozen=True)
class CastEvents:
    """The log events of one cast's failures, by kind (stable names: operators
    search the logs for them)."""

    method: str
    refused: str
    no_valid_host: str
    failed: str


RUN_INSTANCE = CastEvents(
    "run_instance",
    refused="run_instance_refused",
    no_valid_host="no_valid_host",
    failed="run_instance_failed",
)
RESIZE = CastEvents(
    "resize",
    refused="resize_refused",
    no_valid_host="resize_no_valid_host",
    failed="resize_failed",
)


class Stages:
    """The scheduler endpoint's collaborators, the stages its methods share and
    what a failed cast does (:class:`~scheduler.manager.SchedulerEndpoint` adds
    one method per remote call)."""

    def __init__(
        self,
        engine: Engine,
        compute: ComputeClient,
        conductor: ConductorClient,
        notifier: Notifier,
        allow_resize_to_same_host: bool = False,
        refusals: RefusalLog | None = None,
    ) -> None:
        self.engine = engine
        #: Where NoValidHosts are kept for operators (None: nowhere).
        self.refusals = refusals
        self.compute = compute
        self.conductor = conductor
        self.notifier = notifier
        self.stats = DecisionStats()
        self.allow_resize_to_same_host = allow_resize_to_same_host

    def _read_spec(self, request_spec: Any, new_flavor: Flavor | None = None) -> RequestSpec:
        """The typed request spec (with ``new_flavor`` for a resize), validated
        whole before anything is selected or claimed.

        :raises InvalidRequest: naming the field, extra spec or image property.
        """
        spec = RequestSpec.from_primitive(request_spec)
        if new_flavor is not None:
            spec = spec.replace(flavor=new_flavor, num_instances=1)
            spec.resource_request  # noqa: B018 - the new flavor's resource extra specs
        validate_request(spec, self.engine.settings)
        return spec

    def _priority_of(self, spec: RequestSpec | None) -> PriorityClass | None:
        """The priority class a validated spec's flavor chooses (None: none, or no spec)."""
        if spec is None:
            return None
        return self.engine.settings.priority_classes.of(spec.flavor.extra_specs)

    def _select(
        self,
        action: str,
        request_id: str,
        spec: RequestSpec,
        uuids: Sequence[str],
        return_alternates: bool = True,
        migration_uuid: str | None = None,
    ) -> dict[str, list[Selection]]:
        """Selections per instance uuid, in request order (a resize names its
        ``migration_uuid``: see :meth:`Engine.select`); a NoValidHost is kept
        among the last ones, under ``action``. An instance being
        deleted (its claim refused with :class:`ConsumerDeleted`) is dropped
        and the rest are placed without it (what it would have claimed is
        released by the all-or-nothing step): it gets no Selection."""
        live = list(uuids)
        while True:
            try:
                with self.stats.timed():
                    try:
                        result = self.engine.schedule(
                            request_id,
                            spec
                            if spec.num_instances == len(live)
                            else spec.replace(num_instances=len(live)),
                            live,
                            return_alternates=return_alternates,
                            migration_uuid=migration_uuid,
                        )
                    except NoValidHost as exc:
                        count_rejections(exc.traces, no_valid_host=True)
                        self._remember_refusal(action, request_id, live, exc)
                        raise
                count_rejections(result.traces, no_valid_host=False)
                return dict(zip(live, result.selections, strict=True))
            except ConsumerDeleted as exc:
                LOG.info("instance_deleted_meanwhile", instance_uuid=exc.consumer)
                live.remove(exc.consumer)
                if not live:
                    return {}

    @contextmanager
    def _selecting(
        self,
        ctxt: Any,
        spec: RequestSpec,
        uuids: Sequence[str],
        migration_uuid: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """``scheduler.select_destinations.start`` / ``.end`` around one decision,
        a call's or a move's (a resize or cold migration names its
        ``migration_uuid``), as Nova's scheduler publishes for every move;
        ``.end`` says ``state: error`` if it raised, and no valid host is
        published at ERROR too. The yielded dict is the ``.end``'s outcome
        (:meth:`Notifier.action`)."""
        payload = SchedulingPayload.starting(
            spec, uuids, migration_uuid, summary=True, priority_class=self._priority_of(spec)
        )
        with self.notifier.action(ctxt, "select_destinations", payload) as end:
            try:
                yield end
            except NoValidHost as exc:
                self._notify_failure(ctxt, "select_destinations", uuids, exc)
                raise

    # --- preemption -----------------------------------------------------------------

    def _preempt(
        self, ctxt: Any, request_id: str, spec: RequestSpec, instance_uuid: str
    ) -> Preemption | None:
        """Place one instance that found no host by evicting lower-priority
        preemptible instances, when its class may (None: it may not, no
        eviction makes room, or the store refused the step because what was
        read changed meanwhile: the caller fails the request as it would
        have). The claim, the victims' fence and the instance's wait on them
        are one store step (:meth:`PlacementStore.claim_preempting`); the
        conductor ends the victims and then casts the build
        (:mod:`conductor_stub.tasks.preempt`), so nothing is cast here but
        ``scheduler.preempt``."""
        chosen = self._priority_of(spec)
        if chosen is None or not may_preempt(chosen):
            return None
        for attempt in range(1, PREEMPT_ATTEMPTS + 1):
            found = self.engine.preemption(request_id, spec, instance_uuid)
            if found is None:
                return None
            try:
                claimed = self.engine.store.claim_preempting(
                    instance_uuid,
                    found.selection.allocation_request,
                    found.victims_as_read(),
                    chosen.priority,
                    GroupClaim.for_spec(spec, found.host),
                    eviction=found.eviction(request_id, time.time(), chosen.name, chosen.priority),
                )
                break
            except (ConsumerConflict, ConsumerDeleted) as exc:  # another copy, or deleted
                LOG.info("preemption_refused", instance_uuid=instance_uuid, error=exc.message)
                return None
            except (RecordChanged, ClaimFailed) as exc:  # what was read changed: again
                LOG.info("preemption_refused", attempt=attempt, error=exc.message)
        else:
            return None
        victims = [v.record for v in found.victims]
        LOG.info(
            "preempted",
            instance_uuid=instance_uuid,
            host=found.host,
            victims=[v.uuid for v in victims],
            repeated=not claimed,
        )
        if claimed:
            count_preemption([v.priority_class for v in victims])
            self.notifier.info(
                ctxt,
                "scheduler.preempt",
                PreemptionPayload(
                    instance_uuid,
                    request_id,
                    found.host,
                    found.selection.node,
                    PriorityClassPayload.of(chosen),
                    tuple(VictimPayload(v.uuid, v.priority_class, v.priority) for v in victims),
                ),
            )
        return found

    # --- failures -------------------------------------------------------------------

    def _notify_failure(
        self, ctxt: Any, action: str, uuids: Sequence[str], exc: BaseException
    ) -> None:
        # The notification carries the user-safe reason and, for a NoValidHost,
        # how many hosts each reason removed; the admin details (in words)
        # stay in the logs and the instance's admin-only fault details.
        self.notifier.error(ctxt, f"scheduler.{action}", SchedulingErrorPayload.of(uuids, exc))

    def _remember_refusal(
        self, action: str, request_id: str, uuids: Sequence[str], exc: NoValidHost
    ) -> None:
        """Keep the NoValidHost among the store's last ones (``scheduler-admin
        refusals``, the dashboard); a store that cannot take it loses only that."""
        refusal = Refusal(
            at=time.time(),
            request_id=request_id,
            action=action,
            instance_uuids=tuple(uuids[:MAX_INSTANCES_PER_REQUEST]),
            reasons=dict(exc.reasons),
        )
        if self.refusals is None:
            return
        try:
            self.refusals.record_refusal(refusal)
        except StoreError as error:
            REPEATS.log(LOG, "warning", "refusal_not_kept", key=error.message, error=error.message)

    def _cast_failed(
        self,
        ctxt: Any,
        events: CastEvents,
        end: dict[str, Any],
        uuids: Sequence[str],
        exc: Exception,
        tell: Callable[[Exception], None],
        give_back: Callable[[], None] | None = None,
        **log: Any,
    ) -> None:
        """The one error policy of a cast, called from the ``except`` that caught
        ``exc``: a cast has no caller to raise to, so nothing is raised and the
        worker keeps serving.

        The ``.end`` (``end``) is marked ``error`` whatever failed. A store that
        cannot be reached fails nothing: it is logged and the request dropped,
        and what it moved stays moved, for the conductor's re-drive (same
        request id, same uuids) to carry on from. Any other failure is logged by
        its kind (refused, no valid host, internal error with its traceback),
        ``give_back`` hands back what the request moved, the ERROR notification
        carries ``uuids`` (at most MAX_INSTANCES_PER_REQUEST of them, and how
        many more) and the user-safe reason, and ``tell`` tells the conductor
        (of every one of ``uuids``). ``log`` is bound to the log line. The
        warnings a stream of requests can repeat (the store down, the same
        refusal) pass :data:`REPEATS`.
        """
        end["state"] = "error"
        if isinstance(exc, StoreUnavailable):
            REPEATS.log(
                LOG,
                "warning",
                "store_unavailable",
                key=(events.method, exc.message),
                method=events.method,
                error=exc.message,
                **log,
            )
            return
        if isinstance(exc, InvalidRequest | Forbidden):
            REPEATS.log(LOG, "warning", events.refused, key=exc.message, reason=exc.message, **log)
        elif isinstance(exc, NoValidHost):
            LOG.info(events.no_valid_host, details=exc.details, **log)
        else:
            LOG.exception(events.failed, **log)
        if give_back is not None:
            give_back()
        self._notify_failure(ctxt, events.method, uuids, exc)
        tell(exc)

    def _resize_failed(
        self, ctxt: Any, instance_uuid: Any, migration_uuid: str, exc: Exception
    ) -> None:
        """The resize's failure to the conductor (the instance stays ACTIVE on its
        source): user-safe fault, admin details."""
        self.conductor.resize_result(
            ctxt,
            str(instance_uuid)[:64],
            migration_uuid,
            None,
            False,
            user_reason(exc),
            admin_details(exc),
        )

    def _schedule_failed(self, ctxt: Any, uuids: Sequence[str], exc: Exception) -> None:
        """Every one of the instances to ERROR through the conductor (user-safe
        fault, admin details), MAX_INSTANCES_PER_REQUEST per cast at most."""
        reason, details = user_reason(exc), admin_details(exc)
        for start in range(0, len(uuids), MAX_INSTANCES_PER_REQUEST):
            chunk = list(uuids[start : start + MAX_INSTANCES_PER_REQUEST])
            self.conductor.schedule_failed(ctxt, chunk, reason, details)
