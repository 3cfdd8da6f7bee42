"""The conductor: owner of instance records, receiver of results, rescheduler.

:class:`ConductorEndpoint` serves topic ``conductor``: build results from
compute, scheduling failures from the scheduler. A reschedule claims the next
alternate with nothing but what its Selection holds and casts the build
there, with no scheduler round trip; an alternate whose resources were taken
meanwhile is skipped, and so is one a strict server-group policy now forbids
(the claim carries the group check, exactly as the scheduler's claim does, so
a reschedule cannot put two anti-affinity members on one host). When the
alternates run out the instance goes to ERROR with "max retries exceeded",
distinct from "no valid host".

What a user reads (``fault``) is generic; which hosts were tried and why they
failed goes to the admin-only ``fault_details``.

:class:`Booter` is the API side: it creates instance records, sends the
scheduling RPCs and waits for every instance to reach a final state.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import oslo_messaging

from scheduler.exceptions import (
    ClaimFailed,
    Forbidden,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    ProviderNotFound,
)
from scheduler.log import bind_request, get_logger
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    ERROR,
    FINAL_STATES,
    Flavor,
    InstanceRecord,
    RequestSpec,
    Selection,
    ServerGroup,
)
from scheduler.rpc import ComputeClient, RequestContext, SchedulerClient
from scheduler.store import GroupClaim, Store

LOG = get_logger(__name__)


def group_claim(spec: RequestSpec, host: str) -> GroupClaim | None:
    """The server-group check a claim of ``spec`` on ``host`` must carry.

    The same rule as the scheduler's claims: strict policies are checked (and
    the consumer recorded as a member) inside the atomic claim.
    """
    group = spec.group
    if group is None or not group.is_strict:
        return None
    return GroupClaim(group.uuid, group.policy, host, group.max_server_per_host)


class ConductorEndpoint:
    """topic ``conductor``: build_succeeded, reschedule, schedule_failed, resize_result."""

    target = oslo_messaging.Target(version="1.0")

    def __init__(self, store: Store, compute: ComputeClient) -> None:
        self.store = store
        self.compute = compute

    def build_succeeded(self, ctxt: Any, instance_uuid: str, host: str, node: str) -> None:
        with bind_request(request_id=getattr(ctxt, "request_id", None),
                          instance_uuid=instance_uuid, host=host):
            record = self.store.get_instance(instance_uuid)
            done = self.store.update_instance(
                instance_uuid, expected_states=[BUILDING], state=ACTIVE, task_state=None,
                host=host, node=node, attempts=record.attempts + 1, updated_at=time.time())
            LOG.info("instance_active" if done else "late_build_result_ignored")

    def reschedule(self, ctxt: Any, instance_uuid: str, request_spec: dict[str, Any],
                   failed_host: str, reason: str, host_list: list[dict[str, Any]]) -> None:
        with bind_request(request_id=getattr(ctxt, "request_id", None),
                          instance_uuid=instance_uuid, failed_host=failed_host):
            record = self.store.get_instance(instance_uuid)
            if record.state != BUILDING:
                LOG.info("reschedule_ignored", state=record.state)
                return
            attempts = record.attempts + 1
            tried = (*record.tried_hosts, failed_host)
            spec = RequestSpec.from_primitive(request_spec)
            alternates = [Selection.from_primitive(s) for s in host_list]
            skipped: list[str] = []
            for i, alternate in enumerate(alternates):
                try:
                    self.store.claim(instance_uuid, alternate.allocation_request,
                                     group_claim(spec, alternate.host))
                except (ClaimFailed, ProviderNotFound) as exc:
                    # Taken meanwhile by someone else (or gone): try the next one.
                    LOG.info("alternate_skipped", alternate=alternate.host,
                             reason=type(exc).__name__)
                    skipped.append(f"{alternate.host} ({type(exc).__name__})")
                    continue
                self.store.update_instance(instance_uuid, expected_states=[BUILDING],
                                           attempts=attempts, host=alternate.host,
                                           tried_hosts=tried, updated_at=time.time())
                LOG.info("rescheduled", alternate=alternate.host, attempts=attempts)
                self.compute.build_and_run_instance(ctxt, instance_uuid, spec, alternate,
                                                    alternates[i + 1:])
                return
            self.store.update_instance(
                instance_uuid, expected_states=[BUILDING], state=ERROR, task_state=None,
                attempts=attempts, host=None, tried_hosts=tried,
                fault=MaxRetriesExceeded.USER_MESSAGE,
                fault_details=f"max retries exceeded; hosts tried: {', '.join(tried)}; "
                f"last failure: {reason}"
                + (f"; alternates refused: {', '.join(skipped)}" if skipped else ""),
                updated_at=time.time())
            LOG.warning("max_retries_exceeded", attempts=attempts, tried=tried,
                        skipped=skipped)

    def schedule_failed(self, ctxt: Any, instance_uuids: list[str], reason: str,
                        details: str) -> None:
        with bind_request(request_id=getattr(ctxt, "request_id", None)):
            for uuid in instance_uuids:
                self.store.update_instance(uuid, expected_states=[BUILDING], state=ERROR,
                                           task_state=None, fault=reason,
                                           fault_details=details, updated_at=time.time())
            LOG.info("schedule_failed", instance_uuids=instance_uuids, reason=reason)

    def resize_result(self, ctxt: Any, instance_uuid: str, migration_uuid: str,
                      host: str | None, success: bool, reason: str | None = None) -> None:
        with bind_request(request_id=getattr(ctxt, "request_id", None),
                          instance_uuid=instance_uuid):
            LOG.info("resize_result", migration_uuid=migration_uuid, host=host, success=success,
                     reason=reason)


@dataclass
class BootReport:
    """What a boot ended with, per instance, and the totals."""

    instances: list[InstanceRecord]
    seconds: float
    requests: int
    timed_out: bool = False
    by_state: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.by_state = Counter(r.state for r in self.instances)

    @property
    def rescheduled(self) -> int:
        return sum(1 for r in self.instances if r.attempts > 1)

    @property
    def no_valid_host(self) -> int:
        return sum(1 for r in self.instances if r.fault == NoValidHost.USER_MESSAGE)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "summary": {"total": len(self.instances), "states": dict(self.by_state),
                        "rescheduled": self.rescheduled, "no_valid_host": self.no_valid_host,
                        "seconds": round(self.seconds, 3), "requests": self.requests,
                        "timed_out": self.timed_out},
            "instances": [{"uuid": r.uuid, "state": r.state, "host": r.host,
                           "attempts": r.attempts, "fault": r.fault} for r in self.instances],
        }


class Booter:
    """Boots instances the way an API + conductor would, and waits for them."""

    def __init__(self, store: Store, scheduler: SchedulerClient, compute: ComputeClient) -> None:
        self.store = store
        self.scheduler = scheduler
        self.compute = compute
        self.requests = 0

    def boot(self, ctxt: RequestContext, flavor: Flavor, count: int, *,
             per_request: int = 1, mode: str = "run_instance",
             group_policy: str | None = None, availability_zone: str | None = None,
             project_id: str = "demo", user_id: str = "demo") -> list[str]:
        """Create the records and send the requests; return the instance uuids."""
        group = (ServerGroup(uuid=str(uuidlib.uuid4()), policy=group_policy)
                 if group_policy else None)
        uuids: list[str] = []
        for start in range(0, count, per_request):
            n = min(per_request, count - start)
            batch = [str(uuidlib.uuid4()) for _ in range(n)]
            spec = RequestSpec(flavor=flavor, project_id=project_id, user_id=user_id,
                               num_instances=n, group=group,
                               availability_zone=availability_zone)
            now = time.time()
            self.store.create_instances(
                InstanceRecord(uuid=u, request_spec=spec.to_primitive(), created_at=now,
                               updated_at=now) for u in batch)
            req_ctxt = RequestContext(user_id=user_id, project_id=project_id,
                                      roles=list(ctxt.roles), is_admin=ctxt.is_admin)
            if mode == "run_instance":
                self.scheduler.run_instance(req_ctxt, spec, batch)
            else:
                self._select_and_build(req_ctxt, spec, batch)
            uuids.extend(batch)
            self.requests += 1
        return uuids

    def _select_and_build(self, ctxt: RequestContext, spec: RequestSpec,
                          uuids: Sequence[str]) -> None:
        """Nova's modern flow: ask for destinations, then cast the builds ourselves."""
        try:
            selections = self.scheduler.select_destinations(ctxt, spec, uuids)
        except NoValidHost as exc:
            self._failed(uuids, NoValidHost.USER_MESSAGE, exc.details)
            return
        except (InvalidRequest, Forbidden) as exc:
            self._failed(uuids, exc.message, exc.message)
            return
        single = spec.replace(num_instances=1)
        for uuid, per_instance in zip(uuids, selections, strict=True):
            self.compute.build_and_run_instance(ctxt, uuid, single, per_instance[0],
                                                per_instance[1:])

    def _failed(self, uuids: Sequence[str], fault: str, details: str) -> None:
        for uuid in uuids:
            self.store.update_instance(uuid, expected_states=[BUILDING], state=ERROR,
                                       task_state=None, fault=fault, fault_details=details,
                                       updated_at=time.time())

    def wait(self, uuids: Sequence[str], timeout: float, started: float,
             poll: float = 0.1) -> BootReport:
        deadline = time.monotonic() + timeout
        while True:
            records = self.store.list_instances(uuids)
            done = all(r.state in FINAL_STATES for r in records) and len(records) == len(uuids)
            if done or time.monotonic() >= deadline:
                return BootReport(instances=records, seconds=time.monotonic() - started,
                                  requests=self.requests, timed_out=not done)
            time.sleep(poll)
