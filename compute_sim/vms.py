"""What a compute's hosts run: its driver's VMs, with what each reports of them.

The driver says what runs (:meth:`~compute_sim.driver.ComputeDriver.list_instances`,
:meth:`~compute_sim.driver.ComputeDriver.power_state`); :class:`RunningVMs`
keeps, for each VM the manager started through it, what its host reports of
it (the resource tracker's part in Nova): a
:class:`~scheduler.store.RunningInstance` with the amounts its claim took
(the Selection it was built, rebuilt, resized or live-migrated with, summed
over the host's providers), the claim's project and user, the id of the
request that put it there, and the move it belongs to while one involving
its host is under way. Every start and stop goes through here and is
logged as it happens (``vm_started`` / ``vm_stopped``, with the instance and
the host), so a test can tell what each host runs; a VM that stopped by
itself (a process that died) is found at the next report, logged as stopped
(``gone``) and no longer reported: reality wins.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from compute_sim.driver import ComputeDriver, PowerState
from scheduler.log import RepeatLimiter, get_logger
from scheduler.store import InstanceReport, InstanceStore, RunningInstance

LOG = get_logger(__name__)
#: A bad entry is seen at every report: a few lines a minute of each.
REPEATS = RepeatLimiter()

#: A driver call that starts or stops a VM: (host, instance uuid).
Via = Callable[[str, str], None]


def running_vm(
    ctxt: Any,
    instance_uuid: str,
    allocations: Mapping[str, Mapping[str, int]],
    project_id: str | None,
    user_id: str | None,
    migration_uuid: str | None = None,
) -> RunningInstance:
    """A VM as its host reports it: the amounts of ``allocations`` summed over
    the host's providers, for ``project_id`` / ``user_id`` (else the request
    context's), under the request's id, and the move it belongs to (None:
    none)."""
    amounts: Counter[str] = Counter()
    for resources in allocations.values():
        amounts.update(resources)
    return RunningInstance(
        uuid=instance_uuid,
        resources=dict(amounts),
        project_id=project_id or getattr(ctxt, "project_id", None),
        user_id=user_id or getattr(ctxt, "user_id", None),
        request_id=getattr(ctxt, "request_id", None),
        migration_uuid=migration_uuid,
    )


class RunningVMs:
    """The VMs of one compute's hosts, over its ``driver``. ``lock`` is the
    compute's (reentrant): a caller holds it across a check and the start or
    stop that must go with it."""

    def __init__(self, driver: ComputeDriver, lock: threading.RLock) -> None:
        self.driver = driver
        self.lock = lock
        # (instance, host) -> what the host reports of the VM it runs.
        self._vms: dict[tuple[str, str], RunningInstance] = {}

    def runs(self, instance_uuid: str, host: str) -> bool:
        return self.driver.power_state(host, instance_uuid) is PowerState.RUNNING

    def start(self, vm: RunningInstance, host: str, via: Via | None = None) -> None:
        """The VM runs on ``host`` now, started by ``via`` (the driver's
        ``spawn`` unless a move's landing says otherwise) unless it runs
        there already: then it takes the newer amounts and move.

        :raises VirtError: it could not start (nothing is recorded).
        """
        with self.lock:
            started = not self.runs(vm.uuid, host)
            if started:
                (via or self.driver.spawn)(host, vm.uuid)
                vm = replace(vm, started_at=time.time())
            else:
                known = self._vms.get((vm.uuid, host))
                vm = replace(vm, started_at=known.started_at if known else None)
            self._vms[(vm.uuid, host)] = vm
        if started:
            LOG.info("vm_started", instance_uuid=vm.uuid, host=host)

    def stop(
        self, instance_uuid: str, host: str, via: Via | None = None
    ) -> RunningInstance | None:
        """The VM no longer runs on ``host``: ``via`` (the driver's
        ``destroy`` unless a move's departure says otherwise) is called
        whether or not it ran. The VM that ran there, None if none did."""
        with self.lock:
            ran = self.runs(instance_uuid, host)
            (via or self.driver.destroy)(host, instance_uuid)
            vm = self._vms.pop((instance_uuid, host), None)
        if ran:
            LOG.info("vm_stopped", instance_uuid=instance_uuid, host=host)
            return vm or RunningInstance(instance_uuid)
        if vm is not None:  # it had stopped by itself
            LOG.warning("vm_stopped", instance_uuid=instance_uuid, host=host, gone=True)
        return None

    def hosts_of(self, instance_uuid: str) -> list[str]:
        """The hosts that run the instance's VM."""
        with self.lock:
            hosts = [h for u, h in self._vms if u == instance_uuid]
        return sorted(h for h in hosts if self.runs(instance_uuid, h))

    def everywhere(self, hosts: Iterable[str]) -> list[tuple[str, str]]:
        """Every (instance, host) that runs, of ``hosts``."""
        return sorted((uuid, h) for h in hosts for uuid in self.driver.list_instances(h))

    def moving(self, instance_uuid: str, host: str, migration_uuid: str) -> None:
        """The VM on ``host`` belongs to this move now (if it runs there)."""
        with self.lock:
            vm = self._vms.get((instance_uuid, host))
            if vm is not None:
                self._vms[(instance_uuid, host)] = replace(vm, migration_uuid=migration_uuid)

    def reports(self, hosts: Sequence[str], store: InstanceStore) -> list[InstanceReport]:
        """What each of ``hosts`` runs now, one report per host (an empty one
        for a host that runs nothing), as the driver lists it. A VM's move is
        reported only while its instance record still names that migration
        (the move ends with the conductor, which tells no compute: confirmed,
        given up). A VM the driver no longer runs is dropped, logged as
        stopped (``gone``). One bad entry never fails the report: it is
        dropped and logged (:func:`reportable`), and a host the driver cannot
        list is left out (``host_listing_failed``) while the others report."""
        with self.lock:
            moving = {u for (u, _), vm in self._vms.items() if vm.migration_uuid}
        if moving:
            records = {r.uuid: r for r in store.list_instances(sorted(moving, key=str))}
            with self.lock:
                for (uuid, host), vm in list(self._vms.items()):
                    record = records.get(uuid)
                    if vm.migration_uuid and record and record.migration_uuid != vm.migration_uuid:
                        self._vms[(uuid, host)] = replace(vm, migration_uuid=None)
        now = time.time()
        reports = []
        with self.lock:
            listed = {h: self._listed(h) for h in hosts}
            runs = {h: set(uuids) for h, uuids in listed.items() if uuids is not None}
            for uuid, host in [k for k in self._vms if k[1] in runs]:
                if uuid not in runs[host]:
                    del self._vms[(uuid, host)]
                    LOG.warning("vm_stopped", instance_uuid=uuid, host=host, gone=True)
            for host, uuids in listed.items():
                if uuids is None:
                    continue  # its listing failed: its last report ages, the others go
                vms = (self._vms.get((u, host)) or RunningInstance(u) for u in uuids)
                reports.append(InstanceReport(host, now, tuple(reportable(vms, host))))
        return reports

    def _listed(self, host: str) -> list[str] | None:
        """What the driver lists on ``host``; None if it could not say."""
        try:
            return list(self.driver.list_instances(host))
        except Exception as exc:  # noqa: BLE001 - one host's listing, not the whole report
            REPEATS.log(
                LOG, "warning", "host_listing_failed", key=host, host=host, error=repr(exc)
            )
            return None


def reportable(entries: Iterable[Any], host: str) -> Iterator[Any]:
    """The entries of ``host``'s report (VMs, or tombstones) that can be
    reported (:meth:`~scheduler.store.RunningInstance.problem`); any other one
    is dropped and logged (``report_entry_dropped``), and the rest are reported."""
    for entry in entries:
        try:
            why = entry.problem()
        except Exception as exc:  # noqa: BLE001 - not even readable: dropped the same
            why = repr(exc)
        if why is None:
            yield entry
        else:
            REPEATS.log(
                LOG,
                "warning",
                "report_entry_dropped",
                key=(host, why),
                host=host,
                entry=repr(entry)[:200],
                why=why,
            )
