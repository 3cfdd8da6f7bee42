"""The Redis claim script and the Python rules give the same answer, every time.

The capacity, unit and server-group rules are written twice: once in
:mod:`scheduler.rules` (which the in-memory store and the host view call)
and once in the Lua claim script (:mod:`scheduler.store.scripts`), where
Python cannot run. This test draws random placement states and claims, sets
up the same state on a :class:`MemoryStore` and on a :class:`RedisStore`
over the real Redis (under a private key prefix, deleted afterwards), makes
the same claim on both, and requires the same answer: the same return
value, or the same typed error with the same fields (rule and limit for a
:class:`UnitRuleViolation`, free for a :class:`CapacityExceeded`, ...), and
then the same usages, generations and group members. The claim is made
twice, so a repeat must also agree (a no-op, or the same refusal).

What is drawn: one or two providers, each with inventories of a few classes
(totals, reserved, also above the total, min_unit, max_unit (None, zero,
above the total), step_size, allocation ratios, fractional ones where the
truncation of ``(total - reserved) * ratio`` decides) and usage, also above
what the inventory now gives (an inventory lowered under its usage); a
request over those providers, now and then a class a provider has no
inventory of or a provider that does not exist; and a server group with
members on hosts, a strict or soft policy and ``max_server_per_host``, and
now and then an own-membership consumer named by the claim (a move's
migration): a member of the group on the claim's host or another, a member
of another group, or holding nothing.
Numbers stay below 10**12: the script's JSON encoder writes 14 significant
digits, exact below 10**14.

A preempting claim is the same script with victims: one property draws
running instances (priority, preemptibility, state, group membership), which
of them the claim names and whether as read or stale, and requires the same
answer and state of both stores (repeats included).

A delete's release is written twice too (``finish_delete`` in Lua and in
the memory store): one property draws what an instance and its migration
hold, their group, the hosts a delete waits on, the answers (repeats and
strangers among them), a forced finish and a late claim, and requires the
same answers and the same usages, generations, group members and record.

Every state is written under fresh uuids, so nothing is reset between
examples: one connection and one prefix serve the whole run.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.exceptions import (
    ClaimFailed,
    ConsumerConflict,
    ConsumerDeleted,
    InvalidRequest,
    ProviderNotFound,
    RecordChanged,
)
from scheduler.objects import ACTIVE, BUILDING, RESIZING, AllocationRequest, InstanceRecord
from scheduler.store import (
    Eviction,
    GroupClaim,
    Inventory,
    MemoryStore,
    RedisStore,
    Store,
    Victim,
)
from scheduler.store.records import PREEMPTIONS_KEPT
from tests.fixtures.store import REDIS_URL, ask

#: Examples per run of each property: every CI run draws this many fresh ones.
EXAMPLES = 2000
GROUP_EXAMPLES = 500

CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_FPGA")
HOSTS = ("h1", "h2", "h3")
POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
OWN_ABSENT, OWN_ELSEWHERE = "absent", "another-group"
#: An inventory big enough for any seeding claim (usage and group members).
ROOMY = Inventory(total=2**50)

small = st.integers(min_value=0, max_value=40)
numbers = st.one_of(
    small, st.integers(min_value=0, max_value=4096), st.integers(min_value=0, max_value=10**12)
)
ratios = st.one_of(
    st.sampled_from([1.0, 0.5, 1.5, 2.0, 16.0, 0.1, 0.3, 0.7, 1.1, 1 / 3, 0.9999999]),
    st.floats(min_value=0.01, max_value=40.0, allow_nan=False, allow_infinity=False),
)
inventories = st.builds(
    Inventory,
    total=st.one_of(st.integers(min_value=8, max_value=4096), numbers),
    reserved=st.one_of(st.just(0), numbers),
    min_unit=st.one_of(st.just(1), st.integers(min_value=1, max_value=8)),
    max_unit=st.one_of(st.none(), st.integers(min_value=64, max_value=10**12), numbers),
    step_size=st.one_of(st.just(1), st.integers(min_value=1, max_value=8)),
    allocation_ratio=ratios,
)
amounts = st.one_of(st.integers(min_value=-2, max_value=48), numbers)


@dataclass(frozen=True)
class ProviderState:
    inventories: Mapping[str, Inventory]
    usages: Mapping[str, int]  # only classes it has inventory of


@dataclass(frozen=True)
class GroupState:
    policy: str
    members: Mapping[str, int]  # host -> members there
    host: str  # where the claim puts the new member
    max_server_per_host: int
    #: The consumer the claim names as holding its own membership: None, the
    #: claim names none; OWN_ABSENT, it holds nothing; OWN_ELSEWHERE, it is a
    #: member of another group on the claim's host; a host, it is a member of
    #: this group there (counted in ``members`` besides).
    own: str | None = None


@dataclass(frozen=True)
class Scenario:
    providers: tuple[ProviderState, ...]
    #: per provider asked (an index into ``providers``; -1: one that does not exist)
    request: Mapping[int, Mapping[str, int]]
    group: GroupState | None


def some(
    draw: st.DrawFn,
    names: tuple[str, ...],
    value: st.SearchStrategy[Any],
    at_least_one: bool = False,
) -> dict[str, Any]:
    """A value for each of a random subset of ``names`` (a flip each: no
    rejected draws, as a dictionary of few possible keys would have)."""
    chosen = [name for name in names if draw(st.booleans())]
    if at_least_one and not chosen:
        chosen = [draw(st.sampled_from(names))]
    return {name: draw(value) for name in chosen}


@st.composite
def provider_states(draw: st.DrawFn) -> ProviderState:
    invs = some(draw, CLASSES, inventories)
    usages = {rc: n for rc in invs if (n := draw(st.one_of(st.just(0), small, numbers))) > 0}
    return ProviderState(invs, usages)


@st.composite
def group_states(draw: st.DrawFn) -> GroupState:
    members = some(draw, HOSTS, st.integers(min_value=1, max_value=2))
    return GroupState(
        draw(st.sampled_from(POLICIES)),
        members,
        draw(st.sampled_from(HOSTS)),
        draw(st.integers(min_value=1, max_value=3)),
        draw(st.sampled_from((None, OWN_ABSENT, OWN_ELSEWHERE, *HOSTS))),
    )


@st.composite
def fitting(draw: st.DrawFn, inv: Inventory, used: int) -> int:
    """An amount the unit rules and the free capacity allow, if there is one
    (else any): most claims then get as far as the group check."""
    step = inv.step_size
    low = -(-inv.min_unit // step)  # in steps
    high = min(inv.effective_max_unit, inv.capacity - used) // step
    if low > high:
        return draw(amounts)
    return step * draw(st.integers(min_value=low, max_value=min(high, low + 1000)))


@st.composite
def requests(draw: st.DrawFn, state: ProviderState | None) -> dict[str, int]:
    """What a request asks of one provider: mostly classes it has, mostly in
    amounts it can give, now and then a class it has no inventory of, or any
    amount."""
    invs = {} if state is None else state.inventories
    asked = {
        rc: draw(
            fitting(inv, state.usages.get(rc, 0))
            if state and draw(st.integers(min_value=0, max_value=3))
            else amounts
        )
        for rc, inv in invs.items()
        if draw(st.integers(min_value=0, max_value=3))
    }
    if not asked or draw(st.integers(min_value=0, max_value=9)) == 0:
        asked.update(some(draw, CLASSES, amounts, at_least_one=True))
    return asked


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    providers = tuple(draw(provider_states()) for _ in range(draw(st.integers(1, 2))))
    asked = [i for i in range(len(providers)) if draw(st.booleans())] or [0]
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        asked.append(-1)  # a provider that does not exist
    request = {i: draw(requests(providers[i] if i >= 0 else None)) for i in asked}
    group = draw(group_states()) if draw(st.booleans()) else None
    return Scenario(providers, request, group)


#: The provider every store gets once, big enough for any seeding claim: the
#: group members' (and nothing a drawn request asks for).
FILLER = str(uuidlib.uuid4())


@pytest.fixture(scope="module")
def stores() -> Iterator[tuple[MemoryStore, RedisStore]]:
    """The two stores every example writes into (fresh uuids each time)."""
    memory = MemoryStore(stream_maxlen=1000)
    on_redis = RedisStore(
        REDIS_URL, f"test-rules-{uuidlib.uuid4().hex}", stream_maxlen=1000, socket_timeout=2.0
    )
    if not on_redis.ping():
        pytest.fail(f"the store does not answer (Redis at {REDIS_URL})")
    for store in (memory, on_redis):
        store.create_provider(FILLER, FILLER)
        store.set_inventory(FILLER, 0, {CLASSES[0]: ROOMY})
    yield memory, on_redis
    on_redis.wipe()
    on_redis.close()


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def set_up(store: Store, scenario: Scenario, uuids: list[str], group_uuid: str) -> None:
    """The scenario's state, written through the contract: usage by a claim
    on a roomy inventory, which is then replaced by the drawn one (which may
    give less than is used); group members by soft-policy claims."""
    for uuid, state in zip(uuids, scenario.providers, strict=True):
        store.create_provider(uuid, uuid)
        generation = 0
        if state.usages:
            generation = store.set_inventory(uuid, 0, dict.fromkeys(state.usages, ROOMY))
            store.claim(f"{uuid}-usage", ask({uuid: dict(state.usages)}))
            generation += 1
        store.set_inventory(uuid, generation, state.inventories)
    if scenario.group is not None:
        for host, count in scenario.group.members.items():
            for n in range(count):
                store.claim(
                    f"{group_uuid}-{host}-{n}",
                    ask({FILLER: {CLASSES[0]: 1}}),
                    GroupClaim(group_uuid, "soft-affinity", host),
                )
        own = scenario.group.own
        if own is not None and own != OWN_ABSENT:
            member_of, host = (
                (f"{group_uuid}-other", scenario.group.host)
                if own == OWN_ELSEWHERE
                else (group_uuid, own)
            )
            store.claim(
                own_consumer(group_uuid),
                ask({FILLER: {CLASSES[0]: 1}}),
                GroupClaim(member_of, "soft-affinity", host),
            )


def own_consumer(group_uuid: str) -> str:
    return f"{group_uuid}-own"


def group_claim(group: GroupState, group_uuid: str) -> GroupClaim:
    """The drawn group's claim, naming its own-membership consumer if drawn."""
    return GroupClaim(
        group_uuid,
        group.policy,
        group.host,
        group.max_server_per_host,
        own_consumer(group_uuid) if group.own is not None else None,
    )


