"""The claim stage of a decision: the pick, the atomic claim and its fall
through, claims an instance holds already, and the alternates.

:class:`Claims` runs it for one :class:`~scheduler.engine.pipeline.Engine`,
which wires it after the weighers (see
:meth:`~scheduler.engine.pipeline.Engine.schedule`). One of the best
``host_subset_size`` hosts is drawn, then claimed in the store; a conflict
(another worker got there first) falls through to the next best,
``claim_attempts`` in all. The claim is also the idempotency check: an
instance that holds a claim (a re-driven request) reuses it, never claims
twice, unless the claim's host has stopped heartbeating, when the claim is
released and the instance placed afresh. A claim refused for a strict
server group's policy re-reads the group's members (:meth:`Claims.reread_group`)
and, when they changed, has the engine decide the instance again
(:class:`GroupChanged`). The alternates are the next best hosts with room
for the instance in the view as it stands after the claim.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import structlog

from scheduler import health, rules
from scheduler.engine.context import PlacementContext
from scheduler.engine.placement import Placement, place
from scheduler.engine.ranking import Ranking
from scheduler.engine.reasons import CLAIM_CONFLICT, GROUP_CONFLICT, NOT_TRIED
from scheduler.exceptions import (
    ClaimFailed,
    ConsumerConflict,
    GroupPolicyViolation,
    NoValidHost,
    ProviderNotFound,
    StoreError,
)
from scheduler.explain import InstanceTrace
from scheduler.objects import AllocationRequest, RequestSpec, Selection
from scheduler.store.base import Consumer, GroupClaim, PlacementStore

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView
    from scheduler.engine.settings import EngineSettings

# The claim's events keep the logger of the pipeline, of which this is a stage.
LOG = structlog.get_logger("scheduler.engine.pipeline")

#: (host index, allocations) of a claim accounted for in the view.
Consumed = tuple[int, Mapping[str, Mapping[str, int]]]


class GroupChanged(Exception):
    """A claim was refused for the group, whose members changed since they
    were read (the new ones are in the context): decide the instance again."""


class EngineParts(Protocol):
    """What the claim stage reads of its engine: the store (the engine's to
    replace, so read at each use), the view and the settings."""

    @property
    def store(self) -> PlacementStore: ...

    view: HostView
    settings: EngineSettings


class Claims:
    """The claim stage of an engine (see the module doc)."""

    def __init__(self, engine: EngineParts) -> None:
        self._engine = engine
        self.view = engine.view
        self.settings = engine.settings

    @property
    def store(self) -> PlacementStore:
        return self._engine.store

    def group_members(self, spec: RequestSpec) -> Counter[str]:
        if spec.group is None:
            return Counter()
        return Counter(self.store.group_hosts(spec.group.uuid))

    def reread_group(self, ctx: PlacementContext, host: str) -> None:
        """After a claim on ``host`` refused for the group: its members as the
        store has them now, into ``ctx``. They include this request's earlier
        instances (claimed already), so nothing the request placed is lost.

        :raises GroupChanged: they changed since they were read.
        """
        fresh = self.group_members(ctx.spec)
        if +fresh == +ctx.group_members:
            return  # not a change of members: the host is refused as it stands
        LOG.info(
            "group_members_reread",
            group_uuid=ctx.spec.group.uuid if ctx.spec.group else None,
            refused_host=host,
            hosts=len(fresh),
        )
        ctx.group_members = fresh
        raise GroupChanged

    def own_host(self, spec: RequestSpec, migration_uuid: str | None) -> str | None:
        """Where the moved instance's own membership of its group is held (by its migration)."""
        if spec.group is None or migration_uuid is None:
            return None
        held = self.store.get_consumer(migration_uuid)
        return held.member_host(spec.group.uuid) if held is not None else None

    def pick(self, count: int, rng: np.random.Generator) -> list[int]:
        """Positions in the ranking to claim in turn: one drawn from the best
        ``host_subset_size``, then the others best first, ``claim_attempts`` in all.
        """
        first = int(rng.integers(min(self.settings.host_subset_size, count)))
        attempts = self.settings.claim_attempts
        return [first, *(p for p in range(min(count, attempts + 1)) if p != first)][:attempts]

    def claim_first(
        self,
        instance_uuid: str,
        ranked: Ranking,
        order: list[int],
        placement: Placement,
        ctx: PlacementContext,
        claim: bool,
        trace: InstanceTrace,
        reread: bool = False,
    ) -> tuple[int | None, Selection, bool]:
        """Claim the first host of ``order`` the store accepts.

        Returns its view index (None for a host not in the view), its
        Selection, and whether this call claimed it: False when the instance
        held allocations already (a re-drive, or a racing duplicate of this
        request), which are then reused, never claimed twice.

        :raises GroupChanged: ``reread`` allowed, the store refused a claim
            for the group's policy and the group's members, read again into
            ``ctx``, are not those the ranking was made with (another worker
            placed one meanwhile): the ranking is stale, decide again.
        """
        for position in order:
            index = ranked.host(position)
            at = int(np.searchsorted(placement.hosts, index))
            selection = self.selection(
                index, ranked.weight(position), placement.allocations(self.view, at), ctx.spec
            )
            if not claim:
                return index, selection, True
            try:
                new = self.claim_one(instance_uuid, selection, ctx)
            except ConsumerConflict:
                held = self.store.get_consumer(instance_uuid)
                if held is None:  # released again meanwhile: try the next host
                    trace.conflicts.append((selection.host, ConsumerConflict.__name__))
                    continue
                return (*self.held(held, ranked, trace, ctx.spec), False)
            except (ClaimFailed, ProviderNotFound) as exc:
                LOG.info(
                    "claim_conflict",
                    instance_uuid=instance_uuid,
                    host=selection.host,
                    error=type(exc).__name__,
                )
                health.CLAIM_CONFLICTS.inc()
                if isinstance(exc, GroupPolicyViolation) and reread:
                    self.reread_group(ctx, selection.host)
                trace.conflicts.append((selection.host, type(exc).__name__))
                if isinstance(exc, ClaimFailed):  # re-read the tree's providers it asked
                    for provider_uuid in selection.allocation_request.allocations:
                        self.view.refresh_provider(provider_uuid)
                continue
            if not new:  # held exactly this already
                trace.reused = True
                LOG.info("allocation_reused", instance_uuid=instance_uuid, host=selection.host)
            return index, selection, new
        # Say why the claims failed: a strict group policy the store enforced
        # (another worker placed a member there first) or plain capacity.
        for kind, count in Counter(kind for _, kind in trace.conflicts).items():
            trace.reject(
                GROUP_CONFLICT if kind == GroupPolicyViolation.__name__ else CLAIM_CONFLICT, count
            )
        trace.reject(NOT_TRIED, len(ranked) - len(trace.conflicts))
        raise no_valid_host(trace)

    def alternates(
        self,
        ranked: Ranking,
        primary: int | None,
        placement: Placement,
        ctx: PlacementContext,
        trace: InstanceTrace,
    ) -> list[Selection]:
        """Up to ``max_attempts - 1`` other hosts, best first, each with room now."""
        wanted = self.settings.max_attempts - 1
        if not wanted:
            return []
        assert ctx.request is not None  # set by schedule()
        out: list[Selection] = []
        if not trace.conflicts:
            # Since the candidate step placed the request, the view changed on
            # the primary's providers only (this instance's claim), so its
            # placement still holds for every other host.
            best = ranked.hosts(wanted + 1)
            for position in np.flatnonzero(best != (-1 if primary is None else primary))[:wanted]:
                index = int(best[position])
                at = int(np.searchsorted(placement.hosts, index))
                out.append(
                    self.selection(
                        index,
                        ranked.weight(int(position)),
                        placement.allocations(self.view, at),
                        ctx.spec,
                    )
                )
            return out
        hosts, weights = ranked.hosts(), ranked.total[ranked.order()]
        positions = np.flatnonzero(hosts != (-1 if primary is None else primary))
        # Hosts were re-read after refused claims: place the request again on
        # the best trees as the view stands now.
        # Best first, in growing chunks: usually the first few still fit.
        start, chunk = 0, 4 * wanted
        while len(out) < wanted and start < len(positions):
            part = positions[start : start + chunk]
            fresh = place(self.view, ctx.request, hosts[part])
            for at in range(min(wanted - len(out), len(fresh))):
                index = int(fresh.hosts[at])
                weight = float(weights[part[np.flatnonzero(hosts[part] == index)[0]]])
                out.append(
                    self.selection(index, weight, fresh.allocations(self.view, at), ctx.spec)
                )
            start, chunk = start + chunk, chunk * 4
        return out

    def selection(
        self,
        index: int,
        weight: float,
        allocations: Mapping[str, Mapping[str, int]],
        spec: RequestSpec,
    ) -> Selection:
        """A destination; its provider is the host's root, its allocation request
        lists every provider of the tree the request takes from."""
        name = self.view.names[index]
        return Selection(
            host=name,
            node=name,
            provider_uuid=self.view.uuids[index],
            allocation_request=AllocationRequest(allocations, spec.project_id, spec.user_id),
            weight=weight,
            availability_zone=self.view.zone_of(index, spec.availability_zone),
        )

    def held(
        self,
        held: Consumer,
        ranked: Ranking,
        trace: InstanceTrace,
        spec: RequestSpec,
    ) -> tuple[int | None, Selection]:
        """The Selection of allocations the instance already holds (never re-claimed)."""
        trace.reused = True
        provider_uuid = next(
            (rp for rp in held.allocations if self.view.index_of_uuid(rp) is not None),
            next(iter(held.allocations)),
        )
        index = self.view.index_of_uuid(provider_uuid)
        if index is not None:
            host = self.view.names[index]
        else:  # not a host of the view (a nested provider)
            host = held.host or self.store.get_provider(provider_uuid).name
        weight = 0.0
        if index is not None and (found := ranked.weight_of(index)) is not None:
            weight = found
        request = AllocationRequest(held.allocations, held.project_id, held.user_id)
        at_host = index if index is not None else self.view.index_of(host)
        zone = self.view.zone_of(at_host, spec.availability_zone) if at_host is not None else None
        LOG.info("allocation_reused", instance_uuid=held.uuid, host=host)
        return index, Selection(
            host=host,
            node=host,
            provider_uuid=provider_uuid,
            allocation_request=request,
            weight=weight,
            availability_zone=zone,
        )

    def claim_one(self, instance_uuid: str, selection: Selection, ctx: PlacementContext) -> bool:
        """Claim ``selection`` for the instance: True when written, False when
        the instance held exactly this already. A claim it holds elsewhere, on
        a host that has stopped heartbeating, is dropped and the claim made
        again; any other claim it holds is a :class:`ConsumerConflict`."""

        def claim() -> bool:
            return self.store.claim(
                instance_uuid,
                selection.allocation_request,
                GroupClaim.for_spec(ctx.spec, selection.host, ctx.migration_uuid),
            )

        try:
            return claim()
        except ConsumerConflict:
            held = self.store.get_consumer(instance_uuid)
            if held is None or not self.on_a_down_host(held, ctx.now):
                raise
            # Its host died with the build (no result will come): place it
            # afresh, as if it had never been placed.
            self.release_from_down_host(held)
            return claim()

    def on_a_down_host(self, held: Consumer, now: float) -> bool:
        """Whether the host of a claim the instance holds has stopped heartbeating."""
        for provider_uuid in held.allocations:
            index = self.view.index_of_uuid(provider_uuid)
            if index is not None:
                return not rules.is_up(
                    now, float(self.view.last_seen[index]), self.settings.service_down_time
                )
        return False

    def release_from_down_host(self, held: Consumer) -> None:
        """Drop a re-driven instance's claim on a host that is down, so it is placed
        again on a live one (the conductor re-drives a boot whose build never
        reported back; re-using the claim would send it to the dead host again)."""
        host = next(
            (
                self.view.names[i]
                for rp in held.allocations
                if (i := self.view.index_of_uuid(rp)) is not None
            ),
            held.host,
        )
        self.store.release(held.uuid)
        LOG.warning("allocation_on_down_host_released", instance_uuid=held.uuid, host=host)

    def release(self, consumers: Sequence[str]) -> None:
        for consumer in consumers:
            try:
                self.store.release(consumer)
            except StoreError:
                # Keep releasing the others; the caller gets the original error.
                LOG.exception("release_failed", instance_uuid=consumer)

    def unconsume(self, consumed: Sequence[Consumed]) -> None:
        for index, allocations in consumed:
            self.view.consume_allocation(index, allocations, sign=-1)


def no_valid_host(trace: InstanceTrace) -> NoValidHost:
    """The NoValidHost of an instance no host was found for, logged with its account."""
    details = trace.details()
    LOG.info("no_valid_host", instance_uuid=trace.instance_uuid, details=details)
    return NoValidHost(details=details, reasons=trace.reasons)
