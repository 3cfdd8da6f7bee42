"""A boot: the instances' records, the scheduling requests, the builds'
results and their reschedules.

:class:`Booter` is the API side: it creates the instance records (each with
a deadline, see :mod:`conductor_stub.redrive`), sends the scheduling
requests and waits for every instance to reach a final state. The request
is ``run_instance`` (the scheduler casts each build), or, in Nova's modern
flow, ``select_destinations`` and the builds cast here
(:func:`select_and_build`, which every unshelve uses too).

:class:`Builder` is the conductor's side of the builds: a build that
succeeded makes the instance ACTIVE where it was built
(:func:`~scheduler.build_results.record_built`, the one rule, which a compute
may also apply itself); one the scheduler could not place puts it in ERROR,
the fault for the user, the reasons for the admin; one that failed on its
host is rescheduled (:class:`~conductor_stub.tasks.base.ReschedulingTask`):
the next alternate claimed and the build cast there, or the scheduler asked
again, up to ``max_attempts`` builds, then ERROR with "max retries
exceeded".

Results are checked against the store before they count: a build result
from a host that does not hold the instance's claim, or a failure report
while the instance holds a claim elsewhere, comes from a stale attempt (a
duplicate of a re-driven request) and is ignored; the live attempt reports
for itself. A result for an instance already in ERROR releases whatever a
late attempt claimed for it.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor_stub import pending, records
from conductor_stub.findings import LOST_FAULT
from conductor_stub.records import ConductorStore
from conductor_stub.tasks.base import (
    NO_ANSWER,
    REFUSALS,
    ReschedulingTask,
    Retry,
    wait_for,
)
from scheduler import policy
from scheduler.build_results import record_built
from scheduler.exceptions import (
    BrokerUnreachable,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    SchedulerError,
)
from scheduler.filters.validation import validate_request
from scheduler.log import get_logger
from scheduler.objects import (
    BUILDING,
    ERROR,
    FINAL_STATES,
    MAX_INSTANCES_PER_REQUEST,
    SPAWNING,
    Flavor,
    Image,
    InstanceRecord,
    RequestSpec,
    Selection,
    ServerGroup,
)
from scheduler.priority import PriorityClasses, max_wait, record_fields
from scheduler.rpc import SEND_FAILURES, ComputeClient, RequestContext, SchedulerClient

LOG = get_logger(__name__)


def boot_spec(
    flavor: Flavor,
    project_id: str,
    user_id: str,
    *,
    image: Image | None = None,
    group: ServerGroup | None = None,
    availability_zone: str | None = None,
    scheduler_hints: Mapping[str, Sequence[str]] | None = None,
) -> RequestSpec:
    """The request spec of a boot (one instance; :meth:`Booter.boot` sets how
    many per request), checked whole as a worker checks it: its fields
    (:meth:`RequestSpec.from_primitive`) and what the filters will read
    (:func:`~scheduler.filters.validation.validate_request`), the same code,
    so a client refuses in one line what the worker would refuse later.

    :raises InvalidRequest: naming the field, extra spec, image property or hint.
    """
    spec = RequestSpec(
        flavor=flavor,
        project_id=project_id,
        user_id=user_id,
        image=image,
        group=group,
        availability_zone=availability_zone,
        scheduler_hints={k: tuple(v) for k, v in (scheduler_hints or {}).items()},
    )
    checked = RequestSpec.from_primitive(spec.to_primitive())
    validate_request(checked)
    return checked


@dataclass
class BootReport:
    """What a boot ended with, per instance, and the totals."""

    instances: list[InstanceRecord]
    seconds: float
    requests: int
    timed_out: bool = False
    by_state: Counter[str] = field(default_factory=Counter)
    #: The server group the instances were booted into (None: no group).
    group: ServerGroup | None = None

    def __post_init__(self) -> None:
        self.by_state = Counter(r.state for r in self.instances)

    @property
    def rescheduled(self) -> int:
        return sum(1 for r in self.instances if r.attempts > 1)

    @property
    def no_valid_host(self) -> int:
        return sum(1 for r in self.instances if r.fault == NoValidHost.USER_MESSAGE)

    @property
    def lost(self) -> int:
        """Instances whose record vanished with nothing running them."""
        return sum(1 for r in self.instances if r.state == ERROR and r.fault == LOST_FAULT)

    @property
    def redriven(self) -> int:
        """Instances whose request the conductor had to send again."""
        return sum(1 for r in self.instances if r.redrives)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "summary": {
                "total": len(self.instances),
                "states": dict(self.by_state),
                "rescheduled": self.rescheduled,
                "no_valid_host": self.no_valid_host,
                "redriven": self.redriven,
                "lost": self.lost,
                "seconds": round(self.seconds, 3),
                "requests": self.requests,
                "timed_out": self.timed_out,
                "group_uuid": self.group.uuid if self.group else None,
                "group_policy": self.group.policy if self.group else None,
            },
            "instances": [
                {
                    "uuid": r.uuid,
                    "state": r.state,
                    "host": r.host,
                    "availability_zone": r.availability_zone,
                    "attempts": r.attempts,
                    "redrives": r.redrives,
                    "fault": r.fault,
                }
                for r in self.instances
            ],
        }


#: The fault of an instance whose boot request never left (the broker went away).
UNSENT_FAULT = "The request could not be sent."


class Booter:
    """Boots instances the way an API + conductor would, and waits for them.

    Each record is created with the request's id and a deadline
    ``build_timeout`` seconds out, by which the conductor expects to have
    heard back; past it, ``conductor-stub serve`` re-drives the request.
    Each record also keeps the request's priority class (one of
    ``priority_classes``, chosen by the flavor's ``sched:priority_class``),
    its priority and preemptibility as they are now, and how long it may
    wait for capacity (``max_wait`` seconds, if it asks or its class does:
    :func:`scheduler.priority.max_wait`; see :mod:`conductor_stub.pending`).
    """

    def __init__(
        self,
        store: ConductorStore,
        scheduler: SchedulerClient,
        compute: ComputeClient,
        build_timeout: float = 120.0,
        return_alternates: bool = True,
        lost_after: float = 300.0,
        new_id: Callable[[], str] | None = None,
        priority_classes: PriorityClasses | None = None,
        max_wait: float = 0.0,
    ) -> None:
        self.store = store
        self.priority_classes = priority_classes or PriorityClasses()
        self.max_wait = max_wait
        self.scheduler = scheduler
        self.compute = compute
        self.build_timeout = build_timeout
        self.return_alternates = return_alternates
        self.lost_after = lost_after
        self.requests = 0
        #: The server group of the last :meth:`boot` (None: none).
        self.group: ServerGroup | None = None
        #: Where instance uuids and request ids come from (a seeded source
        #: makes a demo run repeat itself: the scheduler draws its ties from them).
        self.new_id = new_id or (lambda: str(uuidlib.uuid4()))

    def boot(
        self,
        ctxt: RequestContext,
        flavor: Flavor,
        count: int,
        *,
        per_request: int = 1,
        mode: str = "run_instance",
        group_policy: str | None = None,
        availability_zone: str | None = None,
        project_id: str = "demo",
        user_id: str = "demo",
        image: Image | None = None,
        scheduler_hints: Mapping[str, Sequence[str]] | None = None,
        group: ServerGroup | None = None,
        wait_for_capacity: bool | None = None,
    ) -> list[str]:
        """Create the records and send the requests; return the instance uuids.

        ``wait_for_capacity`` True makes the request wait (PENDING) rather
        than fail when no host fits, False makes it fail whatever its class
        says, None leaves it to its class.
        The instances go into ``group`` (an existing server group), or a new
        group with ``group_policy``, or none; :attr:`group` names it after.
        The request spec is validated whole as a worker would (the same
        checks: fields, extra specs, image properties, hints) before anything
        is recorded.

        :raises InvalidRequest: ``per_request`` over the scheduler's limit
            (MAX_INSTANCES_PER_REQUEST), both ``group`` and ``group_policy``,
            or a request spec a worker would refuse (a priority class that
            is not defined among it); nothing is recorded.
        """
        if not 1 <= per_request <= MAX_INSTANCES_PER_REQUEST:
            raise InvalidRequest(
                reason=f"per_request must be between 1 and {MAX_INSTANCES_PER_REQUEST}"
            )
        if group is not None and group_policy:
            raise InvalidRequest(reason="give an existing group or a new group's policy, not both")
        if group_policy:
            group = ServerGroup(uuid=str(uuidlib.uuid4()), policy=group_policy)
        template = boot_spec(
            flavor,
            project_id,
            user_id,
            image=image,
            group=group,
            availability_zone=availability_zone,
            scheduler_hints=scheduler_hints,
        )
        chosen = self.priority_classes.of(template.flavor.extra_specs)
        priority = record_fields(chosen)
        waiting = max_wait(chosen, wait_for_capacity, self.max_wait)
        self.group = group
        uuids: list[str] = []
        for start in range(0, count, per_request):
            n = min(per_request, count - start)
            batch = [self.new_id() for _ in range(n)]
            spec = template.replace(num_instances=n)
            req_ctxt = RequestContext(
                user_id=user_id,
                project_id=project_id,
                roles=list(ctxt.roles),
                is_admin=ctxt.is_admin,
                request_id=f"req-{self.new_id()}",
            )
            now = time.time()
            self.store.create_instances(
                InstanceRecord(
                    uuid=u,
                    request_spec=spec.to_primitive(),
                    created_at=now,
                    updated_at=now,
                    request_id=req_ctxt.request_id,
                    deadline=now + self.build_timeout,
                    roles=tuple(req_ctxt.roles),
                    is_admin=req_ctxt.is_admin is True,
                    max_wait=waiting,
                    **priority,
                )
                for u in batch
            )
            try:
                if mode == "run_instance":
                    self.scheduler.run_instance(req_ctxt, spec, batch)
                else:
                    select_and_build(
                        self.store,
                        self.scheduler,
                        self.compute,
                        req_ctxt,
                        spec,
                        batch,
                        return_alternates=self.return_alternates,
                    )
            except SEND_FAILURES as exc:
                self._unsent(batch, exc)
            uuids.extend(batch)
            self.requests += 1
        return uuids

    def _unsent(self, batch: Sequence[str], exc: Exception) -> None:
        """The broker went away before a request could be sent: its records go
        to ERROR now (none is left for the conductor to send later, when whoever
        asked has given up), and the boot stops.

        :raises BrokerUnreachable: always.
        """
        reason = " ".join(str(exc).split()) or type(exc).__name__
        for uuid in batch:
            records.fail_build(
                self.store,
                uuid,
                UNSENT_FAULT,
                f"the message broker could not be reached: {reason}",
            )
        raise BrokerUnreachable(
            f"the message broker stopped answering ({reason}); "
            f"{len(batch)} instance(s) not sent, set to ERROR"
        ) from exc

    def wait(
        self, uuids: Sequence[str], timeout: float, started: float, poll: float = 0.1
    ) -> BootReport:
        """Wait until every instance is in a final state, or ``timeout``.

        A record that vanished from the store (a store that went back in
        time) is given ``lost_after`` seconds to come back (the reconciler
        re-creates the record of a VM a compute runs); past that, nothing runs
        it: it is written back in ERROR with :data:`~conductor_stub.reconcile.LOST_FAULT`,
        reported lost, and counted by ``scheduler-admin audit`` (the store is
        where both the boot client and the audit find it, with no new kind of
        key: the record is the instance's as any other). A store that does not
        answer is asked again until the timeout."""
        missing_since: dict[str, float] = {}

        def read() -> list[InstanceRecord]:
            """The records found; those missing for ``lost_after`` written back lost."""
            while True:
                found = self.store.list_instances(uuids)
                now = time.monotonic()
                have = {r.uuid for r in found}
                for uuid in uuids:
                    if uuid in have:
                        missing_since.pop(uuid, None)
                    else:
                        missing_since.setdefault(uuid, now)
                vanished = [u for u, t in missing_since.items() if now - t >= self.lost_after]
                if not vanished:
                    return found
                self._record_lost(vanished)
                for uuid in vanished:
                    del missing_since[uuid]

        found, timed_out = wait_for(
            read,
            lambda found: len(found) == len(uuids) and all(r.state in FINAL_STATES for r in found),
            timeout,
            poll,
            store_down=lambda exc: LOG.warning("boot_wait_store_unavailable", error=exc.message),
        )
        return BootReport(
            instances=found,
            seconds=time.monotonic() - started,
            requests=self.requests,
            timed_out=timed_out,
            group=self.group,
        )

    def _record_lost(self, uuids: Sequence[str]) -> None:
        """Write back in ERROR the records that vanished (one re-created meanwhile
        is kept as it is: the write is set-if-absent)."""
        now = time.time()
        self.store.create_instances(
            InstanceRecord(
                uuid=u,
                state=ERROR,
                task_state=None,
                fault=LOST_FAULT,
                fault_details=(
                    f"the record vanished from the store and was not re-created within "
                    f"{self.lost_after:g} s (no compute reported running it)"
                ),
                created_at=now,
                updated_at=now,
            )
            for u in uuids
        )
        for u in uuids:
            LOG.warning("instance_lost", instance_uuid=u)


def select_and_build(
    store: ConductorStore,
    scheduler: SchedulerClient,
    compute: ComputeClient,
    ctxt: RequestContext,
    spec: RequestSpec,
    uuids: Sequence[str],
    return_alternates: bool = True,
) -> None:
    """Select, then cast the builds (one cast per compute process the hosts
    are served by). A refusal or no valid host puts the
    instances in ERROR (the user reads what the policy allows, the admin
    details say why), or, no valid host for one that waits for capacity,
    PENDING (:func:`~conductor_stub.pending.park`); no answer leaves their
    records' deadlines to re-drive them; an instance deleted meanwhile gets
    no host and no build."""
    try:
        selections = scheduler.select_destinations(
            ctxt, spec, uuids, return_alternates=return_alternates
        )
    except REFUSALS as exc:
        waiting = (
            {r.uuid: r for r in store.list_instances(uuids) if pending.waits(r)}
            if isinstance(exc, NoValidHost)
            else {}
        )
        for uuid in uuids:
            if uuid in waiting:
                pending.park(store, waiting[uuid], policy.admin_details(exc))
            else:
                records.fail_build(store, uuid, policy.user_reason(exc), policy.admin_details(exc))
        return
    except NO_ANSWER as exc:
        LOG.warning(
            "select_destinations_timed_out", instance_uuids=list(uuids), error=type(exc).__name__
        )
        return
    # One cast per compute process; an instance deleted meanwhile (no
    # Selection: nothing was claimed for it) gets none.
    compute.build_and_run_instances(ctxt, spec, list(zip(uuids, selections, strict=True)))


class Builder(ReschedulingTask):
    """The conductor's side of builds: their results and reschedules."""

    state = BUILDING
    kind = "build"
    failures = "build(s) failed, hosts tried"

    def build_succeeded(
        self, uuid: str, host: str, node: str, availability_zone: str | None
    ) -> None:
        """Built on ``host``: see :func:`~scheduler.build_results.record_built`."""
        record_built(self.store, uuid, host, node, availability_zone, self._clock)

    def schedule_failed(self, uuid: str, reason: str, details: str) -> None:
        """The scheduler found no host for the instance, or refused it: ERROR,
        or PENDING if it found no host and waits for capacity
        (:func:`~conductor_stub.pending.park`), unless another copy of a
        re-driven request placed it (that one reports)."""
        if self.store.get_consumer(uuid) is not None:
            LOG.info("schedule_failed_superseded", instance_uuid=uuid)
            return
        if pending.no_valid_host(reason):
            record = self.store.get_instance(uuid)
            if pending.waits(record):
                pending.park(self.store, record, details, clock=self._clock)
                return
        records.fail_build(self.store, uuid, reason, details, clock=self._clock)

    def build_failed(
        self,
        ctxt: Any,
        uuid: str,
        spec: RequestSpec,
        failed_host: str,
        reason: str,
        alternates: list[Selection],
    ) -> None:
        """The build on ``failed_host`` failed (its claim released there): count
        it, then build on the next alternate that can be claimed, or where
        the scheduler asked again places it, or give up (:meth:`reschedule`)."""
        record = self.store.get_instance(uuid)
        if record.state != BUILDING:
            LOG.info("reschedule_ignored", state=record.state)
            return
        if self.store.get_consumer(uuid) is not None:
            LOG.info("reschedule_superseded")
            return
        retry = self.count_failure(
            record, failed_host, reason, task_state=SPAWNING, **records.placed_on()
        )
        if retry is not None:
            self.reschedule(ctxt, retry, spec, alternates)

    def timeout(self) -> float:
        return self.settings.build_timeout

    def cast_to(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        LOG.info("rescheduled", alternate=hosts[0].host, attempts=retry.attempts)
        self._build(ctxt, retry, spec.replace(num_instances=1), hosts)

    def cast_again(self, ctxt: Any, retry: Retry, spec: RequestSpec, host: Selection) -> None:
        LOG.info(
            "rescheduled_via_scheduler",
            host=host.host,
            attempts=retry.attempts,
            ignored=list(spec.ignore_hosts),
        )
        self._build(ctxt, retry, spec, [host])

    def _build(self, ctxt: Any, retry: Retry, spec: RequestSpec, hosts: list[Selection]) -> None:
        self.compute.build_and_run_instance(ctxt, retry.record.uuid, spec, hosts[0], hosts[1:])

    def retry_spec(self, retry: Retry, spec: RequestSpec) -> RequestSpec:
        """The build's own request spec, for one instance, the hosts tried ignored."""
        ignore = tuple(dict.fromkeys((*spec.ignore_hosts, *retry.tried)))
        return spec.replace(num_instances=1, ignore_hosts=ignore)

    def placed(self, uuid: str, selection: Selection, **where: Any) -> bool:
        """The record names where the instance is being built; a build given up
        meanwhile has the claim just made released (it is no one's)."""
        here = records.placed_on(selection.host, selection.node, selection.availability_zone)
        if super().placed(uuid, selection, **here, **where):
            return True
        self.store.release(uuid)
        return False

    def fail(self, retry: Retry, fault: str, details: str) -> bool:
        """BUILDING -> ERROR, the attempts counted so far written with it."""
        self.store.update_instance(
            retry.record.uuid,
            expected_states=[BUILDING],
            attempts=retry.attempts,
            tried_hosts=retry.tried,
        )
        return records.fail_build(self.store, retry.record.uuid, fault, details, clock=self._clock)

    def give_up(self, retry: Retry, exc: SchedulerError, details: str) -> bool:
        if not super().give_up(retry, exc, details):
            return False
        exhausted = isinstance(exc, MaxRetriesExceeded)
        LOG.warning(
            "max_retries_exceeded" if exhausted else "reschedule_failed",
            attempts=retry.attempts,
            tried=retry.tried,
            error=type(exc).__name__,
        )
        return True