def outcome(
    store: Store, consumer: str, request: AllocationRequest, group: GroupClaim | None
) -> tuple[Any, ...]:
    """The claim's answer: what it returned, or its error's type and fields."""
    try:
        return ("claimed", store.claim(consumer, request, group))
    except (ClaimFailed, ProviderNotFound) as exc:
        return (type(exc).__name__, exc.kwargs)


def state(store: Store, uuids: list[str], group_uuid: str) -> tuple[Any, ...]:
    providers = [store.get_provider(uuid) for uuid in uuids]
    return (
        [(p.generation, dict(p.usages), p.consumers) for p in providers],
        store.group_hosts(group_uuid),
    )


#: The stores are module fixtures on purpose: every example writes fresh uuids.
QUICK = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@settings(QUICK, max_examples=EXAMPLES)
@given(scenario=scenarios())
def test_the_claim_script_and_the_python_rules_agree(
    stores: tuple[MemoryStore, RedisStore], scenario: Scenario
) -> None:
    uuids = [new_uuid() for _ in scenario.providers]
    group_uuid, consumer, missing = new_uuid(), new_uuid(), new_uuid()
    request = ask(
        {
            (uuids[i] if i >= 0 else missing): dict(amounts)
            for i, amounts in scenario.request.items()
        }
    )
    group = None if scenario.group is None else group_claim(scenario.group, group_uuid)
    answers = []
    for store in stores:
        set_up(store, scenario, uuids, group_uuid)
        first = outcome(store, consumer, request, group)
        again = outcome(store, consumer, request, group)
        answers.append((first, again, state(store, uuids, group_uuid)))
    python, lua = answers
    assert lua == python


