"""A driver whose VMs are real OS processes: one process per VM.

A VM is a small Python sleeper started with this interpreter, in a session
of its own (a terminal's Ctrl-C reaches the compute, not its VMs), its
command line tagged ``compute-sim-vm <host> <instance uuid>`` so that ``ps``
or ``/proc`` finds it. It is destroyed by killing it (SIGKILL, then reaped);
:meth:`ProcessDriver.list_instances` asks the OS which of them still run, so
a VM killed from outside is no longer reported and the reconciler sees its
instance lost. Nothing takes time and nothing fails on purpose: each slow
part is done as soon as the driver's thread gets to it; a VM that cannot
start (the OS refused the process) fails its build.

What happens to the VMs when the compute stops: they stop with it, as the
simulator's do. A graceful stop (:meth:`ProcessDriver.cleanup_host`) kills
and reaps every VM process it started; a compute that dies (SIGKILL, a
crash) takes them along too, as each sleeper exits within
:data:`WATCH_INTERVAL` seconds of seeing its parent gone. Nothing outlives
the compute, and nothing is adopted when it starts again: its instances'
records still place them on its hosts, and the reconciler finds them lost
(or an evacuation moves them), exactly as after a simulator's restart. A
compute paused with SIGSTOP, unlike the simulator's, leaves its VMs running.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from compute_sim.driver import ComputeDriver, Done, PowerState, VirtError
from compute_sim.runner import DelayedRunner
from scheduler.log import get_logger

LOG = get_logger(__name__)

#: The first argument of every VM process, before its host and instance uuid.
TAG = "compute-sim-vm"
#: How often a VM process looks whether the compute that started it is gone.
WATCH_INTERVAL = 0.2
#: The VM: sleep while the process that started it lives.
SLEEPER = (
    "import os, time\n"
    "parent = os.getppid()\n"
    "while os.getppid() == parent:\n"
    f"    time.sleep({WATCH_INTERVAL})\n"
)


class ProcessDriver(ComputeDriver):
    """Each VM an OS process of ``executable`` (this interpreter by default)."""

    def __init__(self, executable: str = sys.executable) -> None:
        self.executable = executable
        self._lock = threading.Lock()
        self._vms: dict[str, dict[str, subprocess.Popen[bytes]]] = {}  # host -> uuid -> VM
        self._runner = DelayedRunner("compute-vm-steps")

    def command(self, host: str, instance_uuid: str) -> list[str]:
        """The command line of the instance's VM on ``host``."""
        return [self.executable, "-I", "-S", "-c", SLEEPER, TAG, host, instance_uuid]

    def list_instances(self, host: str) -> list[str]:
        with self._lock:
            vms = list(self._vms.get(host, {}).items())
        return sorted((uuid for uuid, vm in vms if vm.poll() is None), key=str)

    def power_state(self, host: str, instance_uuid: str) -> PowerState:
        with self._lock:
            vm = self._vms.get(host, {}).get(instance_uuid)
        if vm is None:
            return PowerState.NOSTATE
        return PowerState.RUNNING if vm.poll() is None else PowerState.SHUTDOWN

    def spawn(self, host: str, instance_uuid: str) -> None:
        with self._lock:
            vm = self._vms.get(host, {}).get(instance_uuid)
            if vm is not None and vm.poll() is None:
                return
            try:
                vm = subprocess.Popen(
                    self.command(host, instance_uuid),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise VirtError(reason=f"the VM's process did not start: {exc}") from exc
            self._vms.setdefault(host, {})[instance_uuid] = vm
        LOG.info("vm_process_started", instance_uuid=instance_uuid, host=host, pid=vm.pid)

    def destroy(self, host: str, instance_uuid: str) -> None:
        with self._lock:
            vm = self._vms.get(host, {}).pop(instance_uuid, None)
        if vm is not None:
            _kill(vm)
            LOG.info("vm_process_killed", instance_uuid=instance_uuid, host=host, pid=vm.pid)

    def prepare_spawn(self, host: str, instance_uuid: str, done: Done) -> None:
        self._ready(done)

    def prepare_resize(self, host: str, instance_uuid: str, done: Done) -> None:
        self._ready(done)

    def migrate_disk_and_power_off(
        self, source: str, instance_uuid: str, dest: str, done: Done
    ) -> None:
        self.destroy(source, instance_uuid)  # a process has no disk to carry
        self._ready(done)

    def check_can_live_migrate_destination(
        self, dest: str, instance_uuid: str, done: Done
    ) -> None:
        self._ready(done)

    def check_can_live_migrate_source(self, source: str, instance_uuid: str, done: Done) -> None:
        self._ready(done)

    def _ready(self, done: Done) -> None:
        """``done``, from the driver's thread (never from inside the call)."""
        self._runner.later(0, lambda: done(None))

    def cleanup_host(self) -> None:
        """Kill and reap every VM process: none outlives the compute."""
        self._runner.stop()
        with self._lock:
            vms = [vm for per_host in self._vms.values() for vm in per_host.values()]
            self._vms.clear()
        for vm in vms:
            _kill(vm)
        LOG.info("vm_processes_killed", count=len(vms))


def _kill(vm: subprocess.Popen[bytes]) -> None:
    """SIGKILL the VM's process (if it still runs) and reap it."""
    if vm.poll() is None:
        vm.kill()
    vm.wait()
