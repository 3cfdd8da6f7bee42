"""The process driver end to end: a compute whose VMs are real OS processes
(``compute-sim --driver process``) boots an instance and the OS runs its VM,
a child of the compute; the instance's record goes to ERROR while the VM
still runs (a stray, as ``tests/functional_faults/test_reconcile.py`` makes
them), and the conductor's reconciler has the compute reap it: the process is
gone, the other instance's VM still runs. Stopped, the compute leaves no VM
process behind. The shared checker (conftest) then holds."""

from __future__ import annotations

import time
from pathlib import Path

from bench.cluster import alive
from bench.nodes import wait_until
from compute_sim.process import TAG
from scheduler.objects import ERROR
from tests.functional.conftest import Cluster

#: Short deadlines, so that the reap comes within seconds.
RECONCILE = {"reconcile_interval": 1.0, "orphan_grace": 2.0, "report_max_age": 5.0}


def vm_processes() -> dict[str, tuple[int, str]]:
    """instance uuid -> (pid, host) of every VM process the OS runs, found by
    the tag in its command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if TAG.encode() in args:
            at = args.index(TAG.encode())
            host, uuid = (a.decode() for a in args[at + 1 : at + 3])
            found[uuid] = (int(proc.name), host)
    return found


def parent_of(pid: int) -> int:
    """The parent pid of ``pid``, as /proc says (after the command name)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_a_stray_vm_process_is_reaped_and_none_outlives_the_compute(cluster: Cluster) -> None:
    cluster.write_config(conductor=RECONCILE, compute={"report_interval": 1.0})
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(2, "--driver", "process")
    cluster.start_worker()
    instances = cluster.boot("--count", "2")["instances"]
    assert {i["state"] for i in instances} == {"ACTIVE"}, instances
    stray, kept = instances

    # Each VM is a real process on the host its record names, the compute's child.
    running = vm_processes()
    for instance in instances:
        pid, host = running[instance["uuid"]]
        assert host == instance["host"] and alive(pid)
        assert parent_of(pid) == compute.popen.pid
    assert cluster.running_vms() == {i["uuid"]: {i["host"]} for i in instances}
    stray_pid, _ = running[stray["uuid"]]

    # The record goes to ERROR while its VM runs: a stray for the reconciler.
    cluster.store.update_instance(
        stray["uuid"], state=ERROR, task_state=None, updated_at=time.time()
    )
    wait_until(lambda: compute.count("orphan_vm_reaped") == 1, 30, "the stray reaped")
    wait_until(lambda: not alive(stray_pid), 10, "the stray's process gone")
    assert stray["uuid"] not in vm_processes()
    assert any(
        e.get("kind") == "stray_vm" and e.get("instance_uuid") == stray["uuid"]
        for e in conductor.log_events()
        if e.get("event") == "reconcile_action"
    )
    kept_pid, _ = vm_processes()[kept["uuid"]]
    assert alive(kept_pid) and cluster.running_vms() == {kept["uuid"]: {kept["host"]}}

    # Stopped, the compute takes its VMs with it.
    compute.stop()
    assert compute.popen.returncode == 0
    assert not alive(kept_pid)
    assert not {i["uuid"] for i in instances} & set(vm_processes())
    assert compute.count("vm_processes_killed") == 1
