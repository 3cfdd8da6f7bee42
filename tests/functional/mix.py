"""A random mix of lifecycle operations, driven through the conductor's own API
objects (the code the ``conductor-stub`` commands run) against a deployment
of real daemons: boots, deletes (of instances in any state, in flight or
not), resizes, cold and live migrations, confirms and reverts, shelves, unshelves
and evacuations, in rounds. Each round casts its operations without waiting,
then waits until nothing is in flight; the caller checks the invariants then.

The operations race one another on purpose (a delete of an instance whose
resize is under way, a resize of one just picked by a shelve): the loser of
each race is refused by the record's compare-and-set, counted in
``refused``, and changes nothing.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import Cluster, Process
from conductor_stub.records import ConductorSettings
from conductor_stub.tasks.build import Booter
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.evacuate import Evacuator, compute_is_up
from conductor_stub.tasks.live_migrate import LiveMigrator
from conductor_stub.tasks.resize import Resizer, own_flavor
from conductor_stub.tasks.shelve import Shelver
from scheduler import rpc
from scheduler.exceptions import SchedulerError
from scheduler.flavors import load_catalog
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    MIGRATING,
    REBUILDING,
    RESIZED,
    RESIZING,
    SHELVED_OFFLOADED,
    SHELVING,
    InstanceRecord,
)
from scheduler.service import ServiceResolver

#: States an operation is under way in; a round ends when none is left.
IN_FLIGHT = frozenset({BUILDING, RESIZING, DELETING, SHELVING, REBUILDING, MIGRATING})

#: The conductor's options for a mix: short deadlines, so that a lost request
#: is re-driven within the test (written to the deployment's config too).
MIX_CONDUCTOR: dict[str, Any] = {
    "build_timeout": 20,
    "resize_timeout": 20,
    "delete_timeout": 10,
    "sweep_interval": 0.5,
    "max_redrives": 3,
    "deleted_retention": 600,
    "live_migration_timeout": 20,
}

#: Operation -> weight, for an instance in the state the operation needs.
WEIGHTS: dict[str, int] = {
    "boot": 4,
    "delete": 2,
    "resize": 2,
    "migrate": 2,
    "live_migrate": 2,
    "finish": 3,  # confirm or revert a RESIZED instance
    "shelve": 2,
    "unshelve": 2,
}


@dataclass
class LifecycleMix:
    """The API objects of a conductor, on the test's own transport."""

    cluster: Cluster
    transport: Any
    seed: int = 1
    service_down_time: float = 60.0
    rng: random.Random = field(init=False)
    done: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        store = self.cluster.store
        settings = ConductorSettings(
            **{k: float(v) for k, v in MIX_CONDUCTOR.items() if k != "max_redrives"},
            max_redrives=int(MIX_CONDUCTOR["max_redrives"]),
        )
        scheduler = rpc.SchedulerClient(self.transport, "scheduler")
        compute = rpc.ComputeClient(self.transport, ServiceResolver(store, ttl=1.0))
        self.booter = Booter(store, scheduler, compute, build_timeout=settings.build_timeout)
        self.resizer = Resizer(store, scheduler, compute, settings)
        self.deleter = Deleter(store, compute, settings)
        self.shelver = Shelver(store, scheduler, compute, settings)
        self.migrator = LiveMigrator(store, scheduler, compute, settings)
        self.evacuator = Evacuator(
            store, scheduler, compute, settings, service_down_time=self.service_down_time
        )
        self.flavors = load_catalog()
        self.group_policy = "anti-affinity"

    # --- operations -------------------------------------------------------------------

    def boot(self, count: int, *, grouped: bool = False) -> list[str]:
        flavor = self.flavors[self.rng.choice(["m1.small", "m1.medium"])]
        uuids = self.booter.boot(
            rpc.RequestContext(user_id="mix", project_id="mix"),
            flavor,
            count,
            group_policy=self.group_policy if grouped else None,
            project_id="mix",
            user_id="mix",
        )
        self.done["boot"] += count
        return uuids

    def round(self, operations: int) -> None:
        """Cast ``operations`` random operations, then wait until none is in flight."""
        records = list(self.cluster.store.scan_instances())
        for _ in range(operations):
            self._one(records)
        self.settle()

    def _one(self, records: list[InstanceRecord]) -> None:
        by_state: dict[str, list[InstanceRecord]] = {}
        for record in records:
            by_state.setdefault(record.state, []).append(record)
        live = [r for r in records if r.state not in (DELETED, DELETING)]
        eligible: dict[str, list[InstanceRecord]] = {
            "boot": [],
            "delete": live,
            "resize": by_state.get(ACTIVE, []),
            "migrate": by_state.get(ACTIVE, []),
            "live_migrate": by_state.get(ACTIVE, []),
            "finish": by_state.get(RESIZED, []),
            "shelve": by_state.get(ACTIVE, []),
            "unshelve": by_state.get(SHELVED_OFFLOADED, []),
        }
        names = [n for n in WEIGHTS if n == "boot" or eligible[n]]
        name = self.rng.choices(names, [WEIGHTS[n] for n in names])[0]
        if name == "boot":
            self.boot(1, grouped=self.rng.random() < 0.2)
            return
        record = self.rng.choice(eligible[name])
        action: Callable[[], Any] = {
            "delete": lambda: self.deleter.delete(record.uuid),
            "resize": lambda: self.resizer.start(record.uuid, self._other_flavor(record)),
            "migrate": lambda: self.resizer.migrate(record.uuid),
            "live_migrate": lambda: self.migrator.start(record.uuid),
            "finish": lambda: (
                self.resizer.confirm if self.rng.random() < 0.5 else self.resizer.revert
            )(record.uuid),
            "shelve": lambda: self.shelver.shelve(record.uuid),
            "unshelve": lambda: self.shelver.unshelve(record.uuid),
        }[name]
        try:
            action()
        except SchedulerError:  # lost a race to another operation: nothing changed
            self.refused[name] += 1
            return
        self.done[name] += 1

    def _other_flavor(self, record: InstanceRecord) -> Any:
        now = own_flavor(record).name
        return self.flavors["m1.medium" if now == "m1.small" else "m1.small"]

    def finish_all(self) -> None:
        """Confirm or revert every RESIZED instance, and wait."""
        for record in self.cluster.store.scan_instances():
            if record.state == RESIZED and record.task_state is None:
                try:
                    (self.resizer.confirm if self.rng.random() < 0.5 else self.resizer.revert)(
                        record.uuid
                    )
                    self.done["finish"] += 1
                except SchedulerError:
                    self.refused["finish"] += 1
        self.settle()

    def evacuate_process(self, proc: Process, hosts: list[str], timeout: float = 60.0) -> None:
        """SIGSTOP ``proc``, wait until its hosts are down, evacuate every ACTIVE
        instance of them, wait, then SIGCONT it and wait until it is up again."""
        store = self.cluster.store
        proc.pause()
        _wait(
            lambda: (
                not any(
                    compute_is_up(store, h, self.service_down_time, time.time()) for h in hosts
                )
            ),
            timeout,
            f"{hosts} down",
        )
        for host in hosts:
            for record in self.evacuator.on_host(host):
                try:
                    self.evacuator.start(record.uuid)
                    self.done["evacuate"] += 1
                except SchedulerError:
                    self.refused["evacuate"] += 1
        self.settle(timeout)
        proc.resume()
        _wait(
            lambda: all(
                compute_is_up(store, h, self.service_down_time, time.time()) for h in hosts
            ),
            timeout,
            f"{hosts} up",
        )

    def settle(self, timeout: float = 150.0) -> None:
        """Wait until no instance has an operation in flight."""
        _wait(
            lambda: not [r for r in self.cluster.store.scan_instances() if in_flight(r)],
            timeout,
            "every operation settled",
            lambda: Counter(
                (r.state, r.task_state)
                for r in self.cluster.store.scan_instances()
                if in_flight(r)
            ),
        )


def in_flight(record: InstanceRecord) -> bool:
    """An operation is under way on the instance (a RESIZED one being confirmed
    or reverted included)."""
    return record.state in IN_FLIGHT or (record.state == RESIZED and record.task_state is not None)


def _wait(
    until: Callable[[], bool],
    timeout: float,
    what: str,
    left: Callable[[], object] = lambda: None,
) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {left()}"
        time.sleep(0.2)
