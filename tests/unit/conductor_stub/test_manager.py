"""The conductor's side of failures: reschedules keep the group policy, and a
user reads only generic faults while the admin details say what happened."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kombu.exceptions
import oslo_messaging
import pytest

from conductor_stub.findings import LOST_FAULT
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.tasks.build import UNSENT_FAULT, Booter
from scheduler.exceptions import (
    BrokerUnreachable,
    Forbidden,
    InternalError,
    InvalidRequest,
    MaxRetriesExceeded,
    NoValidHost,
    SchedulerUnavailable,
)
from scheduler.objects import (
    ERROR,
    MAX_INSTANCES_PER_REQUEST,
    AllocationRequest,
    InstanceRecord,
    RequestSpec,
    Selection,
)
from scheduler.policy import INTERNAL_ERROR_MESSAGE
from scheduler.rpc import RequestContext
from scheduler.store.base import GroupClaim
from scheduler.store.memory import MemoryStore
from tests.unit.factories import GROUP_UUID, group, host, populate, spec, uuid_of

HOSTS = ("cmp-a", "cmp-b", "cmp-c")
CTXT = RequestContext(request_id="req-1", user_id="u", project_id="p")


class Compute:
    def __init__(self) -> None:
        self.builds: list[tuple[str, str, list[str]]] = []
        self.batches: list[list[tuple[str, list[str]]]] = []

    def build_and_run_instance(
        self,
        ctxt: Any,
        instance_uuid: str,
        spec: RequestSpec,
        selection: Selection,
        alternates: list[Selection],
    ) -> None:
        self.builds.append((instance_uuid, selection.host, [a.host for a in alternates]))

    def build_and_run_instances(
        self, ctxt: Any, spec: RequestSpec, placed: list[tuple[str, list[Selection]]]
    ) -> None:
        self.batches.append([(uuid, [s.host for s in chosen]) for uuid, chosen in placed])


def _store(ram: int = 4096) -> MemoryStore:
    store = MemoryStore()
    populate(store, [host(name, ram=ram) for name in HOSTS])
    return store


def _selection(name: str, ram: int = 1024) -> Selection:
    rp = uuid_of(name)
    return Selection(
        host=name,
        node=name,
        provider_uuid=rp,
        weight=0.0,
        allocation_request=AllocationRequest({rp: {"MEMORY_MB": ram}}, "p", "u"),
    )


def _reschedule(
    store: MemoryStore,
    request: RequestSpec,
    alternates: list[str],
    ram: int = 1024,
    failed_before: int = 1,
    scheduler: Any = None,
) -> tuple[InstanceRecord, Compute]:
    uuid = uuid_of("rescheduled")
    store.create_instances(
        [InstanceRecord(uuid=uuid, attempts=failed_before, tried_hosts=("cmp-x",) * failed_before)]
    )
    compute = Compute()
    ConductorEndpoint(store, compute, scheduler).reschedule(  # type: ignore[arg-type]
        CTXT,
        uuid,
        request.to_primitive(),
        "cmp-failed",
        "simulated build failure",
        [_selection(a, ram).to_primitive() for a in alternates],
    )
    return store.get_instance(uuid), compute


@pytest.mark.parametrize(
    "policy", ["anti-affinity", "affinity", "soft-anti-affinity", "soft-affinity"]
)
def test_an_instance_rescheduled_onto_an_alternate_stays_a_member_of_its_group(
    policy: str,
) -> None:
    # Soft groups too: their weighers read where the group's members are.
    store = _store()
    record, compute = _reschedule(store, spec(group=group(policy)), ["cmp-a"])
    assert record.host == "cmp-a" and compute.builds == [(record.uuid, "cmp-a", [])]
    assert store.group_hosts(GROUP_UUID) == {"cmp-a": 1}
    assert store.get_consumer(record.uuid).group_uuid == GROUP_UUID  # type: ignore[union-attr]


def test_an_alternate_claim_of_a_request_with_no_group_records_no_member() -> None:
    store = _store()
    record, _ = _reschedule(store, spec(), ["cmp-a"])
    assert record.host == "cmp-a"
    assert store.get_consumer(record.uuid).group_uuid is None  # type: ignore[union-attr]


def test_a_reschedule_skips_an_alternate_the_anti_affinity_group_now_forbids() -> None:
    store = _store()
    # Another member of the group landed on cmp-a after the alternates were picked.
    store.claim(
        uuid_of("member"),
        _selection("cmp-a").allocation_request,
        GroupClaim(GROUP_UUID, "anti-affinity", "cmp-a"),
    )
    record, compute = _reschedule(store, spec(group=group("anti-affinity")), ["cmp-a", "cmp-b"])
    assert record.host == "cmp-b" and record.attempts == 2
    assert compute.builds == [(record.uuid, "cmp-b", [])]
    assert store.group_hosts(GROUP_UUID) == {"cmp-a": 1, "cmp-b": 1}


def _every_alternate_refused() -> MemoryStore:
    """cmp-a holds a member of the anti-affinity group, cmp-b is full."""
    store = _store(ram=2048)
    store.claim(
        uuid_of("member"),
        _selection("cmp-a").allocation_request,
        GroupClaim(GROUP_UUID, "anti-affinity", "cmp-a"),
    )
    store.claim(uuid_of("filler"), _selection("cmp-b", 2048).allocation_request)
    return store


def test_when_every_alternate_is_refused_the_user_reads_a_generic_fault() -> None:
    store = _every_alternate_refused()
    record, compute = _reschedule(
        store, spec(group=group("anti-affinity")), ["cmp-a", "cmp-b"], failed_before=2
    )
    assert record.state == ERROR and compute.builds == []
    assert record.fault == MaxRetriesExceeded.USER_MESSAGE
    assert not any(name in record.fault for name in (*HOSTS, "cmp-failed", GROUP_UUID))
    assert record.fault_details == (
        "max retries exceeded: 3 build(s) failed, hosts tried: cmp-x, cmp-x, cmp-failed; last "
        "failure: simulated build failure; alternates refused: cmp-a (GroupPolicyViolation), "
        "cmp-b (CapacityExceeded)"
    )
    assert store.get_consumer(record.uuid) is None


class NoHostLeft:
    """A scheduler that finds no host when asked again."""

    def __init__(self) -> None:
        self.asked: list[RequestSpec] = []

    def select_destinations(
        self, ctxt: Any, spec: RequestSpec, uuids: list[str], return_alternates: bool
    ) -> Any:
        self.asked.append(spec)
        raise NoValidHost(details="0/3 hosts available: 3 insufficient MEMORY_MB")


def test_alternates_refused_are_no_attempts_the_scheduler_is_asked_again() -> None:
    """Two builds failed of three, and every alternate is refused at its claim:
    the scheduler is asked again (the hosts tried ignored), and its answer is
    the fault, with the builds failed and the alternates refused."""
    store = _every_alternate_refused()
    scheduler = NoHostLeft()
    record, compute = _reschedule(
        store, spec(group=group("anti-affinity")), ["cmp-a", "cmp-b"], scheduler=scheduler
    )
    assert [s.ignore_hosts for s in scheduler.asked] == [("cmp-x", "cmp-failed")]
    assert record.state == ERROR and compute.builds == [] and record.attempts == 2
    assert record.fault == NoValidHost.USER_MESSAGE
    assert record.fault_details == (
        "0/3 hosts available: 3 insufficient MEMORY_MB (after 2 build(s) failed, hosts tried: "
        "cmp-x, cmp-failed; alternates refused: cmp-a (GroupPolicyViolation), cmp-b "
        "(CapacityExceeded))"
    )
    assert store.get_consumer(record.uuid) is None


def test_schedule_failed_keeps_the_fault_and_the_admin_details_apart() -> None:
    store = _store()
    uuid = uuid_of("failed")
    store.create_instances([InstanceRecord(uuid=uuid)])
    ConductorEndpoint(store, Compute()).schedule_failed(  # type: ignore[arg-type]
        CTXT, [uuid], NoValidHost.USER_MESSAGE, "0/3 hosts available: 3 insufficient MEMORY_MB"
    )
    record = store.get_instance(uuid)
    assert (record.state, record.fault, record.fault_details) == (
        ERROR,
        NoValidHost.USER_MESSAGE,
        "0/3 hosts available: 3 insufficient MEMORY_MB",
    )


class Scheduler:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def select_destinations(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error, fault, details",
    [
        pytest.param(
            NoValidHost(details="0/3 hosts available: 3 insufficient VCPU"),
            NoValidHost.USER_MESSAGE,
            "0/3 hosts available: 3 insufficient VCPU",
            id="no-valid-host",
        ),
        pytest.param(
            InvalidRequest(reason="flavor.vcpus must be an integer"),
            "invalid request: flavor.vcpus must be an integer",
            "invalid request: flavor.vcpus must be an integer",
            id="invalid-request",
        ),
        pytest.param(
            Forbidden(reason="forcing a host requires an admin context"),
            "forbidden: forcing a host requires an admin context",
            "forbidden: forcing a host requires an admin context",
            id="forbidden",
        ),
        pytest.param(
            InternalError(), INTERNAL_ERROR_MESSAGE, InternalError.msg, id="internal-error"
        ),
    ],
)
def test_select_destinations_mode_puts_refused_instances_in_error(
    error: Exception, fault: str, details: str
) -> None:
    store = _store()
    booter = Booter(store, Scheduler(error), Compute())  # type: ignore[arg-type]
    uuids = booter.boot(CTXT, spec().flavor, 2, per_request=2, mode="select_destinations")
    records = store.list_instances(uuids)
    assert [(r.state, r.fault, r.fault_details) for r in records] == [(ERROR, fault, details)] * 2


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(SchedulerUnavailable(), id="scheduler-cannot-reach-its-store"),
        pytest.param(oslo_messaging.MessagingTimeout(), id="no-answer"),
    ],
)
def test_select_destinations_mode_leaves_the_instances_to_the_redrive(error: Exception) -> None:
    """Not an answer about the request: the records keep building, with their
    deadlines, and the conductor re-drives them."""
    store = _store()
    booter = Booter(store, Scheduler(error), Compute())  # type: ignore[arg-type]
    uuids = booter.boot(CTXT, spec().flavor, 2, per_request=2, mode="select_destinations")
    records = store.list_instances(uuids)
    assert [(r.state, r.fault) for r in records] == [("BUILDING", None)] * 2
    assert all(r.deadline is not None for r in records)


class Placing:
    """A scheduler that places the instances in turn on ``hosts`` (an empty
    list: one deleted meanwhile, given no host)."""

    def __init__(self, *hosts: list[str]) -> None:
        self.hosts = hosts

    def select_destinations(self, ctxt: Any, spec: Any, uuids: Any, **_: Any) -> Any:
        return [[_selection(h) for h in self.hosts[i]] for i in range(len(uuids))]


def test_select_destinations_mode_casts_a_request_s_builds_together() -> None:
    """One batched cast for the request (the client sends one message per
    compute process); an instance given no host is in it, for the client to
    leave out."""
    store, compute = _store(), Compute()
    booter = Booter(store, Placing(["cmp-a", "cmp-b"], [], ["cmp-c"]), compute)  # type: ignore[arg-type]
    uuids = booter.boot(CTXT, spec().flavor, 3, per_request=3, mode="select_destinations")
    assert compute.batches == [
        [(uuids[0], ["cmp-a", "cmp-b"]), (uuids[1], []), (uuids[2], ["cmp-c"])]
    ]
    assert compute.builds == []


class Accepting:
    """A scheduler that takes every run_instance and answers nothing."""

    def run_instance(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_a_boot_whose_records_vanished_reports_them_lost_not_a_hang() -> None:
    store = _store()
    booter = Booter(store, Accepting(), Compute(), lost_after=0.3)  # type: ignore[arg-type]
    uuids = booter.boot(CTXT, spec().flavor, 3)
    kept, *gone = uuids
    store.update_instance(kept, state="ACTIVE", task_state=None)
    for uuid in gone:  # the store went back to before they were written
        store._instances.pop(uuid)
    report = booter.wait(uuids, timeout=30.0, started=0.0, poll=0.05)
    assert not report.timed_out and report.lost == 2
    lost = {r.uuid: r for r in store.list_instances(gone)}
    assert {(r.state, r.fault) for r in lost.values()} == {(ERROR, LOST_FAULT)}
    assert report.to_primitive()["summary"]["lost"] == 2


def test_a_vanished_record_that_comes_back_is_not_lost() -> None:
    store = _store()
    booter = Booter(store, Accepting(), Compute(), lost_after=30.0)  # type: ignore[arg-type]
    [uuid] = booter.boot(CTXT, spec().flavor, 1)
    record = store._instances.pop(uuid)
    recovered = False

    def poll_back(*args: Any) -> list[InstanceRecord]:
        nonlocal recovered
        if not recovered:  # the reconciler re-created it from a compute's report
            recovered = True
            return []
        store.create_instances([replace(record, state="ACTIVE", task_state=None)])
        return MemoryStore.list_instances(store, *args)

    store.list_instances = poll_back  # type: ignore[method-assign]
    report = booter.wait([uuid], timeout=5.0, started=0.0, poll=0.01)
    assert (report.lost, report.timed_out, report.by_state) == (0, False, {"ACTIVE": 1})


@pytest.mark.parametrize("per_request", [0, MAX_INSTANCES_PER_REQUEST + 1])
def test_a_request_size_the_scheduler_would_refuse_is_refused_before_anything_is_recorded(
    per_request: int,
) -> None:
    store = _store()
    booter = Booter(store, Scheduler(AssertionError("nothing sent")), Compute())  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match=f"between 1 and {MAX_INSTANCES_PER_REQUEST}"):
        booter.boot(CTXT, spec().flavor, per_request, per_request=per_request)
    assert list(store.scan_instances()) == []
    assert booter.requests == 0


class Unreachable:
    """A scheduler client whose broker went away: the send gives up."""

    def __init__(self) -> None:
        self.sent = 0

    def run_instance(self, *args: Any, **kwargs: Any) -> None:
        self.sent += 1
        if self.sent > 1:
            raise kombu.exceptions.OperationalError("[Errno 111] Connection refused")


def test_a_request_the_broker_did_not_take_leaves_no_record_to_boot_later() -> None:
    """Its records go to ERROR at once (before, they stayed BUILDING, and a
    conductor re-drove them long after the command was given up on)."""
    store = _store()
    scheduler = Unreachable()
    booter = Booter(store, scheduler, Compute())  # type: ignore[arg-type]
    with pytest.raises(BrokerUnreachable) as caught:
        booter.boot(CTXT, spec().flavor, 3, per_request=1)
    assert caught.value.message == (
        "the message broker stopped answering ([Errno 111] Connection refused); "
        "1 instance(s) not sent, set to ERROR"
    )
    by_state = sorted((r.state, r.fault) for r in store.scan_instances())
    # The first request went out and builds; the second is ERROR; no third was made.
    assert by_state == [("BUILDING", None), (ERROR, UNSENT_FAULT)]