@settings(QUICK, max_examples=GROUP_EXAMPLES)
@given(group=group_states())
def test_the_group_rule_agrees_when_the_resources_fit(
    stores: tuple[MemoryStore, RedisStore], group: GroupState
) -> None:
    # Most drawn claims above stop at a resource rule before the group check:
    # here every claim fits, so each one reaches it.
    scenario = Scenario(providers=(), request={}, group=group)
    group_uuid, consumer = new_uuid(), new_uuid()
    claim = group_claim(group, group_uuid)
    answers = []
    for store in stores:
        set_up(store, scenario, [], group_uuid)
        answers.append(
            (
                outcome(store, consumer, ask({FILLER: {CLASSES[0]: 1}}), claim),
                store.group_hosts(group_uuid),
            )
        )
    python, lua = answers
    assert lua == python


# --- a delete's release, on both stores -------------------------------------------------


@dataclass(frozen=True)
class DeleteScenario:
    """What an instance holds when its delete finishes, and how it finishes."""

    instance: Mapping[str, int] | None  # VCPU per provider index, or nothing held
    migration: Mapping[str, int] | None  # a resize's parked source allocation
    policy: str | None  # the instance's (and migration's) server group
    pending: tuple[str, ...]  # hosts the terminate went to
    answers: tuple[str, ...]  # hosts that answered, in order (repeats, strangers)
    force: bool
    claim_after: bool  # a late claim for the instance after the delete started


