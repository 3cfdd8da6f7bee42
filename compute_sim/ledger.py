"""The step ledger: what a compute knows of the steps it was cast, per operation.

The bus delivers at least once, late and reordered, so any step of any
operation may come twice (a re-drive, a duplicate), or again after it
failed. The step guard (:mod:`compute_sim.steps`) says whether the record
waits for a step at all; the ledger says what this process already did of
it. Each operation keeps, under its own key, where its step got to here:

=====================  ==============================================
operation              key (after the instance uuid)
=====================  ==============================================
:data:`BUILD`          the host and the request id (a re-driven or
                       rescheduled build keeps its request's id; an
                       unshelve is a new request)
:data:`REBUILD`        the migration and the host (the destination)
:data:`RESIZE`         the migration and the destination
:data:`LIVE`           the migration, the destination and the side
                       (``dest`` or ``source``: both may be hosts of
                       this process)
=====================  ==============================================

A step checks in (:meth:`StepLedger.check_in`) and learns what it had
reached: nothing (or a failure), and a new attempt is :data:`UNDER_WAY`;
:data:`UNDER_WAY`, a duplicate to ignore; :data:`HANDED_ON` to the next step,
a re-drive that walks on again (a later step may have been lost);
:data:`DONE`, reported again (the first report may have been lost).

A revert undoes what its resize did on the destination (:meth:`StepLedger.undo`):
a re-drive of that resize (a store gone back in time to before the revert)
starts it again there, never reports it finished where no VM runs.

A delete ends what the process knows of an instance (:meth:`StepLedger.delete`):
its steps are forgotten and it is remembered as deleted for ``retention``
seconds (as long as the store fences its claims), so that no step of it
starts here again (a step under way ends as failed); the memory follows the
deletes of the retention, not every delete ever. A shelve forgets the
instance's steps (:meth:`StepLedger.forget`): an unshelve is a new build.
Each host also keeps, for the same retention, a tombstone of every VM it
destroyed for a delete or a shelve (:meth:`StepLedger.ended`), reported with
what it runs: the reconciler finishes a delete or a shelve the store forgot.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from scheduler.store import EndedInstance

#: The operations, each the first item of its keys.
BUILD = "build"
REBUILD = "rebuild"
RESIZE = "resize"
LIVE = "live_migration"

#: Where a step got to on this process.
UNDER_WAY = "under_way"
HANDED_ON = "handed_on"
DONE = "done"
FAILED = "failed"
#: What :meth:`StepLedger.check_in` answers for an instance a delete reached.
DELETED = "deleted"

Key = tuple[str | None, ...]


class StepLedger:
    """Per instance, the step each of its operations reached on this process
    (:data:`UNDER_WAY`, :data:`HANDED_ON`, :data:`DONE`, :data:`FAILED`),
    under a key that starts with the operation; and the instances deleted
    within ``retention`` seconds. Shared by the threads of one compute: its
    lock is reentrant, so a caller may hold it across a check and what must
    go with it (a VM started only while no delete came)."""

    def __init__(self, retention: float = 86400.0, lock: threading.RLock | None = None) -> None:
        self.retention = retention
        self.lock = lock or threading.RLock()
        self._steps: dict[str, dict[Key, str]] = {}
        self._deleted: set[str] = set()
        self._deleted_at: deque[tuple[float, str]] = deque()
        # host -> instance -> its tombstone and when it was written (monotonic);
        # and the writes in order, to forget them after the retention
        self._ended: dict[str, dict[str, tuple[float, EndedInstance]]] = {}
        self._ended_at: deque[tuple[float, str, str]] = deque()

    def check_in(self, instance_uuid: str, key: Key) -> str | None:
        """Begin the step ``key`` of the instance: None when a new attempt
        begins (nothing was, or the last attempt failed; it is under way
        now), else what the step had reached, or :data:`DELETED`."""
        with self.lock:
            if instance_uuid in self._deleted:
                return DELETED
            steps = self._steps.setdefault(instance_uuid, {})
            reached = steps.get(key)
            if reached is None or reached == FAILED:
                steps[key] = UNDER_WAY
                return None
            return reached

    def get(self, instance_uuid: str, key: Key) -> str | None:
        """What the step ``key`` of the instance reached here (None: nothing)."""
        with self.lock:
            return self._steps.get(instance_uuid, {}).get(key)

    def record(self, instance_uuid: str, key: Key, reached: str) -> None:
        """The step ``key`` of the instance reached ``reached`` (a step a
        delete cancelled is recorded as failed, as any step that ended)."""
        with self.lock:
            self._steps.setdefault(instance_uuid, {})[key] = reached

    def steps_of(self, instance_uuid: str) -> dict[Key, str]:
        """Every step of the instance this process knows, by key."""
        with self.lock:
            return dict(self._steps.get(instance_uuid, {}))

    def undo(self, instance_uuid: str, operation: str, migration_uuid: str) -> None:
        """The operation's steps under ``migration_uuid`` were undone here (a
        revert): each is :data:`FAILED`, so a re-drive begins it anew."""
        with self.lock:
            steps = self._steps.get(instance_uuid, {})
            for key in steps:
                if key[:2] == (operation, migration_uuid):
                    steps[key] = FAILED

    def ended(self, instance_uuid: str, host: str, what: str) -> None:
        """The instance's VM on ``host`` was destroyed for a delete or a shelve
        (``what``, :data:`~scheduler.store.records.ENDED_DELETE` or
        ``ENDED_OFFLOAD``) now: its tombstone, kept for the retention."""
        now = time.monotonic()
        with self.lock:
            tomb = EndedInstance(instance_uuid, what, time.time())
            self._ended.setdefault(host, {})[instance_uuid] = (now, tomb)
            self._ended_at.append((now, host, instance_uuid))
            while self._ended_at and now - self._ended_at[0][0] > self.retention:
                written, old_host, old_uuid = self._ended_at.popleft()
                tombs = self._ended.get(old_host, {})
                if old_uuid in tombs and tombs[old_uuid][0] == written:  # not written since
                    del tombs[old_uuid]

    def ended_on(self, host: str) -> tuple[EndedInstance, ...]:
        """The tombstones of ``host`` within the retention."""
        with self.lock:
            return tuple(tomb for _, tomb in self._ended.get(host, {}).values())

    def forget(self, instance_uuid: str) -> None:
        """Forget the instance's steps (a shelve: an unshelve is a new build)."""
        with self.lock:
            self._steps.pop(instance_uuid, None)

    def delete(self, instance_uuid: str) -> None:
        """The instance is deleted: forget its steps, remember it for the
        retention, and forget the instances deleted longer ago than that."""
        now = time.monotonic()
        with self.lock:
            if instance_uuid not in self._deleted:
                self._deleted.add(instance_uuid)
                self._deleted_at.append((now, instance_uuid))
            self._steps.pop(instance_uuid, None)
            while self._deleted_at and now - self._deleted_at[0][0] > self.retention:
                _, old = self._deleted_at.popleft()
                self._deleted.discard(old)

    def deleted(self, instance_uuid: str) -> bool:
        """Whether a delete of the instance reached this process (within the
        retention)."""
        with self.lock:
            return instance_uuid in self._deleted

    def deleted_instances(self) -> set[str]:
        with self.lock:
            return set(self._deleted)
