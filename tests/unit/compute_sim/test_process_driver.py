"""The process driver (:mod:`compute_sim.process`): each VM a real OS process,
listed from what runs, destroyed by killing it, none left once the compute
stops; and the compute manager over it, as over the simulator."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import alive
from compute_sim.driver import PowerState, VirtError
from compute_sim.hosts import HostShape
from compute_sim.manager import ComputeManager
from compute_sim.process import TAG, ProcessDriver
from scheduler.objects import ERROR, InstanceRecord
from scheduler.store import MemoryStore
from tests.fixtures.simulator import CTXT, INSTANCE, SPEC, selection
from tests.unit.factories import Recorded


@pytest.fixture
def driver() -> Iterator[ProcessDriver]:
    d = ProcessDriver()
    yield d
    d.cleanup_host()


def pid_of(driver: ProcessDriver, host: str, uuid: str) -> int:
    return driver._vms[host][uuid].pid


def command_line(pid: int) -> list[bytes]:
    """``pid``'s arguments as /proc shows them, once the kernel has set them:
    Popen returns when the child has released the parent's memory in its
    exec, and for a moment after that the new program's arguments read empty
    (seen once in the unit tier, load ~9)."""
    deadline = time.monotonic() + 5
    while not (raw := Path(f"/proc/{pid}/cmdline").read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return raw.split(b"\0")


def test_a_vm_is_a_tagged_process_listed_while_it_runs(driver: ProcessDriver) -> None:
    driver.spawn("h1", "vm-1")
    driver.spawn("h1", "vm-1")  # runs already: no second process
    driver.spawn("h2", "vm-2")
    pid = pid_of(driver, "h1", "vm-1")
    assert command_line(pid)[-4:-1] == [TAG.encode(), b"h1", b"vm-1"]
    assert (driver.list_instances("h1"), driver.list_instances("h2")) == (["vm-1"], ["vm-2"])
    assert driver.power_state("h1", "vm-1") is PowerState.RUNNING
    assert driver.power_state("h2", "vm-1") is PowerState.NOSTATE

    driver.destroy("h1", "vm-1")
    assert not alive(pid) and driver.list_instances("h1") == []
    assert driver.power_state("h1", "vm-1") is PowerState.NOSTATE
    driver.destroy("h1", "vm-1")  # idempotent


def test_a_vm_killed_from_outside_no_longer_runs(driver: ProcessDriver) -> None:
    driver.spawn("h1", "vm-1")
    pid = pid_of(driver, "h1", "vm-1")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while driver.list_instances("h1"):
        assert time.monotonic() < deadline, "the killed VM is still listed"
        time.sleep(0.01)
    assert driver.power_state("h1", "vm-1") is PowerState.SHUTDOWN
    driver.spawn("h1", "vm-1")  # started again
    assert driver.list_instances("h1") == ["vm-1"] and pid_of(driver, "h1", "vm-1") != pid


def test_no_vm_outlives_the_compute(driver: ProcessDriver) -> None:
    for n in range(3):
        driver.spawn(f"h{n}", f"vm-{n}")
    pids = [pid_of(driver, f"h{n}", f"vm-{n}") for n in range(3)]
    driver.cleanup_host()
    assert not any(alive(pid) for pid in pids)
    assert driver.list_instances("h0") == []


def test_a_vm_that_cannot_start_fails_typed() -> None:
    driver = ProcessDriver(executable="/nonexistent/python")
    try:
        with pytest.raises(VirtError, match="did not start"):
            driver.spawn("h1", "vm-1")
        assert driver.list_instances("h1") == []
    finally:
        driver.cleanup_host()


def test_the_manager_builds_reports_and_reaps_real_processes(driver: ProcessDriver) -> None:
    store = MemoryStore()
    conductor = Recorded()
    manager = ComputeManager(store, conductor, ["h1"], "sim", HostShape(), driver)  # type: ignore[arg-type]
    try:
        manager.register()
        store.create_instances([InstanceRecord(INSTANCE, request_spec=SPEC.to_primitive())])
        store.claim(INSTANCE, selection("h1").allocation_request)
        manager.build_and_run_instance(
            CTXT, INSTANCE, SPEC.to_primitive(), selection("h1").to_primitive(), []
        )
        wait(lambda: "build_succeeded" in conductor.names)
        pid = pid_of(driver, "h1", INSTANCE)
        assert alive(pid) and manager.hosts_running(INSTANCE) == ["h1"]
        manager.report_instances()
        assert [[vm.uuid for vm in r.instances] for r in store.instance_reports()] == [[INSTANCE]]

        store.update_instance(INSTANCE, state=ERROR, task_state=None)
        manager.reap_instance(CTXT, INSTANCE, "h1", "instance is ERROR")
        assert not alive(pid) and manager.hosts_running(INSTANCE) == []
    finally:
        manager.stop()


def wait(predicate: Any) -> None:
    deadline = time.monotonic() + 5
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)
