"""What every operation of a compute works with (:class:`Operation`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compute_sim.driver import ComputeDriver
from compute_sim.ledger import StepLedger
from compute_sim.stats import HostStats
from compute_sim.vms import RunningVMs, running_vm
from scheduler.exceptions import RecordChanged
from scheduler.log import bind_request
from scheduler.objects import RequestSpec, Selection
from scheduler.rpc import ComputeClient, ConductorClient
from scheduler.steps import Step, StepGuard, holds_on
from scheduler.store import RunningInstance

if TYPE_CHECKING:
    from compute_sim.manager import ComputeManager, ComputeStore


@dataclass(frozen=True)
class Attempt:
    """A step that puts an instance on a host, as it was cast (a build, an
    evacuation's rebuild, a resize's prep): the instance, the Selection it
    was cast for (``chosen``), the request and the alternates after it (what
    a failure hands back), and the migration (None: a build)."""

    instance_uuid: str
    chosen: Selection
    spec: RequestSpec
    alternates: list[Selection]
    migration_uuid: str | None = None

    @classmethod
    def read(
        cls,
        instance_uuid: str,
        request_spec: dict[str, Any],
        selection: dict[str, Any],
        host_list: list[dict[str, Any]],
        migration_uuid: str | None = None,
    ) -> Attempt:
        return cls(
            instance_uuid,
            Selection.from_primitive(selection),
            RequestSpec.from_primitive(request_spec),
            [Selection.from_primitive(s) for s in host_list],
            migration_uuid,
        )

    @property
    def host(self) -> str:
        return self.chosen.host


class Operation:
    """One operation's steps on a compute, over the compute's parts (its
    store, clients, driver, ledger, VMs and stats), read through its manager
    at each use."""

    def __init__(self, manager: ComputeManager) -> None:
        self.manager = manager

    @property
    def store(self) -> ComputeStore:
        return self.manager.store

    @property
    def conductor(self) -> ConductorClient:
        return self.manager.conductor

    @property
    def casts(self) -> ComputeClient:
        """The client that casts a walk's next step, to whichever process
        serves its host."""
        assert self.manager.compute is not None, "a compute that moves needs a compute client"
        return self.manager.compute

    @property
    def guard(self) -> StepGuard:
        return self.manager.guard

    @property
    def driver(self) -> ComputeDriver:
        return self.manager.driver

    @property
    def ledger(self) -> StepLedger:
        return self.manager.ledger

    @property
    def vms(self) -> RunningVMs:
        return self.manager.vms

    @property
    def stats(self) -> HostStats:
        return self.manager.stats

    @contextmanager
    def bound(self, ctxt: Any, **keys: str | None) -> Iterator[None]:
        """Log lines inside the block carry the request's id and ``keys``."""
        with bind_request(request_id=getattr(ctxt, "request_id", None), **keys):
            yield

    def bound_to(self, ctxt: Any, attempt: Attempt) -> AbstractContextManager[None]:
        """Log lines inside the block carry the request's id and the attempt's
        instance, host and migration."""
        return self.bound(
            ctxt,
            instance_uuid=attempt.instance_uuid,
            host=attempt.host,
            migration_uuid=attempt.migration_uuid,
        )

    def release_if_here(self, consumer_uuid: str, chosen: Selection, step: Step) -> bool | None:
        """Release the consumer's claim if it is the one on this host, while
        ``step`` is still due (checked inside the release): whether it was
        released; None when the step is no longer due (the record moved on
        since the guard read it: logged, and the caller hands nothing back).

        A stale attempt (a re-driven request's duplicate) must not drop the
        claim of the attempt that is live on another host.
        """
        if not holds_on(self.store, consumer_uuid, chosen.host):
            return False
        try:
            return self.store.release(consumer_uuid, check=step.record_check())
        except RecordChanged as exc:
            self.guard.refused_at_write(step, exc)
            return None

    def vm(
        self, ctxt: Any, instance_uuid: str, chosen: Selection, migration_uuid: str | None = None
    ) -> RunningInstance:
        """The VM a step builds from ``chosen``: the amounts its claim takes,
        for the claim's project and user (see :func:`running_vm`)."""
        claim = chosen.allocation_request
        return running_vm(
            ctxt, instance_uuid, claim.allocations, claim.project_id, claim.user_id, migration_uuid
        )

    def vm_held(
        self, ctxt: Any, instance_uuid: str, host: str, migration_uuid: str | None = None
    ) -> RunningInstance:
        """The VM of a step whose amounts this process no longer knows (it
        started after the step began): what the instance holds on ``host``."""
        held = self.store.get_consumer(instance_uuid)
        if held is None:
            return running_vm(ctxt, instance_uuid, {}, None, None, migration_uuid)
        ours = self.manager.topology.providers_of(host)
        here = {rp: res for rp, res in held.allocations.items() if rp in ours}
        return running_vm(ctxt, instance_uuid, here, held.project_id, held.user_id, migration_uuid)

    def source_host(self, migration_uuid: str) -> str | None:
        """The host of the migration's allocation: where the instance comes from
        (the root of the provider tree it is allocated from: a child provider,
        such as a GPU pool, is not a host)."""
        held = self.store.get_consumer(migration_uuid)
        if held is None:
            return None
        if held.host:
            return held.host
        provider = self.store.get_provider(next(iter(held.allocations)))
        if provider.root_uuid and provider.root_uuid != provider.uuid:
            provider = self.store.get_provider(provider.root_uuid)
        return provider.name