@st.composite
def delete_scenarios(draw: st.DrawFn) -> DeleteScenario:
    held = st.one_of(
        st.none(), st.dictionaries(st.sampled_from(("0", "1")), small.map(lambda n: n + 1))
    )
    instance, migration = draw(held), draw(held)
    pending = tuple(draw(st.lists(st.sampled_from(HOSTS), max_size=3, unique=True)))
    answers = tuple(draw(st.lists(st.sampled_from((*HOSTS, "")), max_size=4)))
    return DeleteScenario(
        instance=instance or None,
        migration=migration or None,
        policy=draw(st.one_of(st.none(), st.sampled_from(POLICIES))),
        pending=pending,
        answers=answers,
        force=draw(st.booleans()),
        claim_after=draw(st.booleans()),
    )


def delete_outcome(store: Store, scenario: DeleteScenario) -> tuple[Any, ...]:
    """Run the scenario on ``store``; every answer and the state it leaves."""
    providers = [new_uuid(), new_uuid()]
    for uuid in providers:
        store.create_provider(uuid, uuid)
        store.set_inventory(uuid, 0, {CLASSES[0]: Inventory(total=10**6)})
    uuid, migration, group_uuid = new_uuid(), new_uuid(), new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid, state=RESIZING, migration_uuid=migration)])
    for consumer, held in ((uuid, scenario.instance), (migration, scenario.migration)):
        if held:
            group = None
            if scenario.policy is not None:
                group = GroupClaim(group_uuid, "soft-affinity", HOSTS[len(held) - 1])
            store.claim(
                consumer,
                ask({providers[int(i)]: {CLASSES[0]: n} for i, n in held.items()}),
                group,
            )
    answers: list[Any] = []
    record, started = store.start_delete(uuid, pending_hosts=scenario.pending)
    answers.append((record.state, record.pending_hosts, started))
    if scenario.claim_after:
        try:
            answers.append(store.claim(uuid, ask({providers[0]: {CLASSES[0]: 1}})))
        except ConsumerDeleted as exc:
            answers.append((type(exc).__name__, exc.kwargs["consumer"] == uuid))
    for host in scenario.answers:
        done = store.finish_delete(uuid, host, retention=60, now=1.0)
        answers.append(None if done is None else (done.state, done.pending_hosts))
    if scenario.force:
        done = store.finish_delete(uuid, None, retention=60, now=2.0, force=True)
        answers.append(None if done is None else (done.state, done.pending_hosts))
    held_now = {c: store.get_consumer(c) for c in (uuid, migration)}
    return (
        answers,
        [(p.generation, dict(p.usages), p.consumers) for p in map(store.get_provider, providers)],
        store.group_hosts(group_uuid),
        [c for c, h in held_now.items() if h is not None] == [],
        store.get_instance(uuid).state,
    )


@settings(QUICK, max_examples=GROUP_EXAMPLES)
@given(scenario=delete_scenarios())
def test_a_delete_releases_the_same_on_both_stores(
    stores: tuple[MemoryStore, RedisStore], scenario: DeleteScenario
) -> None:
    python, lua = (delete_outcome(store, scenario) for store in stores)
    assert lua == python


# --- a preempting claim, on both stores -------------------------------------------------


@dataclass(frozen=True)
class Running:
    """An instance a preempting claim may name as a victim."""

    vcpu: int
    priority: int
    preemptible: bool
    state: str
    member: str | None  # None, "claim" (the claim's group) or "other"; on HOSTS[host]
    host: int
    #: How the victim handed to the claim differs from what is stored: "",
    #: as read; "stale", another updated_at; "allocation", other amounts.
    tamper: str
    named: bool  # whether the claim names it as a victim


@dataclass(frozen=True)
class PreemptScenario:
    inventory: Inventory
    running: tuple[Running, ...]
    vcpu: int  # what the claim asks
    priority: int
    group: GroupState | None
    claimant: str | None  # the claimant's record state (None: no record)


@st.composite
def preempt_scenarios(draw: st.DrawFn) -> PreemptScenario:
    running = tuple(
        Running(
            vcpu=draw(st.integers(1, 4)),
            priority=draw(st.integers(0, 3)),
            preemptible=draw(st.booleans()),
            state=draw(st.sampled_from((ACTIVE, ACTIVE, ACTIVE, RESIZING))),
            member=draw(st.sampled_from((None, None, "claim", "other"))),
            host=draw(st.integers(0, len(HOSTS) - 1)),
            tamper=draw(st.sampled_from(("", "", "", "", "stale", "allocation"))),
            named=draw(st.booleans()),
        )
        for _ in range(draw(st.integers(1, 4)))
    )
    inventory = Inventory(
        total=draw(st.integers(4, 16)),
        reserved=draw(st.integers(0, 2)),
        allocation_ratio=draw(st.sampled_from((1.0, 1.5, 0.5))),
    )
    return PreemptScenario(
        inventory,
        running,
        draw(st.integers(1, 12)),
        draw(st.integers(0, 4)),
        draw(group_states()) if draw(st.booleans()) else None,
        draw(st.sampled_from((BUILDING, BUILDING, BUILDING, ACTIVE, None))),
    )


