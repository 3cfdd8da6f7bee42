"""A boot storm to break things in, and what must hold once it settles.

:func:`start_storm` runs several ``conductor-stub boot`` processes at once
(each creates its instance records with deadlines and casts its requests);
:class:`Storm` follows the records; :func:`assert_settled_cleanly` checks,
from the store, that every instance ended ACTIVE or in ERROR with a reason,
none stuck, no allocation doubled or leaked, and each provider's usage equal
to the sum of its live allocations; :meth:`Storm.figures` gives the counts
the fault tests report (in flight at the fault, re-driven, final states).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from compute_sim.hosts import provider_uuid
from scheduler.flavors import load_catalog
from scheduler.objects import FINAL_STATES, InstanceRecord
from tests.fixtures.cli import boot_in_background
from tests.functional_faults.conftest import FaultCluster, wait_until

#: Conductor deadlines short enough that lost requests are re-driven within
#: seconds, with room for a broker or store restart inside the re-drives.
FAST_CONDUCTOR = {"build_timeout": 6, "sweep_interval": 0.5, "max_redrives": 5}


@dataclass
class Storm:
    cluster: FaultCluster
    flavor: str
    uuids: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    in_flight_at_fault: int | None = None
    fault_at: float | None = None
    #: The boot commands still running (``start_storm(..., wait=False)``);
    #: until :meth:`collect`, the storm is every record of the deployment.
    boots: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def records(self) -> list[InstanceRecord]:
        return self.cluster.store.list_instances(None if self.boots else self.uuids)

    def collect(self) -> None:
        """Wait for the boot commands and take the uuids they made."""
        boots, self.boots = self.boots, []
        for boot in boots:
            stdout, stderr = boot.communicate(timeout=120)
            assert boot.returncode == 0, stderr.decode()[-4000:]
            self.uuids += json.loads(stdout)["instances"]
        assert len(set(self.uuids)) == len(self.uuids)

    def states(self) -> Counter[str]:
        return Counter(r.state for r in self.records())

    def mark_fault(self) -> int:
        """Note the moment of the fault and how many instances were not final then."""
        self.fault_at = time.monotonic()
        self.in_flight_at_fault = sum(1 for r in self.records() if r.state not in FINAL_STATES)
        return self.in_flight_at_fault

    def all_final(self) -> bool:
        records = self.records()
        return len(records) == len(self.uuids) and all(r.state in FINAL_STATES for r in records)

    def settle(self, timeout: float) -> None:
        wait_until(self.all_final, timeout, "every instance ACTIVE or ERROR", interval=0.5)

    def figures(self, **extra: Any) -> dict[str, Any]:
        records = self.records()
        redriven = [r for r in records if r.redrives]
        now = time.monotonic()
        return {
            "instances": len(records),
            "in_flight_at_fault": self.in_flight_at_fault,
            "instances_redriven": len(redriven),
            "redrives": sum(r.redrives for r in records),
            "final_states": dict(Counter(r.state for r in records)),
            "error_faults": dict(Counter(r.fault for r in records if r.state == "ERROR")),
            "seconds_fault_to_settled": (
                round(now - self.fault_at, 1) if self.fault_at is not None else None
            ),
            **extra,
        }


def start_storm(
    cluster: FaultCluster,
    count: int,
    senders: int = 2,
    flavor: str = "m1.tiny",
    wait: bool = True,
) -> Storm:
    """Boot ``count`` instances from ``senders`` processes at once; returns once
    every record exists and every request was cast, or at once with
    ``wait=False`` (the boots' own time, long on a loaded machine, then does
    not delay a fault meant to land while the storm is in flight: the storm
    is every record of the deployment until :meth:`Storm.collect`)."""
    storm = Storm(cluster, flavor)
    each = count // senders
    storm.boots = [
        boot_in_background(cluster, each if i else count - each * (senders - 1), flavor=flavor)
        for i in range(senders)
    ]
    if wait:
        storm.collect()
        assert len(storm.uuids) == count
    return storm


def assert_settled_cleanly(storm: Storm) -> list[InstanceRecord]:
    """Every instance ACTIVE, or ERROR with a reason; one allocation per ACTIVE
    instance, on its host, of its flavor; none for anything else; usage == sum
    of allocations, within capacity, on every provider."""
    records = storm.records()
    assert len(records) == len(storm.uuids)
    assert {r.state for r in records} <= FINAL_STATES, Counter(r.state for r in records)
    flavor = load_catalog("")[storm.flavor]
    amounts = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb, "DISK_GB": flavor.root_gb}
    consumers = {c.uuid: c for c in storm.cluster.store.list_consumers()}
    active = {r.uuid: r for r in records if r.state == "ACTIVE"}
    assert set(consumers) == set(active), (
        f"{len(set(consumers) - set(active))} allocation(s) without an ACTIVE instance, "
        f"{len(set(active) - set(consumers))} ACTIVE instance(s) without one"
    )
    for uuid, record in active.items():
        assert {rp: dict(a) for rp, a in consumers[uuid].allocations.items()} == {
            provider_uuid(record.host or ""): amounts
        }, record
    for record in records:
        assert record.state == "ACTIVE" or (record.fault and record.fault_details), record
    storm.cluster.check_accounting()
    return records
