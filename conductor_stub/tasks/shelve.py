"""Shelve and unshelve: take an instance off its host, and place it again.

``shelve`` stops and offloads at once (Nova's ``shelved_offload_time`` = 0):

1. ACTIVE -> SHELVING by compare-and-set (nothing else can start on the
   instance meanwhile), with a deadline ``[conductor] delete_timeout`` out
   (the same kind of wait: one host destroying one VM).
2. ``shelve_offload_instance`` is cast to the host it runs on; the compute
   destroys the VM and answers ``instance_shelved``.
3. The conductor releases the instance's allocation (its server-group
   membership with it) *before* it marks the record SHELVED_OFFLOADED, with
   no host: a conductor that dies between the two leaves a SHELVING record
   with nothing held, which the sweeper re-drives (the compute answers
   again and the release is a no-op), never an offloaded instance that
   still holds its resources.

``unshelve`` schedules it again exactly as a boot is scheduled, with its
original request spec (flavor, zone, server group, traits, hints; the hosts a
boot was forced to do not steer it): SHELVED_OFFLOADED -> BUILDING under a
new request id, then ``select_destinations`` (so its decision is published as
every move's is) and the build cast to the primary with its alternates. From
there it is a boot: rescheduled onto the alternates, re-driven on its deadline
(``run_instance``), ACTIVE where it was built.
An unshelve that cannot be placed ends in ERROR with the fault, as a boot does
(Nova leaves the instance SHELVED_OFFLOADED instead).

A shelve whose host never answers is finished here after ``max_redrives``
re-drives, as a delete is: the allocation released, the instance
SHELVED_OFFLOADED (a VM left on a host that never answered is the
reconciler's). Shelving a SHELVED_OFFLOADED instance, or unshelving one that
is being unshelved, is refused in one line, like any request for an instance
in the wrong state.
"""

from __future__ import annotations

import uuid as uuidlib

from conductor_stub import records
from conductor_stub.tasks.base import Task, request_context
from conductor_stub.tasks.build import select_and_build
from scheduler.exceptions import InstanceNotFound, InvalidRequest
from scheduler.log import get_logger
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    SCHEDULING,
    SHELVED_OFFLOADED,
    SHELVING,
    SHELVING_TASK,
    InstanceRecord,
    RequestSpec,
)

LOG = get_logger(__name__)


class Shelver(Task):
    """Shelves and unshelves instances, re-sends their requests and takes their
    hosts' answers."""

    # --- shelve -----------------------------------------------------------------------

    def shelve(self, uuid: str) -> InstanceRecord:
        """ACTIVE -> SHELVING, then cast the offload to its host.

        :raises InvalidRequest: the instance is not ACTIVE on a host.
        """
        record = self.store.get_instance(uuid)
        if record.state != ACTIVE or not record.host:
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}, not ACTIVE on a host: "
                "it cannot be shelved now"
            )
        now = self._clock()
        started = self.store.update_instance(
            uuid,
            expected_states=[ACTIVE],
            state=SHELVING,
            task_state=SHELVING_TASK,
            request_id=f"req-{uuidlib.uuid4()}",
            redrives=0,
            fault=None,
            fault_details=None,
            updated_at=now,
            deadline=now + self.settings.delete_timeout,
        )
        if started is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        LOG.info("shelve_started", instance_uuid=uuid, host=record.host)
        self.send_shelve(started)
        return started

    def send_shelve(self, record: InstanceRecord) -> None:
        assert record.host is not None
        self.compute.shelve_offload_instance(request_context(record), record.host, record.uuid)

    def offloaded(self, uuid: str, host: str | None) -> InstanceRecord | None:
        """``host`` destroyed the VM (None: no host answered, the sweeper gave
        up waiting): release, then SHELVED_OFFLOADED. None if the instance is
        not SHELVING on ``host`` (a late or duplicate answer: nothing done)."""
        record = self.store.get_instance(uuid)
        if record.state != SHELVING or (host is not None and record.host != host):
            LOG.info("instance_shelved_ignored", instance_uuid=uuid, state=record.state)
            return None
        released = self.store.release(uuid)
        done = self.store.update_instance(
            uuid,
            expected_states=[SHELVING],
            state=SHELVED_OFFLOADED,
            task_state=None,
            **records.placed_on(),
            deadline=None,
            updated_at=self._clock(),
        )
        if done is not None:
            LOG.info("instance_shelved", instance_uuid=uuid, released=released, host=host)
        return done

    def instance_shelved(self, uuid: str, host: str) -> None:
        """``host`` destroyed the VM of the instance being shelved: release it,
        and it is SHELVED_OFFLOADED (:meth:`offloaded`)."""
        try:
            self.offloaded(uuid, host)
        except InstanceNotFound:  # deleted and past its retention
            LOG.info("instance_shelved_late")

    # --- unshelve ---------------------------------------------------------------------

    def unshelve(self, uuid: str) -> InstanceRecord:
        """SHELVED_OFFLOADED -> BUILDING under a new request id, then schedule it
        as a boot. :raises InvalidRequest: the instance is not offloaded."""
        record = self.store.get_instance(uuid)
        if record.state != SHELVED_OFFLOADED or record.request_spec is None:
            raise InvalidRequest(
                reason=f"instance {uuid} is {record.state}, not {SHELVED_OFFLOADED}: "
                "nothing to unshelve"
            )
        spec = records.unforced(RequestSpec.from_primitive(dict(record.request_spec)))
        now = self._clock()
        started = self.store.update_instance(
            uuid,
            expected_states=[SHELVED_OFFLOADED],
            state=BUILDING,
            request_spec=spec.to_primitive(),
            task_state=SCHEDULING,
            request_id=f"req-{uuidlib.uuid4()}",
            attempts=0,
            tried_hosts=(),
            redrives=0,
            fault=None,
            fault_details=None,
            updated_at=now,
            deadline=now + self.settings.build_timeout,
        )
        if started is None:
            raise InvalidRequest(reason=f"instance {uuid} changed state meanwhile")
        LOG.info("unshelve_started", instance_uuid=uuid)
        if self.scheduler is None:
            raise InvalidRequest(reason="no scheduler client to unshelve with")
        select_and_build(
            self.store,
            self.scheduler,
            self.compute,
            request_context(started),
            records.build_spec(started),
            [started.uuid],
            return_alternates=self.settings.return_alternates,
        )
        return self.store.get_instance(uuid)