def preempt_outcome(
    store: Store, scenario: PreemptScenario, rp: str, group_uuid: str, other_group: str
) -> tuple[Any, ...]:
    """Run the scenario on ``store``: the claim's answer and the state it leaves."""
    store.create_provider(rp, rp)
    store.set_inventory(rp, 0, {CLASSES[0]: ROOMY})
    victims, uuids = [], []
    for n, one in enumerate(scenario.running):
        uuid = f"{rp}-{n}"
        uuids.append(uuid)
        store.create_instances(
            [
                InstanceRecord(
                    uuid=uuid,
                    state=one.state,
                    task_state=None,
                    host=HOSTS[one.host],
                    priority=one.priority,
                    preemptible=one.preemptible,
                    updated_at=1765000000.5 + n,
                )
            ]
        )
        member = {"claim": group_uuid, "other": other_group}.get(one.member or "")
        store.claim(
            uuid,
            ask({rp: {CLASSES[0]: one.vcpu}}),
            GroupClaim(member, "soft-affinity", HOSTS[one.host]) if member else None,
        )
        if one.named:
            held = {rp: {CLASSES[0]: one.vcpu + (one.tamper == "allocation")}}
            at = 1765000000.5 + n + (0.25 if one.tamper == "stale" else 0.0)
            victims.append(Victim(uuid, held, HOSTS[one.host], at, "spot", one.priority))
    store.set_inventory(rp, 1 + len(scenario.running), {CLASSES[0]: scenario.inventory})
    group = None if scenario.group is None else group_claim(scenario.group, group_uuid)
    request = ask({rp: {CLASSES[0]: scenario.vcpu}})
    if scenario.claimant is not None:
        store.create_instances([InstanceRecord(uuid=f"{rp}-new", state=scenario.claimant)])
    eviction = Eviction("req-1", 1765000100.125, HOSTS[0], "node", None, "gold", scenario.priority)
    answers: list[Any] = []
    for _ in range(2):  # a repeat agrees too
        try:
            answers.append(
                store.claim_preempting(
                    f"{rp}-new", request, victims, scenario.priority, group, eviction=eviction
                )
            )
        except (ClaimFailed, RecordChanged, ProviderNotFound) as exc:
            answers.append((type(exc).__name__, exc.kwargs))
        except InvalidRequest:
            answers.append("invalid")
    p = store.get_provider(rp)
    return (
        answers,
        (p.generation, dict(p.usages), p.consumers),
        store.group_hosts(group_uuid),
        store.group_hosts(other_group),
        [store.get_consumer(u) is not None for u in uuids],
        # The records (rp-named: the same on both stores), fences and deadlines.
        [
            replace(r, uuid=r.uuid.removeprefix(rp))
            for r in store.list_instances([*uuids, f"{rp}-new"])
        ],
        [_fenced(store, u, rp) for u in uuids],
        [
            u.removeprefix(rp)
            for u in (r.uuid for r in store.list_instances_due(2e9))
            if u.startswith(rp)
        ],
        # The log of preemptions: one entry per claim that evicted.
        [
            replace(
                e,
                instance_uuid=e.instance_uuid.removeprefix(rp),
                victims=tuple(replace(v, uuid=v.uuid.removeprefix(rp)) for v in e.victims),
            )
            for e in store.recent_preemptions(PREEMPTIONS_KEPT)
            if e.instance_uuid.startswith(rp)
        ],
    )


def _fenced(store: Store, uuid: str, rp: str) -> bool:
    """Whether a claim for ``uuid`` is refused as for an instance being deleted."""
    try:
        store.heal_allocation(uuid, ask({rp: {CLASSES[0]: 1}}))
    except ConsumerDeleted:
        return True
    except ConsumerConflict:
        return False
    store.release(uuid)
    return False


@settings(QUICK, max_examples=GROUP_EXAMPLES)
@given(scenario=preempt_scenarios())
def test_a_preempting_claim_agrees_on_both_stores(
    stores: tuple[MemoryStore, RedisStore], scenario: PreemptScenario
) -> None:
    uuids = (new_uuid(), new_uuid(), new_uuid())
    python, lua = (preempt_outcome(store, scenario, *uuids) for store in stores)
    assert lua == python
