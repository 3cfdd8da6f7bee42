"""The driver contract: what a compute manager asks of whatever runs its VMs.

In the shape of Nova's ``nova/virt/driver.py``. The compute manager
(:class:`compute_sim.manager.ComputeManager`) speaks the protocol: it
registers the hosts, heartbeats, reports what runs, answers the RPC methods,
checks every step against the store (the step guard) and keeps the step
ledger, the claims and the stats. A driver runs VMs and says what runs: it
knows nothing of records, claims, messages or steps, and the manager never
asks what kind of driver it has. This module is the whole of what a real
hypervisor agent implements to be a compute here:

=======================================  =====================================
method                                   what it does (the Nova method)
=======================================  =====================================
``list_instances(host)``                 the instances whose VM runs on the
                                         host now, read from what really runs
                                         (``list_instance_uuids``)
``power_state(host, uuid)``              RUNNING, SHUTDOWN (it stopped by
                                         itself) or NOSTATE (no such VM there)
                                         (``get_info(...).state``)
``prepare_spawn(host, uuid, done)``      the slow part of a build: fetch the
                                         image, make the disks (``spawn``'s
                                         first half); may fail
``prepare_rebuild(host, uuid, done)``    the same for an evacuation's rebuild
                                         (``rebuild``); by default a spawn's
``spawn(host, uuid)``                    start the VM, prepared; quick
                                         (``spawn``'s second half)
``destroy(host, uuid)``                  stop the VM and free what it used;
                                         idempotent (``destroy``)
``prepare_resize(host, uuid, done)``     a resize's destination makes room
                                         (``prep_resize``'s checks); may fail
``migrate_disk_and_power_off(source,     the VM off the source at once, its
uuid, dest, done)``                      disk to the destination, then ``done``
``finish_migration(dest, uuid)``         start it on the destination, from the
                                         disk that came (by default a spawn)
``finish_revert_migration(source,        start it on the source again, from
uuid)``                                  what the source kept (a spawn)
``confirm_migration(source, uuid)``      drop what the source kept for a
                                         revert (by default nothing)
``check_can_live_migrate_destination(    can the destination take it; may fail
dest, uuid, done)``
``check_can_live_migrate_source(source,  can the source let it go; may fail
uuid, done)``
``live_migration(source, uuid, dest)``   the VM leaves the source for the
                                         destination (by default a destroy)
``post_live_migration_at_destination(    it runs on the destination now (by
dest, uuid)``                            default a spawn)
``cleanup_host()``                       the compute stops: say what happens
                                         to the VMs, leave nothing behind that
                                         no one will stop (``cleanup_host``)
=======================================  =====================================

The slow parts are asynchronous: each returns at once and calls ``done``
later, exactly once, from a thread of the driver's own (never from inside
the call): ``done(None)`` when it went well, ``done(VirtError)`` saying why
not. The manager decides what follows: between a build's preparation and
its VM's start it checks again that the store still holds the claim and the
record still waits (a build the conductor gave up meanwhile starts nothing).
Everything else is synchronous and quick, and may be called under the
manager's lock; a VM that cannot start raises :class:`VirtError`.

Hosts are names (several per process: a driver serves every host of its
compute); a VM is an instance uuid on a host, at most one per pair. Moves
between two hosts of one process call the source's and the destination's
side each, as they would in two processes.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable

from scheduler.exceptions import SchedulerError


class VirtError(SchedulerError):
    """A driver could not do what it was asked; the message is its reason
    (handed to the conductor with the failure)."""

    msg = "%(reason)s"


#: How a slow part ends: None, it went well; else why not.
Done = Callable[[VirtError | None], None]


class PowerState(enum.Enum):
    """A VM's state on a host, as Nova's ``power_state`` names it."""

    NOSTATE = "nostate"  # no such VM on that host (never there, or destroyed)
    RUNNING = "running"
    SHUTDOWN = "shutdown"  # it ran there and stopped by itself


class ComputeDriver(abc.ABC):
    """The contract (see the module's table). The move steps have defaults
    for a driver whose VM carries nothing from host to host (a process, a
    simulated VM): a landing is a spawn, a departure a destroy, and a
    confirm has nothing to drop."""

    # --- what runs ------------------------------------------------------------------

    @abc.abstractmethod
    def list_instances(self, host: str) -> list[str]:
        """The instances whose VM runs on ``host`` now, sorted."""

    @abc.abstractmethod
    def power_state(self, host: str, instance_uuid: str) -> PowerState:
        """The state of the instance's VM on ``host``."""

    # --- builds -----------------------------------------------------------------------

    @abc.abstractmethod
    def prepare_spawn(self, host: str, instance_uuid: str, done: Done) -> None:
        """Begin what a build does before its VM starts; ``done`` when ready."""

    def prepare_rebuild(self, host: str, instance_uuid: str, done: Done) -> None:
        """Begin what an evacuation's rebuild does before its VM starts."""
        self.prepare_spawn(host, instance_uuid, done)

    @abc.abstractmethod
    def spawn(self, host: str, instance_uuid: str) -> None:
        """Start the instance's VM on ``host`` (nothing if it runs there).

        :raises VirtError: it could not start.
        """

    @abc.abstractmethod
    def destroy(self, host: str, instance_uuid: str) -> None:
        """Stop the instance's VM on ``host`` and free what it used; nothing
        if none runs there."""

    # --- resize (and cold migration) -----------------------------------------------------

    @abc.abstractmethod
    def prepare_resize(self, host: str, instance_uuid: str, done: Done) -> None:
        """On a resize's destination: begin making room for the instance."""

    @abc.abstractmethod
    def migrate_disk_and_power_off(
        self, source: str, instance_uuid: str, dest: str, done: Done
    ) -> None:
        """On the source: the VM no longer runs there when this returns; its
        disk goes to ``dest``, and ``done`` says it is there."""

    def finish_migration(self, dest: str, instance_uuid: str) -> None:
        """On the destination: start the VM from the disk that came."""
        self.spawn(dest, instance_uuid)

    def finish_revert_migration(self, source: str, instance_uuid: str) -> None:
        """On the source of a reverted resize: start the VM there again."""
        self.spawn(source, instance_uuid)

    def confirm_migration(self, source: str, instance_uuid: str) -> None:  # noqa: B027 - a default
        """On the source of a confirmed resize: drop what it kept for a revert."""

    # --- live migration -------------------------------------------------------------------

    @abc.abstractmethod
    def check_can_live_migrate_destination(
        self, dest: str, instance_uuid: str, done: Done
    ) -> None:
        """On the destination: begin checking it can take the instance."""

    @abc.abstractmethod
    def check_can_live_migrate_source(self, source: str, instance_uuid: str, done: Done) -> None:
        """On the source: begin checking it can let the instance go."""

    def live_migration(self, source: str, instance_uuid: str, dest: str) -> None:
        """The VM leaves ``source`` for ``dest``: it no longer runs on the
        source when this returns."""
        self.destroy(source, instance_uuid)

    def post_live_migration_at_destination(self, dest: str, instance_uuid: str) -> None:
        """On the destination: the VM runs here now."""
        self.spawn(dest, instance_uuid)

    # --- the compute's life -------------------------------------------------------------

    @abc.abstractmethod
    def cleanup_host(self) -> None:
        """The compute is stopping: nothing more is asked of the driver."""
