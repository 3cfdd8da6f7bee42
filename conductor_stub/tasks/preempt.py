"""A preemption, the conductor's side: end the victims, then build the preemptor.

A boot of a class that may preempt (see ``doc/source/admin/priority-classes.rst``)
that finds no host is placed by the scheduler worker with one atomic store
step (:meth:`scheduler.store.base.PlacementStore.claim_preempting`): the
preemptor's claim is written, the victims' allocations are dropped, each
victim turns DELETING (fenced: no claim, build or move step for it passes
any more; its fault "preempted by instance <uuid>", ``preempted_by`` naming
the preemptor, its own host pending, its delete due at once) and the
preemptor's record waits on them (BUILDING, task ``preempting``, its host
and ``victims`` named). The worker casts nothing but ``scheduler.preempt``.

**Allocations.** The victims' allocations go in that step and the preemptor
holds its own from then on: the store never counts more than the capacity,
usage always equals the sum of the live allocations, and nothing can take
the room the victims free before the preemptor does. For the moment between
that step and the victims' VMs being destroyed, a victim's VM runs on the
host with no allocation: its record is DELETING, an instance in flight
(the same as any delete's VM between its release and its host's answer),
and the preemptor's VM does not exist yet: the host never runs both.

**The conductor learns of it from the records**, not from a message: each
victim's delete is due at once, so the next sweep (:mod:`conductor_stub.redrive`)
casts its terminate through the delete path (:mod:`conductor_stub.tasks.delete`)
and re-sends it on the delete's deadlines. When a victim's delete finishes
(its host said the VM is gone, or the delete gave up on the host after its
re-drives: then the VM left there is the reconciler's, as for any delete),
:meth:`Preempter.build_if_ready` looks at its preemptor: once every victim
is DELETED, one compare-and-set moves the preemptor from ``preempting`` to
``spawning`` and only the writer that won casts the build, to the host it
holds its claim on. The build step refuses a record still ``preempting``
(:mod:`compute_sim.steps`), so a late or forged build, or a re-driven
``run_instance`` that finds the claim held, builds nothing meanwhile.

**Killed mid-way.** A worker killed before the step: nothing was written,
the boot's own deadline re-drives it. Killed after: the records say it all.
A conductor killed at any point: the sweep reads the victims' deletes and
the preemptor's deadline from the store. The preemptor's deadline
(:meth:`Preempter.redrive`) builds it if its victims are gone, else waits
one more ``delete_timeout`` (the victims' deletes end within their own
re-drives); after ``max_redrives`` the boot fails to ERROR, its claim
released, and the victims' deletes finish on their own. Nothing is built
twice (one compare-and-set), no victim is left half evicted (a fenced
DELETING record always ends DELETED), and a build is cast only once every
victim is DELETED.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from conductor_stub import records
from conductor_stub.records import ConductorSettings, ConductorStore
from conductor_stub.tasks.base import request_context
from scheduler.exceptions import InstanceNotFound, ProviderNotFound
from scheduler.log import get_logger
from scheduler.objects import (
    BUILDING,
    DELETED,
    PREEMPTING,
    SPAWNING,
    AllocationRequest,
    InstanceRecord,
    Selection,
)
from scheduler.rpc import ComputeClient

LOG = get_logger(__name__)

#: What the user of a preemptor that waited too long reads.
WAITED_TOO_LONG = "the instances it preempts were not removed in time"


class Preempter:
    """Builds a preemptor once its victims are gone; its re-drive."""

    def __init__(
        self,
        store: ConductorStore,
        compute: ComputeClient,
        settings: ConductorSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.compute = compute
        self.settings = settings
        self._clock = clock

    def victim_deleted(self, victim: InstanceRecord) -> None:
        """A victim's delete finished: its preemptor may be built now."""
        if victim.state == DELETED and victim.preempted_by:
            self.build_if_ready(victim.preempted_by)

    def waiting_on(self, record: InstanceRecord) -> list[str]:
        """The victims of a waiting preemptor that are not DELETED yet."""
        found = {r.uuid: r for r in self.store.list_instances(record.victims)}
        return [u for u in record.victims if u in found and found[u].state != DELETED]

    def build_if_ready(self, uuid: str) -> bool:
        """Cast the preemptor's build if it waits and every victim is DELETED;
        True if this call cast it (one compare-and-set: no other does)."""
        try:
            record = self.store.get_instance(uuid)
        except InstanceNotFound:
            return False
        if record.state != BUILDING or record.task_state != PREEMPTING:
            return False
        left = self.waiting_on(record)
        if left:
            LOG.info("preemptor_waiting", instance_uuid=uuid, victims=left)
            return False
        selection = self._selection(record)
        if selection is None:
            LOG.warning("preemptor_without_claim", instance_uuid=uuid, host=record.host)
            return False
        now = self._clock()
        updated = self.store.update_instance(
            uuid,
            expected_states=[BUILDING],
            expect={"task_state": PREEMPTING},
            task_state=SPAWNING,
            victims=(),
            redrives=0,
            updated_at=now,
            deadline=now + self.settings.build_timeout,
        )
        if updated is None:
            return False  # another copy moved it on
        self.compute.build_and_run_instance(
            request_context(updated), uuid, records.build_spec(updated), selection, []
        )
        LOG.info("preemptor_build_cast", instance_uuid=uuid, host=selection.host)
        return True

    def redrive(self, record: InstanceRecord) -> str:
        """The preemptor's deadline passed: build it if it may be built, else
        wait one more ``delete_timeout`` on its victims, or, after
        ``max_redrives``, fail the boot (its claim released). Returns what
        was done (``preempt_build``, ``preempt_wait``, ``timed_out``, or
        ``moved_on``)."""
        if self.build_if_ready(record.uuid):
            return "preempt_build"
        if record.redrives >= self.settings.max_redrives:
            details = (
                f"its victims {', '.join(self.waiting_on(record)) or '(none left)'} were not "
                f"removed after {record.redrives} wait(s) of "
                f"{self.settings.delete_timeout:g} s"
            )
            if records.fail_build(
                self.store, record.uuid, WAITED_TOO_LONG, details, clock=self._clock
            ):
                return "timed_out"
            return "moved_on"
        now = self._clock()
        pushed = self.store.update_instance(
            record.uuid,
            expected_states=[BUILDING],
            expect={"task_state": PREEMPTING},
            redrives=record.redrives + 1,
            updated_at=now,
            deadline=now + self.settings.delete_timeout,
        )
        return "preempt_wait" if pushed is not None else "moved_on"

    def _selection(self, record: InstanceRecord) -> Selection | None:
        """Where the preemptor is built: its host, and the claim it holds there
        (None: it holds none, or its host is gone)."""
        held = self.store.get_consumer(record.uuid)
        if held is None or record.host is None:
            return None
        try:
            provider = self.store.get_provider_by_name(record.host)
        except ProviderNotFound:
            return None
        return Selection(
            host=record.host,
            node=record.node or record.host,
            provider_uuid=provider.uuid,
            allocation_request=AllocationRequest(held.allocations, held.project_id, held.user_id),
            weight=0.0,
            availability_zone=record.availability_zone,
        )
