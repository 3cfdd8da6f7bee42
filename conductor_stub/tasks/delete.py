"""A delete: fence, terminate, release, expire.

A delete is ordered so that it leaves no claim and no VM behind, whatever
it races (a build, a reschedule, a resize, a live migration, a re-driven
copy of any of them)
and whatever order the casts arrive in:

1. **Fence first.** :meth:`Store.start_delete` turns the record DELETING and
   fences the uuid in one step: from then on every claim for the instance
   is refused (:class:`ConsumerDeleted`), the scheduler's and the
   conductor's of an alternate alike, so what it holds can only shrink.
2. **Then read where it may run**: the hosts of the instance's and its
   migration's allocations, plus the record's host and source. Read after
   the fence, this set cannot miss a claim. It is kept in the record
   (``pending_hosts``). For an instance being evacuated (REBUILDING) they
   are its down source (the migration's allocation, the record's host) and
   its destination (the instance's claim): the destination answers, the
   down source only once it is back (it then destroys the VM, if its
   clean-up has not already), else the re-drives run out without it. A
   MIGRATING instance's are its source (its migration's and host) and its
   destination (its own claim), both.
3. **Terminate on each of them** (``terminate_instance``). A compute
   destroys the VM if it runs there and remembers the instance, so a build,
   resize or live migration step in flight for it, or one arriving later,
   makes no VM; then
   it says so (``instance_terminated``).
4. **Release and expire once every host has answered**: in one step the
   instance's and its migration's allocations go (server-group membership
   with them) and the record is DELETED, kept ``deleted_retention`` seconds
   (for ``show`` and audits), then removed by the store itself.

No host to wait on (an instance never placed, or in ERROR): step 4 at once.
A preempting claim begins its victims' deletes itself (steps 1 and 2, in its
own store step: see :mod:`conductor_stub.tasks.preempt`); once a victim is
DELETED its preemptor is built if it waits on no other.
A late result (a build that succeeded, a resize step, a live migration's
result, a reschedule) finds
the record DELETING or DELETED and is ignored. The record's deadline drives
re-sends of the terminate to the hosts that have not answered (see
:mod:`conductor_stub.redrive`); after ``max_redrives`` the delete finishes
without them, and a VM left on a host that never answered is the
reconciler's. Deleting a DELETING or DELETED instance is a no-op; an unknown
uuid is :class:`InstanceNotFound`, and nothing is changed.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable, Sequence

from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.base import Task, request_context, wait_for
from conductor_stub.tasks.preempt import Preempter
from scheduler.exceptions import InstanceNotFound, ProviderNotFound
from scheduler.log import get_logger
from scheduler.objects import DELETED, DELETING, DELETING_TASK, InstanceRecord
from scheduler.rpc import ComputeClient

LOG = get_logger(__name__)


class Deleter(Task):
    """Deletes instances, re-sends their terminates and finishes their deletes."""

    def __init__(
        self,
        store: ConductorStore,
        compute: ComputeClient,
        settings: ConductorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store, None, compute, settings, clock)
        #: The preemptors waiting on the instances this deletes (a victim's
        #: delete, begun by the preempting claim itself, is one like any other).
        self.preempter = Preempter(store, compute, self.settings, clock)

    def delete(self, uuid: str) -> InstanceRecord:
        """Start deleting one instance (steps 1-3, or 4 at once with no host).

        :class:`InstanceNotFound` for an unknown uuid (nothing changed); a
        DELETING or DELETED instance is returned as it is.
        """
        now = self._clock()
        record, started = self.store.start_delete(
            uuid,
            task_state=DELETING_TASK,
            request_id=f"req-{uuidlib.uuid4()}",
            redrives=0,
            pending_hosts=(),
            updated_at=now,
            deadline=now + self.settings.delete_timeout,
        )
        if not started:
            LOG.info("delete_duplicate", instance_uuid=uuid, state=record.state)
            return record
        LOG.info("delete_started", instance_uuid=uuid, host=record.host)
        return self.terminate(record)

    def terminate(self, record: InstanceRecord) -> InstanceRecord:
        """Cast the terminate to each host still pending (the hosts read from the
        store, if none was recorded yet); finish at once when there is none."""
        hosts = record.pending_hosts or self.hosts_of(record)
        if not hosts:
            return self.finish(record.uuid, None, force=True) or record
        if hosts != record.pending_hosts:
            updated = self.store.update_instance(
                record.uuid, expected_states=[DELETING], pending_hosts=hosts
            )
            if updated is None:  # finished meanwhile
                return self.store.get_instance(record.uuid)
            record = updated
        ctxt = request_context(record)
        for host in hosts:
            self.compute.terminate_instance(ctxt, host, record.uuid)
        return record

    def hosts_of(self, record: InstanceRecord) -> tuple[str, ...]:
        """Every host that may run the instance or build it: those of its and its
        migration's allocations (the root of a nested provider), its host and
        its move's source (a resize's or a live migration's)."""
        hosts = [h for h in (record.host, record.source_host) if h]
        for consumer in (record.uuid, record.migration_uuid):
            held = self.store.get_consumer(consumer) if consumer else None
            if held is None:
                continue
            for provider_uuid in held.allocations:
                try:
                    provider = self.store.get_provider(provider_uuid)
                    if provider.root_uuid and provider.root_uuid != provider.uuid:
                        provider = self.store.get_provider(provider.root_uuid)
                except ProviderNotFound:
                    continue
                hosts.append(provider.name)
        return tuple(dict.fromkeys(hosts))

    def finish(self, uuid: str, host: str | None, *, force: bool = False) -> InstanceRecord | None:
        """``host`` answered (None: no host to wait on); step 4 once none is left."""
        record = self.store.finish_delete(
            uuid, host, self.settings.deleted_retention, self._clock(), force=force
        )
        if record is not None and record.state == DELETED:
            LOG.info("instance_deleted", instance_uuid=uuid, host=host, forced=force)
            self.preempter.victim_deleted(record)
        return record

    def instance_terminated(self, uuid: str, host: str) -> None:
        """``host`` destroyed the VM of the instance being deleted; the last host
        to answer finishes the delete (:meth:`finish`)."""
        try:
            record = self.finish(uuid, host)
        except InstanceNotFound:  # past its retention already
            LOG.info("instance_terminated_late")
            return
        if record is None:
            LOG.warning("instance_terminated_not_deleting")
        elif record.state != DELETED:
            LOG.info("delete_waiting", pending=list(record.pending_hosts))

    def wait(
        self, uuids: Sequence[str], timeout: float, poll: float = 0.1
    ) -> tuple[list[InstanceRecord], bool]:
        """Poll until every instance is DELETED (or gone past its retention);
        (the records still there, timed out?)."""
        return wait_for(
            lambda: [r for r in self.store.list_instances(uuids) if r.state != DELETED],
            lambda left: not left,
            timeout,
            poll,
        )
