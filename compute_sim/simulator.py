"""The simulator: a driver whose VMs live in this process's memory.

A simulated VM costs nothing, so one process can run thousands of hosts. A
build "takes" ``build_time`` seconds and fails with probability
``fail_rate`` (or always, on the hosts named in ``fail_hosts``); so does an
evacuation's rebuild. A resize's prep takes as long and fails on the hosts
named in ``fail_resize_hosts``; its disk takes as long to reach the
destination. A live migration's pre-check takes as long on each side and
fails with probability ``live_migration_fail_rate`` (or always, on the hosts
named in ``live_migration_fail_hosts``), drawn on the destination and again
on the source. ``seed`` makes the draws replayable. The VMs go with the
process: a compute stopped, killed or paused (SIGSTOP) runs none of them
meanwhile.

:class:`ComputeSimulator` is the compute manager over this driver, with the
driver's knobs as keywords (the all-in-one demo's, and the unit tests').
"""

from __future__ import annotations

import inspect
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from compute_sim.driver import ComputeDriver, Done, PowerState, VirtError
from compute_sim.hosts import HostShape
from compute_sim.manager import ComputeManager, ComputeStore
from compute_sim.runner import DelayedRunner
from scheduler.rpc import ConductorClient


class SimulatedDriver(ComputeDriver):
    """VMs in memory, steps with latency and injected failures."""

    def __init__(
        self,
        build_time: float = 0.05,
        fail_rate: float = 0.0,
        fail_hosts: Sequence[str] = (),
        fail_resize_hosts: Sequence[str] = (),
        live_migration_fail_rate: float = 0.0,
        live_migration_fail_hosts: Sequence[str] = (),
        seed: int | None = None,
    ) -> None:
        self.build_time = build_time
        self.fail_rate = fail_rate
        self.fail_hosts = set(fail_hosts)
        self.fail_resize_hosts = set(fail_resize_hosts)
        self.live_migration_fail_rate = live_migration_fail_rate
        self.live_migration_fail_hosts = set(live_migration_fail_hosts)
        self._rng = random.Random(seed)  # drawn on the runner's thread only
        self._lock = threading.Lock()
        self._running: dict[str, set[str]] = {}  # host -> the instances it runs
        self._runner = DelayedRunner()

    def list_instances(self, host: str) -> list[str]:
        with self._lock:
            return sorted(self._running.get(host, ()), key=str)  # whatever they hold

    def power_state(self, host: str, instance_uuid: str) -> PowerState:
        with self._lock:
            runs = instance_uuid in self._running.get(host, ())
        return PowerState.RUNNING if runs else PowerState.NOSTATE

    def spawn(self, host: str, instance_uuid: str) -> None:
        with self._lock:
            self._running.setdefault(host, set()).add(instance_uuid)

    def destroy(self, host: str, instance_uuid: str) -> None:
        with self._lock:
            self._running.get(host, set()).discard(instance_uuid)

    def prepare_spawn(self, host: str, instance_uuid: str, done: Done) -> None:
        self._later(done, lambda: self._fails(host), "simulated build failure")

    def prepare_rebuild(self, host: str, instance_uuid: str, done: Done) -> None:
        self._later(done, lambda: self._fails(host), "simulated rebuild failure")

    def prepare_resize(self, host: str, instance_uuid: str, done: Done) -> None:
        self._later(done, lambda: host in self.fail_resize_hosts, "simulated resize failure")

    def migrate_disk_and_power_off(
        self, source: str, instance_uuid: str, dest: str, done: Done
    ) -> None:
        self.destroy(source, instance_uuid)
        self._later(done, lambda: False, "")

    def check_can_live_migrate_destination(
        self, dest: str, instance_uuid: str, done: Done
    ) -> None:
        self._later(done, lambda: self._live_fails(dest), _precheck_failure("destination"))

    def check_can_live_migrate_source(self, source: str, instance_uuid: str, done: Done) -> None:
        self._later(done, lambda: self._live_fails(source), _precheck_failure("source"))

    def cleanup_host(self) -> None:
        """The simulated VMs go with the process; what is still to come is dropped."""
        self._runner.stop()

    def _fails(self, host: str) -> bool:
        return host in self.fail_hosts or self._rng.random() < self.fail_rate

    def _live_fails(self, host: str) -> bool:
        return (
            host in self.live_migration_fail_hosts
            or self._rng.random() < self.live_migration_fail_rate
        )

    def _later(self, done: Done, fails: Callable[[], bool], reason: str) -> None:
        """``done`` after ``build_time``, with a failure if ``fails()`` then."""
        self._runner.later(
            self.build_time, lambda: done(VirtError(reason=reason) if fails() else None)
        )


def _precheck_failure(side: str) -> str:
    return f"simulated live migration pre-check failure on the {side}"


class ComputeSimulator(ComputeManager):
    """The compute manager over a :class:`SimulatedDriver`: the manager's
    arguments, and among its keywords the driver's (``build_time``,
    ``fail_rate``, ``fail_hosts``, ``fail_resize_hosts``,
    ``live_migration_fail_rate``, ``live_migration_fail_hosts``, ``seed``)."""

    def __init__(
        self,
        store: ComputeStore,
        conductor: ConductorClient,
        hosts: Sequence[str],
        rpc_server: str,
        shape: HostShape,
        **options: Any,
    ) -> None:
        knobs = inspect.signature(SimulatedDriver).parameters
        driver = SimulatedDriver(**{k: options.pop(k) for k in knobs if k in options})
        try:
            super().__init__(store, conductor, hosts, rpc_server, shape, driver, **options)
        except ValueError:  # an option refused: the driver's thread goes too
            driver.cleanup_host()
            raise
