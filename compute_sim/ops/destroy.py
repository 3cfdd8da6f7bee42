"""The operations that destroy a VM: a delete, a shelve, a reap, and a host
back from an outage destroying the VMs evacuated meanwhile.

A delete reaches each host that may run the instance or be building it
(``terminate_instance``): the host destroys the VM, if it runs there, and
remembers the instance as deleted (for ``terminated_retention`` seconds,
``[conductor] deleted_retention``, as long as the store fences its claims;
what its steps were is forgotten at once: :meth:`~compute_sim.ledger.StepLedger.delete`),
so a build or move step still in flight for it, or arriving later (whatever
order the casts come in), makes no VM and reports nothing; then it tells the
conductor (``instance_terminated``), which releases the claims.

A shelve reaches the host the instance runs on (``shelve_offload_instance``):
the host destroys the VM and tells the conductor (``instance_shelved``),
which releases the allocation; its steps are forgotten, so an unshelve may
build the instance on the same host again.

Each host reports, with what it runs, a tombstone of every VM it destroyed for
a delete or a shelve within the retention
(:class:`~scheduler.store.EndedInstance`): a store that went back in time to
before the delete or the shelve is set right by the reconciler.

For a VM no live record places on its host the reconciler casts
``reap_instance`` (RPC 1.8), and the host destroys it (``orphan_vm_reaped``
and ``vm_stopped``) or, with ``running_deleted_instance_action = log``, only
logs it (``orphan_vm_found``); nothing is reported to the conductor.

A process whose heartbeats stopped for longer than ``service_down_time``
(stopped, or cut off from the store) finds, before its next heartbeat, the
VMs whose instance records no longer place them on their host (evacuated
meanwhile, or deleted) and destroys them (``evacuated_vm_destroyed``,
``vm_stopped``) instead of running them a second time; it never reports them.
"""

from __future__ import annotations

from typing import Any

from compute_sim.ops.base import Operation
from scheduler.log import get_logger
from scheduler.objects import evacuated_from
from scheduler.store.records import ENDED_DELETE, ENDED_OFFLOAD

LOG = get_logger(__name__)

# What ``reap_instance`` does with a VM no live record places on its host
# (``[compute] running_deleted_instance_action``).
REAP = "reap"
LOG_ONLY = "log"


class Destroy(Operation):
    """Deletes, shelves and reaps on this compute's hosts."""

    def terminate(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """Destroy the instance's VM on ``host`` (if it runs there) and cancel
        whatever is in flight for it in this process; then tell the conductor.

        Idempotent: a repeat (the conductor re-drives a delete it has not heard
        back on) destroys nothing more and reports again.
        """
        with self.bound(ctxt, instance_uuid=instance_uuid, host=host):
            with self.ledger.lock:
                self.ledger.delete(instance_uuid)
                destroyed = self.vms.stop(instance_uuid, host) is not None
                self.ledger.ended(instance_uuid, host, ENDED_DELETE)
            LOG.info("instance_terminated", destroyed=destroyed)
            self.conductor.instance_terminated(ctxt, instance_uuid, host)

    def shelve_offload(self, ctxt: Any, instance_uuid: str, host: str) -> None:
        """Destroy the VM of an instance being shelved (if it runs on ``host``),
        then tell the conductor, which releases its allocation.

        Idempotent: a repeat destroys nothing more and reports again. Unlike a
        delete, nothing is remembered: an unshelve may build it here again.
        """
        with self.bound(ctxt, instance_uuid=instance_uuid, host=host):
            with self.ledger.lock:
                destroyed = self.vms.stop(instance_uuid, host) is not None
                self.ledger.forget(instance_uuid)  # an unshelve is a new request
                self.ledger.ended(instance_uuid, host, ENDED_OFFLOAD)
            LOG.info("instance_offloaded", destroyed=destroyed)
            self.conductor.instance_shelved(ctxt, instance_uuid, host)

    def reap(self, ctxt: Any, instance_uuid: str, host: str, reason: str) -> None:
        """The reconciler found the instance's VM running on ``host`` with no
        live record placing it there: destroy it (``orphan_vm_reaped``), or
        only log it (``orphan_vm_found``), as ``running_deleted_instance_action``
        says. Idempotent; a VM not running there is logged and left alone.
        Nothing is reported: the reconciler deals with the allocations."""
        reaping = self.manager.running_deleted_instance_action == REAP
        with self.bound(ctxt, instance_uuid=instance_uuid, host=host):
            with self.ledger.lock:
                running = self.vms.runs(instance_uuid, host)
                if running and reaping:
                    self.vms.stop(instance_uuid, host)
            if not running:
                LOG.info("orphan_vm_not_running", reason=reason)
            elif reaping:
                LOG.warning("orphan_vm_reaped", reason=reason)
            else:
                LOG.warning("orphan_vm_found", reason=reason)

    def evacuated(self) -> list[tuple[str, str]]:
        """Destroy every VM of this process that its instance record no longer
        places here (:func:`evacuated_from`); return the (instance, host) pairs
        destroyed. They are never reported: the instance lives elsewhere."""
        running = self.vms.everywhere(self.manager.hosts)
        found = {r.uuid: r for r in self.store.list_instances(sorted({u for u, _ in running}))}
        destroyed = []
        for uuid, host in running:
            if evacuated_from(found.get(uuid), host):
                self.vms.stop(uuid, host)
                destroyed.append((uuid, host))
                LOG.info("evacuated_vm_destroyed", instance_uuid=uuid, host=host)
        return destroyed
