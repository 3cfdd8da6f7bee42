"""A claim refused for the group's strict policy re-reads the group's members.

The engine reads a group's members once per request; another worker may
place a member between that read and this request's claim, and the store's
atomic claim then refuses the host. These tests make that interleaving happen
on the in-memory store (a second claim made right after the engine's read)
and check that the engine reads the members again and decides anew, boundedly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import structlog.testing

from scheduler.engine.pipeline import GROUP_CONFLICT, GROUP_REREADS, NOT_TRIED
from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, VCPU, AllocationRequest
from scheduler.store.base import GroupClaim
from tests.unit.factories import HookedStore, Host, engine, group, host, spec, uuid_of

#: More hosts than claim_attempts (5) can try: a stale ranking cannot stumble
#: on the group's host by falling through.
HOSTS = 8


class RacedStore(HookedStore):
    """A store in which ``race`` runs right after each read of a group's members
    (what another worker does between this worker's read and its claim)."""

    def __init__(self, hosts: Iterable[Host]) -> None:
        super().__init__(hosts)
        self.race: Callable[[int], None] | None = None
        self.group_reads = 0

    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        members = super().group_hosts(group_uuid)
        self.group_reads += 1
        if self.race is not None:
            self.race(self.group_reads)
        return members


def member(store: HookedStore, name: str, on: str, policy: str) -> None:
    """Another worker's member of the group, claimed on host ``on``."""
    g = group(policy)
    HookedStore.claim(
        store,
        uuid_of(name),
        AllocationRequest({uuid_of(on): {VCPU: 1, MEMORY_MB: 512}}, "project", "user"),
        GroupClaim(g.uuid, g.policy, on, g.max_server_per_host),
    )


def after_the_first_read(store: RacedStore, on: str, policy: str) -> None:
    """Another worker places a member on ``on`` right after the engine's first
    read of the group's members (then the race is over)."""

    def race(reads: int) -> None:
        if reads == 1:
            member(store, "other-worker", on, policy)

    store.race = race


def ranked_hosts() -> list[Host]:
    """h0 best (most free RAM) ... the last host worst: the group's host, where
    another worker put the first member, is the one a stale ranking tries last."""
    return [host(f"h{i}", used={MEMORY_MB: 1000 * i}) for i in range(HOSTS)]


def test_affinity_member_follows_a_member_placed_after_the_read() -> None:
    store = RacedStore(ranked_hosts())
    last = f"h{HOSTS - 1}"
    # The group was empty when read; then it is not.
    after_the_first_read(store, last, "affinity")
    eng = engine(store, weighers=("RAMWeigher",))
    with structlog.testing.capture_logs() as logs:
        result = eng.schedule("req", spec(group=group("affinity")), [uuid_of("i1")])
    assert result.selections[0][0].host == last
    assert store.group_hosts(group("affinity").uuid) == {last: 2}
    # Read twice: at the start and after the refused claim; the decision that
    # stands is the second, which tried no stale host.
    assert store.group_reads == 3  # (the assert above read it once more)
    assert result.traces[0].conflicts == []
    [reread] = [e for e in logs if e["event"] == "group_members_reread"]
    assert reread["refused_host"] == "h0"


def test_anti_affinity_member_avoids_a_member_placed_after_the_read() -> None:
    store = RacedStore(ranked_hosts())
    after_the_first_read(store, "h0", "anti-affinity")
    selections = engine(store, weighers=("RAMWeigher",)).select(
        "req", spec(group=group("anti-affinity")), [uuid_of("i1")]
    )
    assert selections[0][0].host == "h1"
    # The alternates are decided with the fresh members too: none on h0.
    assert "h0" not in [s.host for s in selections[0]]
    assert store.group_reads == 2


def test_a_multi_instance_request_keeps_its_own_members_across_a_reread() -> None:
    store = RacedStore(ranked_hosts())
    after_the_first_read(store, "h0", "anti-affinity")
    uuids = [uuid_of(f"i{n}") for n in range(3)]
    selections = engine(store, weighers=("RAMWeigher",)).select(
        "req", spec(num_instances=3, group=group("anti-affinity")), uuids
    )
    hosts = [s[0].host for s in selections]
    assert len(set(hosts)) == 3 and "h0" not in hosts
    assert store.group_hosts(group("anti-affinity").uuid) == dict.fromkeys(["h0", *hosts], 1)


def test_rereads_are_bounded_when_the_group_changes_under_every_claim() -> None:
    """Members on every host (so every claim is refused), and each read
    reports a different member elsewhere: the engine decides again at most
    GROUP_REREADS times, then counts the hosts it tried as refused."""
    store = RacedStore([host(f"h{i}") for i in range(3)])
    for i in range(3):
        member(store, f"member-{i}", f"h{i}", "anti-affinity")
    real = HookedStore.group_hosts

    def lying(group_uuid: str) -> dict[str, int]:
        real(store, group_uuid)
        store.group_reads += 1
        return {f"elsewhere-{store.group_reads}": 1}  # never the same twice

    store.group_hosts = lying  # type: ignore[method-assign]
    with pytest.raises(NoValidHost) as err:
        engine(store, weighers=()).select(
            "req", spec(group=group("anti-affinity")), [uuid_of("i1")]
        )
    assert store.group_reads == 1 + GROUP_REREADS
    assert err.value.reasons == {GROUP_CONFLICT: 3}
    assert uuid_of("i1") not in store.consumers


def test_no_new_decision_when_the_members_did_not_change() -> None:
    """A refusal the group's members as read already explain (no group filter
    enabled, so the ranking never looked at them) is a refusal as before: the
    members are read again, found the same, and the claim falls through."""
    store = RacedStore([host(f"h{i}") for i in range(2)] + [host("free", used={MEMORY_MB: 9000})])
    for i in range(2):
        member(store, f"member-{i}", f"h{i}", "anti-affinity")
    eng = engine(store, enabled_filters=(), weighers=("RAMWeigher",))
    with structlog.testing.capture_logs() as logs:
        result = eng.schedule("req", spec(group=group("anti-affinity")), [uuid_of("i1")])
    assert result.selections[0][0].host == "free"
    assert sorted(result.traces[0].conflicts) == [
        ("h0", "GroupPolicyViolation"),
        ("h1", "GroupPolicyViolation"),
    ]
    assert not [e for e in logs if e["event"] == "group_members_reread"]


def test_claim_attempts_still_bound_a_decision_after_a_reread() -> None:
    """After the re-read, the fresh decision's own claims are bounded by
    claim_attempts like any (each refused for capacity here)."""
    store = RacedStore(ranked_hosts())

    def race(reads: int) -> None:
        if reads == 1:
            member(store, "other-worker", "h0", "anti-affinity")
            store.conflict_on.update(f"h{i}" for i in range(1, 3))

    store.race = race
    with pytest.raises(NoValidHost) as err:
        engine(store, weighers=("RAMWeigher",), claim_attempts=2).select(
            "req", spec(group=group("anti-affinity")), [uuid_of("i1")]
        )
    assert err.value.reasons == {
        "server group anti-affinity": 1,
        "claim conflict": 2,
        NOT_TRIED: HOSTS - 3,
    }
