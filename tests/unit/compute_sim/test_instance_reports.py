"""What a compute simulator reports its hosts really run (one write for all of
them), VM by VM through a build, a resize and its revert or confirm, a delete;
and what it does when the reconciler asks it to reap a VM."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from compute_sim.cmd import _report_loop
from compute_sim.health import ReportFreshness
from compute_sim.hosts import HostShape, provider_uuid
from compute_sim.ops.destroy import LOG_ONLY
from compute_sim.simulator import ComputeSimulator
from scheduler.exceptions import StoreUnavailable
from scheduler.objects import (
    DELETING,
    DELETING_TASK,
    ERROR,
    RESIZE_CONFIRMING,
    RESIZE_REVERTING,
    RESIZED,
    RESIZING,
    SHELVING,
    AllocationRequest,
    Selection,
)
from scheduler.rpc import RequestContext
from scheduler.store import InstanceReport, MemoryStore, RunningInstance
from scheduler.store.records import ENDED_DELETE, ENDED_OFFLOAD
from tests.fixtures import simulator
from tests.fixtures.simulator import CTXT, INSTANCE, MIGRATION, SPEC, Sim
from tests.unit.factories import Recorded, uuid_of

#: The simulator suite's fixture.
make = simulator.make

BIGGER = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
BUILT = RunningInstance(INSTANCE, SPEC.resources, "p", "u", "req-sim", None)


def reported(sim: Sim) -> dict[str, tuple[RunningInstance, ...]]:
    """host -> the VMs its last report lists."""
    sim.sim.report_instances()
    return {r.host: r.instances for r in sim.store.instance_reports()}


def bigger(host: str) -> Selection:
    return Selection(
        host=host,
        node=host,
        provider_uuid=provider_uuid(host),
        allocation_request=AllocationRequest({provider_uuid(host): BIGGER}, "p", "u"),
        weight=0.0,
    )


def resized(sim: Sim) -> None:
    """INSTANCE built on h1, then resized (to BIGGER) onto h2: RESIZED there."""
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.store.move_allocations(INSTANCE, MIGRATION)  # the scheduler parks the source's
    sim.store.claim(INSTANCE, bigger("h2").allocation_request)
    sim.record(state=RESIZING, host="h1", source_host="h1", migration_uuid=MIGRATION)
    resize_ctxt = RequestContext(request_id="req-resize")
    sim.sim.prep_resize(
        resize_ctxt,
        INSTANCE,
        MIGRATION,
        SPEC.flavor.to_primitive(),
        SPEC.to_primitive(),
        bigger("h2").to_primitive(),
        [],
    )
    sim.wait("resize_instance")
    sim.sim.resize_instance(resize_ctxt, INSTANCE, MIGRATION, "h2", "h2")
    sim.wait("finish_resize")
    sim.sim.finish_resize(resize_ctxt, INSTANCE, MIGRATION, "h2", "h2")
    sim.record(state=RESIZED, task_state=None, host="h2")  # the conductor's part


def test_every_host_is_reported_in_one_write_and_a_build_lists_its_vm(make: Any) -> None:
    sim = make(build_time=0.0)
    writes: list[list[InstanceReport]] = []
    write = sim.store.report_instances
    sim.store.report_instances = lambda reports: writes.append(list(reports)) or write(reports)
    assert reported(sim) == {"h1": (), "h2": (), "h3": ()}
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    assert reported(sim) == {"h1": (BUILT,), "h2": (), "h3": ()}
    assert [len(w) for w in writes] == [3, 3], "one write of every host per report"


def test_a_resize_reports_the_new_amounts_under_its_migration_until_it_ends(make: Any) -> None:
    sim = make(build_time=0.0)
    resized(sim)
    moving = RunningInstance(INSTANCE, BIGGER, "p", "u", "req-resize", MIGRATION)
    assert reported(sim) == {"h1": (), "h2": (moving,), "h3": ()}
    # Confirmed: the record no longer names the migration, so neither does the report.
    sim.record(state="ACTIVE", task_state=None, migration_uuid=None, source_host=None)
    assert reported(sim)["h2"] == (RunningInstance(INSTANCE, BIGGER, "p", "u", "req-resize"),)


def test_a_revert_reports_the_vm_on_its_source_with_the_amounts_it_had(make: Any) -> None:
    sim = make(build_time=0.0)
    resized(sim)
    sim.record(task_state="resize_reverting")
    revert = RequestContext(request_id="req-revert")
    sim.sim.revert_resize(revert, INSTANCE, MIGRATION)
    (_, source, *_), _ = sim.compute.last("finish_revert_resize")
    sim.sim.finish_revert_resize(revert, INSTANCE, MIGRATION, str(source))
    back = RunningInstance(INSTANCE, SPEC.resources, "p", "u", "req-revert", None)
    assert reported(sim) == {"h1": (back,), "h2": (), "h3": ()}


def test_a_revert_in_a_process_that_forgot_the_source_vm_reports_what_it_holds(
    make: Any,
) -> None:
    source = make(build_time=0.0)
    source.claim(INSTANCE, "h1")
    source.record(
        state=RESIZED,
        task_state=RESIZE_REVERTING,
        host="elsewhere-1",
        source_host="h1",
        migration_uuid=MIGRATION,
    )
    source.sim.finish_revert_resize(CTXT, INSTANCE, MIGRATION, "h1")
    assert reported(source)["h1"] == (BUILT,)


def test_a_delete_leaves_the_host_reporting_nothing(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.record(state=DELETING, task_state=DELETING_TASK, pending_hosts=("h1",))
    sim.sim.terminate_instance(CTXT, INSTANCE, "h1")
    assert reported(sim) == {"h1": (), "h2": (), "h3": ()}


def test_a_delete_and_a_shelve_leave_a_tombstone_in_their_hosts_report(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    before = time.time()
    sim.record(state=SHELVING, task_state=None, host="h1")
    sim.sim.shelve_offload_instance(CTXT, INSTANCE, "h1")
    sim.sim.report_instances()
    ended = {r.host: r.ended for r in sim.store.instance_reports()}
    assert [(e.uuid, e.what) for e in ended["h1"]] == [(INSTANCE, ENDED_OFFLOAD)]
    assert ended["h1"][0].at >= before and ended["h2"] == ()
    # A delete reaching the same host later replaces the tombstone.
    sim.record(state=DELETING, task_state=DELETING_TASK, pending_hosts=("h1",))
    sim.sim.terminate_instance(CTXT, INSTANCE, "h1")
    sim.sim.report_instances()
    [report] = [r for r in sim.store.instance_reports() if r.host == "h1"]
    assert [(e.uuid, e.what) for e in report.ended] == [(INSTANCE, ENDED_DELETE)]
    assert report.instances == ()


def test_a_resize_re_driven_after_its_revert_starts_again_never_reports_done(
    make: Any,
) -> None:
    """A store gone back to before the revert re-drives the prep: the VM does
    not run on the destination any more, so the prep must not answer
    "finished" (the record would go RESIZED where nothing runs)."""
    sim = make(build_time=0.0)
    resized(sim)
    sim.record(task_state="resize_reverting")
    revert = RequestContext(request_id="req-revert")
    sim.sim.revert_resize(revert, INSTANCE, MIGRATION)
    (_, source, *_), _ = sim.compute.last("finish_revert_resize")
    sim.sim.finish_revert_resize(revert, INSTANCE, MIGRATION, str(source))
    # The store went back: RESIZING again, its claims as they were.
    sim.store.move_allocations(INSTANCE, MIGRATION, replace=True)
    sim.store.claim(INSTANCE, bigger("h2").allocation_request)
    sim.record(state=RESIZING, task_state=None, host="h1", migration_uuid=MIGRATION)
    results = sim.conductor.names.count("resize_result")
    sim.sim.prep_resize(
        RequestContext(request_id="req-resize"),
        INSTANCE,
        MIGRATION,
        SPEC.flavor.to_primitive(),
        SPEC.to_primitive(),
        bigger("h2").to_primitive(),
        [],
    )
    sim.wait("resize_instance", count=2)
    assert sim.conductor.names.count("resize_result") == results, "no 'already finished'"


def test_a_vm_a_resize_took_off_its_source_runs_there_again_once_the_move_is_gone(
    make: Any,
) -> None:
    """The source stopped the VM (``resize_instance``), then the move was given
    up or forgotten (the record ACTIVE on the source, no migration): the VM
    runs on the source again before the next report; not while it moves."""
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.record(state=RESIZING, host="h1", source_host="h1", migration_uuid=MIGRATION)
    sim.store.move_allocations(INSTANCE, MIGRATION)
    sim.store.claim(INSTANCE, bigger("h2").allocation_request)
    sim.sim.resize_instance(CTXT, INSTANCE, MIGRATION, "h2", "h2")
    assert reported(sim)["h1"] == ()  # moving: it stays off
    sim.store.move_allocations(MIGRATION, INSTANCE, replace=True)
    sim.record(state="ACTIVE", task_state=None, migration_uuid=None, source_host=None)
    [again] = reported(sim)["h1"]
    assert (again.uuid, again.migration_uuid) == (INSTANCE, None)
    assert reported(sim)["h2"] == ()


def test_a_confirm_is_reported_by_the_record_not_by_the_source(make: Any) -> None:
    """The destination's process hears of no confirm (it goes to the source):
    its report drops the migration once the record does."""
    sim = make(build_time=0.0)
    resized(sim)
    sim.record(task_state=RESIZE_CONFIRMING)
    sim.sim.confirm_resize(CTXT, INSTANCE, MIGRATION)
    assert reported(sim)["h2"][0].migration_uuid == MIGRATION  # the conductor not done yet
    sim.record(state="ACTIVE", task_state=None, migration_uuid=None)
    assert reported(sim)["h2"][0].migration_uuid is None


# --- reaping ----------------------------------------------------------------------------


def built(sim: Sim) -> None:
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")


def test_reap_destroys_the_vm_once_and_reports_nothing(make: Any) -> None:
    sim = make(build_time=0.0)
    built(sim)
    sim.record(state=ERROR, task_state=None)
    calls = len(sim.conductor.calls)
    sim.sim.reap_instance(CTXT, INSTANCE, "h1", "instance is ERROR")
    sim.sim.reap_instance(CTXT, INSTANCE, "h1", "instance is ERROR")  # idempotent
    assert sim.sim.hosts_running(INSTANCE) == []
    assert len(sim.conductor.calls) == calls, "the conductor is told nothing"
    assert sim.store.get_consumer(INSTANCE) is not None, "allocations are the reconciler's"


@pytest.mark.parametrize(
    "instance, host",
    [
        pytest.param(INSTANCE, "elsewhere-1", id="a-host-of-another-process"),
        pytest.param("not-running", "h1", id="a-vm-not-running-there"),
        pytest.param(INSTANCE, "h2", id="a-vm-running-on-another-host"),
    ],
)
def test_reap_of_what_is_not_here_does_nothing(make: Any, instance: str, host: str) -> None:
    sim = make(build_time=0.0)
    built(sim)
    sim.record(state=ERROR, task_state=None)  # a stray, were it where the reap says
    sim.sim.reap_instance(CTXT, instance, host, "no record")
    assert sim.sim.hosts_running(INSTANCE) == ["h1"]


def test_running_deleted_instance_action_log_only_logs(make: Any) -> None:
    sim = make(build_time=0.0)
    sim.sim.running_deleted_instance_action = LOG_ONLY
    built(sim)
    sim.record(state=ERROR, task_state=None)
    sim.sim.reap_instance(CTXT, INSTANCE, "h1", "instance is ERROR")
    assert sim.sim.hosts_running(INSTANCE) == ["h1"]


@pytest.mark.parametrize(
    ("option", "match"),
    [
        (
            {"running_deleted_instance_action": "shutdown"},
            "running_deleted_instance_action must be reap or log",
        ),
        ({"build_results": "mail"}, "build_results must be one of store, cast"),
    ],
)
def test_an_unknown_choice_is_refused(option: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ComputeSimulator(
            MemoryStore(),
            Recorded(),  # type: ignore[arg-type]
            ["h1"],
            "sim",
            HostShape(),
            **option,  # type: ignore[arg-type]
        )


# --- the daemon's report loop -----------------------------------------------------------


def test_the_report_loop_reports_at_once_and_again_after_a_failure() -> None:
    stop = threading.Event()
    done = threading.Event()
    outcomes: list[str] = []

    class Flaky:
        freshness = ReportFreshness(60.0)

        def report_instances(self) -> None:
            outcomes.append("called")
            if len(outcomes) == 1:
                raise StoreUnavailable(reason="down")
            if len(outcomes) == 3:
                stop.set()
                done.set()

    thread = threading.Thread(target=_report_loop, args=(Flaky(), 0.01, stop))
    thread.start()
    assert done.wait(5)
    thread.join(5)
    assert outcomes == ["called"] * 3 and not thread.is_alive()


def test_a_confirm_on_the_source_forgets_the_vm_a_revert_would_have_run(make: Any) -> None:
    sim = make(build_time=0.0)
    resized(sim)
    assert MIGRATION in sim.sim.resize.resized_away
    sim.record(task_state=RESIZE_CONFIRMING)
    sim.sim.confirm_resize(CTXT, INSTANCE, MIGRATION)
    assert sim.sim.resize.resized_away == {}


def test_a_report_after_an_outage_first_destroys_the_vms_evacuated_meanwhile(
    make: Any,
) -> None:
    sim = make(build_time=0.0)
    built(sim)
    sim.record(state="ACTIVE", host="h2")  # evacuated to h2 while this process was down
    assert sim.sim._last_beat is not None
    sim.sim._last_beat -= sim.sim.service_down_time + 1
    assert reported(sim)["h1"] == ()
    assert sim.sim.hosts_running(INSTANCE) == []


# --- one bad entry (issue 35) ---------------------------------------------------------


def test_a_report_with_one_bad_entry_still_reports_the_rest(make: Any, caplog: Any) -> None:
    """A VM the driver runs under a uuid that is not one (the issue's ``5``, as
    a forged step once started) and a tombstone that names nothing are dropped
    and logged; the rest of every host's report is written."""
    sim = make(build_time=0.0)
    sim.claim(INSTANCE, "h1")
    sim.build("h1")
    sim.wait("build_succeeded")
    sim.sim.vms.start(RunningInstance(5), "h1")  # type: ignore[arg-type]
    sim.sim.vms.start(RunningInstance("not-a-uuid", {"VCPU": -1}), "h2")
    sim.sim.vms.start(RunningInstance(MIGRATION, {"VCPU": True}), "h2")  # type: ignore[dict-item]
    other = RunningInstance(uuid_of("other"), {"VCPU": 1}, "p", "u")
    sim.sim.vms.start(other, "h2")
    sim.sim.ledger.ended(uuid_of("gone"), "h3", ENDED_DELETE)
    sim.sim.ledger.ended(7, "h3", ENDED_DELETE)  # type: ignore[arg-type]
    got = reported(sim)
    assert [vm.uuid for vm in got["h1"]] == [INSTANCE]
    assert [vm.uuid for vm in got["h2"]] == [other.uuid]
    assert got["h3"] == ()
    [h3] = [r for r in sim.store.instance_reports() if r.host == "h3"]
    assert [e.uuid for e in h3.ended] == [uuid_of("gone")]
    dropped = [r.getMessage() for r in caplog.records if "report_entry_dropped" in r.getMessage()]
    assert len(dropped) == 4
    assert sim.sim.freshness.fresh()


def test_a_host_the_driver_cannot_list_is_left_out_and_the_others_report(
    make: Any, caplog: Any
) -> None:
    sim = make(build_time=0.0)
    listing = sim.sim.driver.list_instances

    def broken(host: str) -> list[str]:
        if host == "h2":
            raise RuntimeError("cannot list")
        return listing(host)

    sim.sim.driver.list_instances = broken
    assert sorted(reported(sim)) == ["h1", "h3"]
    assert any("host_listing_failed" in r.getMessage() for r in caplog.records)
