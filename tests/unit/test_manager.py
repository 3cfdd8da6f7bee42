"""The scheduler endpoint: explain (admin only, a dry run), admin-only request
fields, and that every failure path tells the user only the generic reason
while the admin details carry the counts.

The endpoint runs on a real engine over the tests' HookedStore; compute,
conductor and notifier are recorders.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import numpy as np
import oslo_messaging
import pytest
from prometheus_client import REGISTRY

from scheduler import policy
from scheduler.engine.pipeline import GROUP_CONFLICT, TRACE_TOP
from scheduler.engine.settings import PciAlias
from scheduler.exceptions import (
    CorruptRecord,
    Forbidden,
    InternalError,
    InvalidRequest,
    NoValidHost,
    SchedulerUnavailable,
    StoreUnavailable,
)
from scheduler.explain import ExplainReport
from scheduler.notifications import EventPayload
from scheduler.objects import (
    MAX_INSTANCES_PER_REQUEST,
    MEMORY_MB,
    AllocationRequest,
    Destination,
    Flavor,
    Image,
    InstanceRecord,
    RequestSpec,
    migration_uuid_for,
)
from scheduler.policy import INTERNAL_ERROR_MESSAGE, user_reason
from scheduler.priority import PriorityClasses
from scheduler.rpc import RequestContext
from scheduler.store.base import GroupClaim, Inventory
from tests.fixtures.manager import ADMIN, HOSTS, USER, Rig, cast_builds, rig
from tests.unit.factories import (
    GROUP_UUID,
    NOW,
    HookedStore,
    az,
    engine,
    group,
    host,
    spec,
    uuid_of,
)

#: A role called admin is not an admin context: only is_admin counts.
ROLE_ONLY = RequestContext(request_id="req-role", user_id="bob", project_id="p", roles=["admin"])
TRAIT = "HW_CPU_X86_AVX512F"


def unwrapped(call: Callable[..., Any]) -> Callable[..., Any]:
    """An endpoint method as its caller sees it: the typed error, not the
    ExpectedException wrapper the endpoint's decorator puts around it."""

    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except oslo_messaging.ExpectedException as wrapped:
            raise wrapped.exc_info[1] from None

    return inner


def snapshot_of_view(r: Rig) -> dict[str, np.ndarray]:
    view = r.endpoint.engine.view
    view.refresh(NOW)
    return {
        "used": view._used[:, : view.size].copy(),
        "consumers": view._consumers[: view.size].copy(),
    }


# --- explain ------------------------------------------------------------------------


def test_explain_reports_an_unplaceable_request_with_counted_reasons() -> None:
    r = rig(
        *(host(f"big-{i}", ram=65536) for i in range(2)),
        *(host(f"small-{i}", ram=8192) for i in range(3)),
    )
    _members_on(r, "big-0", "big-1")
    before = snapshot_of_view(r)

    request = spec(ram=32768, group=group("anti-affinity"))
    raw = r.endpoint.explain(ADMIN, request.to_primitive())

    report = ExplainReport.from_primitive(raw)
    assert report.placeable is False
    assert report.request_id == "req-admin"
    (only,) = report.instances
    assert only.summary == (
        "0/5 hosts available: 3 insufficient MEMORY_MB, 2 server group anti-affinity"
    )
    assert report.summary == only.summary
    survivors = {s.stage: s.survivors for s in only.stages}
    assert (survivors["candidates"], survivors["ServerGroupAntiAffinityFilter"]) == (2, 0)
    assert only.host is None and only.top == ()
    assert set(r.store.consumers) == {uuid_of("member-big-0"), uuid_of("member-big-1")}
    assert len(r.store.claims) == 2, "explain claimed nothing"
    after = snapshot_of_view(r)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert r.notifier.sent == [] and r.conductor.calls == [] and r.compute.calls == []


def test_explain_of_a_placeable_request_shows_top_hosts_and_claims_nothing() -> None:
    r = rig(*(host(f"h{i}", ram=4096 * (i + 1)) for i in range(7)))
    before = snapshot_of_view(r)

    report = ExplainReport.from_primitive(
        r.endpoint.explain(ADMIN, spec(ram=2048, num_instances=3).to_primitive())
    )

    assert report.placeable is True
    assert [i.position for i in report.instances] == [0, 1, 2]
    first = report.instances[0]
    assert first.host == "h6", "the most free RAM wins under the default weighers"
    assert len(first.top) == TRACE_TOP
    assert first.top[0].host == "h6"
    for weighed in first.top:
        assert set(weighed.contributions) == set(report.weighers)
        assert weighed.weight == pytest.approx(sum(weighed.contributions.values()))
    assert first.summary == "7/7 hosts available"
    # Only the first and the last keep their top hosts (the reply stays small).
    assert [bool(i.top) for i in report.instances] == [True, False, True]
    assert r.store.consumers == {} and r.store.claims == []
    after = snapshot_of_view(r)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_explain_of_a_multi_instance_request_stops_at_the_first_unplaced() -> None:
    r = rig(host("a", ram=2048), host("b", ram=1024))
    report = ExplainReport.from_primitive(
        r.endpoint.explain(ADMIN, spec(ram=1024, num_instances=5).to_primitive())
    )
    assert report.placeable is False
    assert sorted(i.host or "-" for i in report.instances) == ["-", "a", "a", "b"]
    assert report.instances[-1].host is None
    assert report.failed is not None and report.failed.position == 3
    assert report.summary == "0/2 hosts available: 2 insufficient MEMORY_MB"
    assert r.store.consumers == {}


@pytest.mark.parametrize(
    "extra_specs, takes",
    [
        pytest.param({}, {"VCPU": 2, MEMORY_MB: 1024, "DISK_GB": 10}, id="the-flavor-alone"),
        pytest.param(
            {"resources:VCPU": "4", "resources:DISK_GB": "0"},
            {"VCPU": 4, MEMORY_MB: 1024},
            id="overridden-and-dropped",
        ),
        pytest.param(
            {"resources1:CUSTOM_FPGA": "1", "resources:VCPU": "3"},
            {"VCPU": 3, MEMORY_MB: 1024, "DISK_GB": 10, "CUSTOM_FPGA": 1},
            id="numbered-group-counted",
        ),
    ],
)
def test_explain_reports_what_the_engine_claims(
    extra_specs: dict[str, str], takes: dict[str, int]
) -> None:
    r = rig(*(host(name, extra={"CUSTOM_FPGA": Inventory(total=2)}) for name in HOSTS))
    request = spec(vcpus=2, ram=1024, disk=10, extra_specs=extra_specs)

    report = ExplainReport.from_primitive(r.endpoint.explain(ADMIN, request.to_primitive()))
    _select(r, request, ADMIN)

    (consumer,) = r.store.consumers.values()
    claimed: dict[str, int] = {}
    for amounts in consumer.allocations.values():
        for rc, amount in amounts.items():
            claimed[rc] = claimed.get(rc, 0) + amount
    assert dict(report.resources) == claimed == takes


@pytest.mark.parametrize(
    "ctxt",
    [
        pytest.param(USER, id="member"),
        pytest.param(ROLE_ONLY, id="admin-role-without-is_admin"),
        pytest.param(RequestContext(), id="anonymous"),
    ],
)
def test_explain_refuses_a_non_admin_context(ctxt: RequestContext) -> None:
    r = rig()
    with pytest.raises(Forbidden) as err:
        unwrapped(r.endpoint.explain)(ctxt, spec().to_primitive())
    assert err.value.message == "forbidden: explain requires an admin context"
    assert r.store.claims == []


def test_explain_refuses_before_reading_the_request() -> None:
    # A non-admin learns nothing, not even whether the spec would validate.
    with pytest.raises(Forbidden):
        unwrapped(rig().endpoint.explain)(USER, {"colour": "red"})


def test_explain_validates_the_request_of_an_admin() -> None:
    with pytest.raises(InvalidRequest, match="unknown field"):
        unwrapped(rig().endpoint.explain)(ADMIN, {**spec().to_primitive(), "colour": "red"})


@pytest.mark.parametrize("count", [1, 2])
def test_explain_with_the_requests_ids_names_the_host_select_destinations_chooses(
    count: int,
) -> None:
    """Sixteen hosts tie: given the request id (the context's) and instance uuids
    of a request, explain draws its ties as select_destinations does for it;
    left to make up its own uuids, it names other hosts."""
    chosen, own_uuids_differ = set(), False
    for seed in range(12):
        r = rig(*[host(f"h{i:02}") for i in range(16)], host_subset_size=4, weighers=())
        ctxt = RequestContext.admin(request_id=f"req-{seed}", user_id="ops", project_id="p")
        uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        request = spec(num_instances=count).to_primitive()
        report = ExplainReport.from_primitive(r.endpoint.explain(ctxt, request, uuids, True))
        own = ExplainReport.from_primitive(r.endpoint.explain(ctxt, request))
        placed = r.endpoint.select_destinations(ctxt, request, uuids)
        hosts = [per[0]["host"] for per in placed]
        assert [i.host for i in report.instances] == hosts, seed
        assert [i.instance_uuid for i in report.instances] == uuids
        own_uuids_differ |= [i.host for i in own.instances] != hosts
        chosen.add(hosts[0])
    assert len(chosen) > 3 and own_uuids_differ


@pytest.mark.parametrize(
    ("uuids", "all_hosts", "message"),
    [
        pytest.param(["not-a-uuid"], False, "instance_uuids", id="bad-uuid"),
        pytest.param([str(uuidlib.uuid4())] * 2, False, "entries", id="wrong-count"),
        pytest.param(None, "yes", "all_hosts must be a boolean", id="all-hosts-not-bool"),
    ],
)
def test_explain_refuses_bad_uuids_or_all_hosts(uuids: Any, all_hosts: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        unwrapped(rig().endpoint.explain)(ADMIN, spec().to_primitive(), uuids, all_hosts)


def test_run_filter_names_the_hosts_one_filter_removes() -> None:
    r = rig(host("h1"), host("h2", disabled=True), host("h3", up=False))
    raw = r.endpoint.run_filter(ADMIN, spec().to_primitive(), "ComputeFilter")
    assert raw["survivors"] == ["h1"]
    assert raw["removed"] == {"h2": "disabled", "h3": "host down"}
    assert r.store.claims == []


def test_run_filter_refuses_an_unknown_filter_and_a_non_admin() -> None:
    with pytest.raises(InvalidRequest, match="NoSuchFilter"):
        unwrapped(rig().endpoint.run_filter)(ADMIN, spec().to_primitive(), "NoSuchFilter")
    with pytest.raises(Forbidden, match="run_filter requires an admin context"):
        unwrapped(rig().endpoint.run_filter)(USER, spec().to_primitive(), "ComputeFilter")


# --- admin-only request fields ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ForcingSpec:
    """Stands in for a request spec with the admin-only fields set."""

    force_hosts: tuple[str, ...] = ()
    force_nodes: tuple[str, ...] = ()
    requested_destination: object = None


@pytest.mark.parametrize(
    "fields, ctxt, refused",
    [
        pytest.param({"force_hosts": ("h1",)}, USER, "forcing a host", id="force-host-member"),
        pytest.param({"force_nodes": ("n1",)}, USER, "forcing a node", id="force-node-member"),
        pytest.param(
            {"requested_destination": {"host": "h1"}},
            USER,
            "requesting a destination",
            id="destination-member",
        ),
        pytest.param(
            {"force_hosts": ("h1",)}, ROLE_ONLY, "forcing a host", id="force-host-role-only"
        ),
        pytest.param({"force_hosts": ("h1",)}, ADMIN, None, id="force-host-admin"),
        pytest.param({}, USER, None, id="nothing-forced-member"),
    ],
)
def test_admin_only_request_fields(
    fields: dict[str, Any], ctxt: RequestContext, refused: str | None
) -> None:
    if refused is None:
        policy.check_request(ctxt, ForcingSpec(**fields))
        return
    with pytest.raises(Forbidden) as err:
        policy.check_request(ctxt, ForcingSpec(**fields))
    assert err.value.message == f"forbidden: {refused} requires an admin context"


def test_every_forcing_field_of_the_request_spec_is_admin_only() -> None:
    # A tripwire for new fields: whatever steers a request to a named host or
    # node must be listed in policy.ADMIN_ONLY_FIELDS.
    steering = {f for f in RequestSpec.FIELDS if "force" in f or "destination" in f}
    assert steering <= set(policy.ADMIN_ONLY_FIELDS)


# --- what a user reads about a failure ----------------------------------------------


def _cloud_names(r: Rig) -> set[str]:
    """Everything of the cloud a user must never read: hosts, providers, filters,
    weighers, their reasons, traits."""
    eng = r.endpoint.engine
    names = {p.name for p in r.store.providers.values()} | set(r.store.providers)
    names |= {name for name, _ in eng.filters} | {f.REASON for _, f in eng.filters}
    names |= {name for name, _ in eng.weighers}
    names |= {TRAIT, "insufficient", "hosts available", "claim", GROUP_UUID}
    return names


def _user_facing(r: Rig, raised: BaseException | None) -> list[str]:
    """Every failure reason a user may read: faults, ERROR notifications, resize
    results, and the message of an error a call raised."""
    texts: list[str] = []
    for name, args in r.conductor.calls:
        if name == "schedule_failed":
            texts.append(args[1])  # (instance_uuids, reason, details)
        elif name == "resize_result":
            texts.append(str(args[4]))  # (uuid, migration, host, success, reason, details)
    texts += [repr(payload) for priority, _, payload in r.notifier.sent if priority == "error"]
    if raised is not None:
        texts.append(str(raised))
    return texts


def _failed_ends(r: Rig) -> list[str]:
    """The .end notifications of failed requests. Like every .start and .end they
    are for operators (a successful one names the hosts), so only their state
    is checked."""
    return [
        repr(payload)
        for _, event_type, payload in r.notifier.sent
        if event_type.endswith(".end") and payload.get("state") == "error"
    ]


def _admin_details(r: Rig, raised: BaseException | None) -> list[str]:
    details = [args[2] for name, args in r.conductor.calls if name == "schedule_failed"]
    details += [args[5] for name, args in r.conductor.calls if name == "resize_result"]
    if isinstance(raised, NoValidHost):
        details.append(raised.details)
    return details


def _too_big() -> RequestSpec:
    flavor = Flavor(
        name="huge", vcpus=1, memory_mb=10**6, extra_specs={f"trait:{TRAIT}": "required"}
    )
    return RequestSpec(
        flavor=flavor,
        project_id="p",
        user_id="u",
        image=Image(properties={f"trait:{TRAIT}": "required"}),
    )


def _members_on(r: Rig, *names: str) -> None:
    """One member of the anti-affinity group on each named host."""
    for name in names:
        r.store.claim(
            uuid_of(f"member-{name}"),
            _allocation(uuid_of(name)),
            GroupClaim(GROUP_UUID, "anti-affinity", name),
        )


def _fill_group(r: Rig) -> None:
    _members_on(r, *HOSTS)


def _allocation(rp: str) -> AllocationRequest:
    return AllocationRequest({rp: {MEMORY_MB: 1}}, "p", "u")


class StaleGroup:
    """The store as seen by a worker that read the group's members just before
    another worker placed its own: the claim (on the real store) knows better."""

    def __init__(self, store: HookedStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        return {}


def _run(r: Rig, request: RequestSpec | dict[str, Any], ctxt: RequestContext = USER) -> None:
    if isinstance(request, RequestSpec):
        raw, count = request.to_primitive(), request.num_instances
    else:  # bad input: one instance uuid, as the caller created one record
        raw, count = request, 1
    r.endpoint.run_instance(ctxt, raw, [str(uuidlib.uuid4()) for _ in range(count)])


def _select(r: Rig, request: RequestSpec, ctxt: RequestContext = USER) -> None:
    unwrapped(r.endpoint.select_destinations)(
        ctxt, request.to_primitive(), [str(uuidlib.uuid4()) for _ in range(request.num_instances)]
    )


#: The instance the resize cases resize: it runs on HOSTS[0] (see _resize).
RESIZED = uuid_of("resized")


def _resize(r: Rig, request: RequestSpec, ctxt: RequestContext = USER) -> None:
    r.store.place(RESIZED, HOSTS[0], {MEMORY_MB: 512})
    r.endpoint.resize(
        ctxt, RESIZED, HOSTS[0], request.flavor.to_primitive(), request.to_primitive()
    )


FAILURES = [
    pytest.param(
        lambda r: _run(r, spec(ram=10**6)),
        NoValidHost.USER_MESSAGE,
        "insufficient MEMORY_MB",
        id="run_instance-no-room",
    ),
    pytest.param(
        lambda r: _run(r, _too_big()),
        NoValidHost.USER_MESSAGE,
        "0/4 hosts available",
        id="run_instance-trait-and-room",
    ),
    pytest.param(
        lambda r: (_fill_group(r), _run(r, spec(group=group("anti-affinity")))),
        NoValidHost.USER_MESSAGE,
        "server group anti-affinity",
        id="run_instance-group-full",
    ),
    pytest.param(
        lambda r: _run(r, spec(ram=16384, num_instances=9)),
        NoValidHost.USER_MESSAGE,
        "(instance ",
        id="run_instance-multi-instance-overflow",
    ),
    pytest.param(
        lambda r: _select(r, _too_big()),
        NoValidHost.USER_MESSAGE,
        f"missing trait {TRAIT}",
        id="select_destinations-no-room",
    ),
    pytest.param(
        lambda r: _resize(r, spec(ram=10**6)),
        NoValidHost.USER_MESSAGE,
        "insufficient MEMORY_MB",
        id="resize-no-room",
    ),
    pytest.param(
        lambda r: _run(
            r,
            {
                "flavor": {"name": "x", "vcpus": "one", "memory_mb": 1},
                "project_id": "p",
                "user_id": "u",
            },
        ),
        "invalid request: flavor.vcpus must be an integer, got str",
        "flavor.vcpus",
        id="run_instance-invalid-input",
    ),
    pytest.param(
        lambda r: _resize(r, spec().replace(project_id="")),
        "invalid request: request_spec.project_id must not be empty",
        None,
        id="resize-invalid-input",
    ),
    # What the host filters read is refused at validation, naming the spec.
    pytest.param(
        lambda r: _run(r, spec(extra_specs={"capabilities:vcpus": ">= many"})),
        "invalid request: flavor.extra_specs 'capabilities:vcpus' = '>= many': "
        "operator '>=' compares numbers and 'many' is not one",
        "'capabilities:vcpus'",
        id="run_instance-unreadable-operator",
    ),
    pytest.param(
        lambda r: _run(r, spec(image_properties={"img_hv_requested_version": "new"})),
        "invalid request: image.properties 'img_hv_requested_version' = 'new': "
        "'new' is not a comparison such as '>=6.0'",
        "img_hv_requested_version",
        id="run_instance-unreadable-image-property",
    ),
    pytest.param(
        lambda r: _run(r, spec(extra_specs={"pci_passthrough:alias": "gpu:1"})),
        "invalid request: flavor.extra_specs 'pci_passthrough:alias' names PCI "
        "alias 'gpu', which is not configured",
        "'gpu'",
        id="run_instance-unconfigured-pci-alias",
    ),
    pytest.param(
        lambda r: _resize(r, spec(vcpus=3, extra_specs={"hw:numa_nodes": "2"})),
        "invalid request: hw:numa_nodes = 2 does not divide the flavor's 3 vCPUs "
        "and 1024 MB evenly: give hw:numa_cpus.N and hw:numa_mem.N for every node",
        None,
        id="resize-impossible-numa-split",
    ),
    pytest.param(
        lambda r: r.endpoint.resize(
            USER,
            str(uuidlib.uuid4()),
            HOSTS[0],
            Flavor(
                name="new", vcpus=1, memory_mb=1024, extra_specs={"resources:VCPU": "lots"}
            ).to_primitive(),
            spec().to_primitive(),
        ),
        "invalid request: extra spec 'resources:VCPU': amount must be an integer "
        "from 0 to 2147483647, got 'lots'",
        None,
        id="resize-new-flavor-unreadable-resources",
    ),
]


@pytest.mark.parametrize("provoke, user_sees, admin_sees", FAILURES)
def test_a_failure_tells_the_user_only_the_generic_reason(
    provoke: Callable[[Rig], Any], user_sees: str, admin_sees: str | None
) -> None:
    r = rig()
    raised: BaseException | None = None
    held = {u: c.allocations for u, c in r.store.consumers.items()}
    try:
        provoke(r)
    except (NoValidHost, InvalidRequest) as exc:
        raised = exc
    texts = _user_facing(r, raised)
    assert texts, "the failure reached the user somehow"
    for text in texts:
        assert user_sees in text
        leaked = {name for name in _cloud_names(r) if name in text}
        assert not leaked, f"user-facing text names {leaked}: {text!r}"
    assert _failed_ends(r), "every failed .start has its .end, marked error"
    errors = [p for prio, _, p in r.notifier.sent if prio == "error"]
    assert errors and all(p["reason"] == user_sees for p in errors)
    if admin_sees is not None:
        assert any(admin_sees in d for d in _admin_details(r, raised))
    # A NoValidHost is kept among the last ones, with its reasons counted
    # (scheduler-admin refusals); no other failure is.
    refusals = r.store.recent_refusals()
    if user_sees == NoValidHost.USER_MESSAGE:
        (kept,) = refusals
        assert kept.request_id == USER.request_id and kept.instance_uuids
        assert kept.reasons and all(n > 0 for n in kept.reasons.values())
    else:
        assert refusals == []
    members = {uuid_of(f"member-{name}") for name in HOSTS}  # see _fill_group
    left = {u: c.allocations for u, c in r.store.consumers.items() if u not in members}
    if RESIZED in left:  # a failed resize hands the source's allocation back whole
        assert left.pop(RESIZED) == {uuid_of(HOSTS[0]): {MEMORY_MB: 512}}
    assert left == held, "nothing the request claimed (or moved) is left"


@pytest.mark.parametrize(
    "call, names",
    [
        pytest.param(
            lambda r: _select(r, spec(extra_specs={"aggregate_instance_extra_specs:az": "<or>"})),
            "'aggregate_instance_extra_specs:az' = '<or>'",
            id="select_destinations-bare-or",
        ),
        pytest.param(
            lambda r: _select(
                r, spec(vcpus=4, extra_specs={"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1"})
            ),
            "hw:numa_cpus.N and hw:numa_mem.N",
            id="select_destinations-numa",
        ),
        pytest.param(
            lambda r: unwrapped(r.endpoint.explain)(
                ADMIN, spec(image_properties={"hw_architecture": "pdp11"}).to_primitive()
            ),
            "image.properties 'hw_architecture' = 'pdp11'",
            id="explain-image-arch",
        ),
        pytest.param(
            lambda r: unwrapped(r.endpoint.explain)(
                ADMIN, spec(extra_specs={"pci_passthrough:alias": "nic:x"}).to_primitive()
            ),
            "'pci_passthrough:alias' = 'nic:x'",
            id="explain-pci-syntax",
        ),
    ],
)
def test_a_call_with_specs_the_filters_cannot_read_is_refused_before_selection(
    call: Callable[[Rig], Any], names: str
) -> None:
    r = rig()
    with pytest.raises(InvalidRequest) as err:
        call(r)
    assert names in err.value.message
    leaked = {name for name in _cloud_names(r) if name in err.value.message}
    assert not leaked, f"the refusal names {leaked}"
    assert r.store.claims == [] and r.notifier.sent == [] and r.compute.calls == []


def test_a_configured_pci_alias_passes_validation_and_is_placed() -> None:
    devices = {"pci_devices": [{"vendor_id": "8086", "product_id": "154d", "count": 2}]}
    r = rig(
        host("plain"),
        host("with-nics", capabilities=devices),
        pci_aliases={"nic": PciAlias("nic", "8086", "154d")},
    )
    _select(r, spec(extra_specs={"pci_passthrough:alias": "nic:2"}))
    assert [name for _, name, _ in r.store.claims] == ["with-nics"]


def test_claims_refused_by_the_group_policy_fall_through_and_say_why() -> None:
    # The free host has the least RAM: the weighers rank it last.
    store = HookedStore([*(host(name) for name in HOSTS[:3]), host(HOSTS[3], ram=16384)])
    for name in HOSTS[:3]:
        store.claim(
            uuid_of(f"member-{name}"),
            _allocation(uuid_of(name)),
            GroupClaim(GROUP_UUID, "anti-affinity", name),
        )
    eng = engine(StaleGroup(store))  # type: ignore[arg-type]
    placed = eng.schedule("req", spec(group=group("anti-affinity")), [uuid_of("new")])
    trace = placed.traces[0]
    assert trace.host == HOSTS[3], "fell through to the one host without a member"
    assert [kind for _, kind in trace.conflicts] == ["GroupPolicyViolation"] * 3
    assert store.claims[-1][2] == GroupClaim(GROUP_UUID, "anti-affinity", HOSTS[3])

    with pytest.raises(NoValidHost) as err:
        eng.schedule("req2", spec(group=group("anti-affinity")), [uuid_of("newer")])
    assert err.value.reasons == {GROUP_CONFLICT: 4}
    assert err.value.details == f"0/4 hosts available: 4 {GROUP_CONFLICT}"
    assert str(err.value) == NoValidHost.USER_MESSAGE


#: What a store's failure may quote: never to be read by a user or a caller.
STORE_SECRET = "redis://:s3cret@10.0.0.9:6379"


class Broken(HookedStore):
    """A store whose server-group read (or, with ``breaks="move_allocations"``,
    its move of a consumer's allocations) fails with ``error``."""

    def __init__(self, hosts: Any, error: Exception, breaks: str = "group_hosts") -> None:
        super().__init__(hosts)
        self.error = error
        self.breaks = breaks

    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        if self.breaks == "group_hosts":
            raise self.error
        return super().group_hosts(group_uuid)

    def move_allocations(self, source_uuid: str, target_uuid: str, replace: bool = False) -> bool:
        if self.breaks == "move_allocations":
            raise self.error
        return super().move_allocations(source_uuid, target_uuid, replace)


def _broken(r: Rig, error: Exception, breaks: str = "group_hosts") -> Rig:
    r.endpoint.engine.store = Broken(
        [host(n) for n in HOSTS],
        error,  # type: ignore[assignment]
        breaks,
    )
    return r


UNREACHABLE = StoreUnavailable(reason=f"{STORE_SECRET} refused")
CORRUPT = CorruptRecord(key="{vmsched}:groups[g1]", reason="JSONDecodeError at 0")
BUG = RuntimeError(f"a bug that quotes {STORE_SECRET}")


@pytest.mark.parametrize(
    "error, fails_instances, details",
    [
        # The store is down: nothing is failed, the conductor re-drives the request.
        pytest.param(UNREACHABLE, False, None, id="store-unreachable"),
        # What the store holds cannot be read: the request fails, reported.
        pytest.param(
            CORRUPT,
            True,
            "corrupt record at {vmsched}:groups[g1]: JSONDecodeError at 0",
            id="corrupt-record",
        ),
        pytest.param(
            BUG,
            True,
            "RuntimeError: a bug that quotes redis://:***@10.0.0.9:6379",
            id="unexpected-error",
        ),
    ],
)
def test_a_cast_survives_a_store_failure_and_says_only_the_generic_reason(
    error: Exception, fails_instances: bool, details: str | None
) -> None:
    r = _broken(rig(), error)
    _run(r, spec(group=group("anti-affinity")))  # raises nothing: the worker keeps serving
    (end,) = [p for _, e, p in r.notifier.sent if e.endswith(".end")]
    assert end["state"] == "error"
    failed = [args for name, args in r.conductor.calls if name == "schedule_failed"]
    if fails_instances:
        [(_, reason, admin)] = failed
        assert reason == INTERNAL_ERROR_MESSAGE
        assert admin == details
    else:
        assert failed == []
    assert "s3cret" not in repr(r.notifier.sent) + repr(r.conductor.calls)
    assert r.store.claims == [] and r.compute.calls == []


# --- one error policy for casts -----------------------------------------------------

#: The instance the cast failure cases boot.
BOOTED = uuid_of("booted")
INVALID = {
    "flavor": {"name": "x", "vcpus": "one", "memory_mb": 1},
    "project_id": "p",
    "user_id": "u",
}
IN_GROUP = spec(group=group("anti-affinity"))


def _boot(r: Rig, request: RequestSpec | dict[str, Any]) -> None:
    raw = request.to_primitive() if isinstance(request, RequestSpec) else request
    r.endpoint.run_instance(USER, raw, [BOOTED])


def _move(r: Rig, request: RequestSpec) -> None:
    """Resize RESIZED, running on HOSTS[0] in the store the engine reads."""
    r.endpoint.engine.store.place(RESIZED, HOSTS[0], {MEMORY_MB: 512})
    r.endpoint.resize(
        USER, RESIZED, HOSTS[0], request.flavor.to_primitive(), request.to_primitive()
    )


@dataclasses.dataclass(frozen=True)
class CastFailure:
    name: str  # the cast method, then the failure
    provoke: Callable[[Rig], None]
    #: What the ERROR notification and the conductor carry; None: the store is
    #: down, so nothing fails (the request is dropped for the conductor's re-drive).
    reason: str | None
    #: The resize's source stays parked on its migration, for the re-drive.
    parked: bool = False
    #: It failed deciding: inside its ``select_destinations`` start and end
    #: (a no valid host is published at ERROR there too).
    deciding: bool = False

    @property
    def method(self) -> str:
        return self.name.partition("-")[0]


CAST_FAILURES = [
    CastFailure(
        "run_instance-invalid-input",
        lambda r: _boot(r, INVALID),
        "invalid request: flavor.vcpus must be an integer, got str",
    ),
    CastFailure(
        "run_instance-no-valid-host", lambda r: _boot(r, spec(ram=10**6)), NoValidHost.USER_MESSAGE
    ),
    CastFailure(
        "run_instance-store-unavailable", lambda r: _boot(_broken(r, UNREACHABLE), IN_GROUP), None
    ),
    CastFailure(
        "run_instance-unexpected-error",
        lambda r: _boot(_broken(r, BUG), IN_GROUP),
        INTERNAL_ERROR_MESSAGE,
    ),
    CastFailure(
        "resize-invalid-input",
        lambda r: _move(r, spec().replace(project_id="")),
        "invalid request: request_spec.project_id must not be empty",
    ),
    CastFailure(
        "resize-no-valid-host",
        lambda r: _move(r, spec(ram=10**6)),
        NoValidHost.USER_MESSAGE,
        deciding=True,
    ),
    CastFailure(
        "resize-store-unavailable-moving",
        lambda r: _move(_broken(r, UNREACHABLE, "move_allocations"), spec()),
        None,
    ),
    CastFailure(
        "resize-store-unavailable-selecting",
        lambda r: _move(_broken(r, UNREACHABLE), IN_GROUP),
        None,
        parked=True,
        deciding=True,
    ),
    CastFailure(
        "resize-unexpected-error-moving",
        lambda r: _move(_broken(r, BUG, "move_allocations"), spec()),
        INTERNAL_ERROR_MESSAGE,
    ),
    CastFailure(
        "resize-unexpected-error-selecting",
        lambda r: _move(_broken(r, BUG), IN_GROUP),
        INTERNAL_ERROR_MESSAGE,
        deciding=True,
    ),
]


@pytest.mark.parametrize("case", CAST_FAILURES, ids=lambda c: c.name)
def test_every_failure_of_a_cast_is_reported_once(case: CastFailure) -> None:
    r = rig()
    case.provoke(r)  # raises nothing: the worker keeps serving
    uuid, event = (BOOTED if case.method == "run_instance" else RESIZED), case.method
    sent = [(priority, event_type) for priority, event_type, _ in r.notifier.sent]
    error = [("error", f"scheduler.{event}")] if case.reason is not None else []
    decided = (
        [
            ("info", "scheduler.select_destinations.start"),
            *(
                [("error", "scheduler.select_destinations")]
                if case.reason == NoValidHost.USER_MESSAGE
                else []
            ),
            ("info", "scheduler.select_destinations.end"),
        ]
        if case.deciding
        else []
    )
    assert sent == [
        ("info", f"scheduler.{event}.start"),
        *decided,
        *error,
        ("info", f"scheduler.{event}.end"),
    ]
    assert r.notifier.sent[-1][2]["state"] == "error"
    if case.deciding:
        assert r.notifier.sent[len(decided)][2]["state"] == "error"  # the decision's .end
    told = [(name, args[:-1]) for name, args in r.conductor.calls]  # details: see above
    if case.reason is None:
        assert told == []
    else:
        assert r.notifier.sent[1 + len(decided)][2] == {
            "instance_uuids": [uuid],
            "state": "error",
            "reason": case.reason,
        }
        if case.method == "run_instance":
            assert told == [("schedule_failed", ([uuid], case.reason))]
        else:
            [(name, (instance, _, host, success, reason))] = told
            assert (name, instance, host, success, reason) == (
                "resize_result",
                uuid,
                None,
                False,
                case.reason,
            )
    assert r.compute.calls == []
    source = {uuid_of(HOSTS[0]): {MEMORY_MB: 512}}
    holder = migration_uuid_for(RESIZED, USER.request_id) if case.parked else RESIZED
    store = r.endpoint.engine.store
    held = {u: c.allocations for u, c in store.consumers.items()}  # type: ignore[attr-defined]
    assert held == ({} if case.method == "run_instance" else {holder: source}), (
        "nothing the request claimed is left; a failed resize hands the source back"
    )


@pytest.mark.parametrize(
    "error, raised",
    [
        pytest.param(UNREACHABLE, SchedulerUnavailable, id="store-unreachable"),
        pytest.param(CORRUPT, InternalError, id="corrupt-record"),
        pytest.param(BUG, InternalError, id="unexpected-error"),
    ],
)
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda r: _select(r, spec(group=group("anti-affinity"))), id="select_destinations"
        ),
        pytest.param(
            lambda r: unwrapped(r.endpoint.explain)(
                ADMIN, spec(group=group("anti-affinity")).to_primitive()
            ),
            id="explain",
        ),
    ],
)
def test_a_call_answers_a_store_failure_with_a_generic_typed_error(
    call: Callable[[Rig], Any], error: Exception, raised: type[Exception]
) -> None:
    r = _broken(rig(), error)
    with pytest.raises(raised) as err:
        call(r)
    assert err.value.message == raised.msg
    assert user_reason(err.value) == (
        INTERNAL_ERROR_MESSAGE if raised is InternalError else SchedulerUnavailable.msg
    )
    assert not _cloud_names(r) & set(err.value.message.split())


FORCED = [
    pytest.param({"force_hosts": (HOSTS[1],)}, "forcing a host", id="force_hosts"),
    pytest.param({"force_nodes": (HOSTS[1],)}, "forcing a node", id="force_nodes"),
    pytest.param(
        {"requested_destination": Destination(HOSTS[1])},
        "requesting a destination",
        id="requested_destination",
    ),
]
PATHS = [
    pytest.param(lambda r, request, ctxt: _run(r, request, ctxt), id="run_instance"),
    pytest.param(lambda r, request, ctxt: _resize(r, request, ctxt), id="resize"),
    pytest.param(lambda r, request, ctxt: _select(r, request, ctxt), id="select_destinations"),
]


@pytest.mark.parametrize("fields, refused", FORCED)
@pytest.mark.parametrize("send", PATHS)
def test_an_admin_only_field_is_refused_for_a_member_on_every_path(
    send: Callable[[Rig, RequestSpec, RequestContext], Any], fields: dict[str, Any], refused: str
) -> None:
    request = spec(**fields)
    for ctxt in (USER, ROLE_ONLY):
        r = rig()
        raised: BaseException | None = None
        try:
            send(r, request, ctxt)
        except Forbidden as exc:
            raised = exc
        user_sees = f"forbidden: {refused} requires an admin context"
        texts = _user_facing(r, raised)
        assert texts and all(user_sees in t for t in texts)
        assert not any(HOSTS[1] in t for t in texts), "the refusal does not echo the host"
        assert r.store.claims == [] and r.compute.calls == []
    # The same request from an admin context goes where it was sent, claimed.
    admin = rig()
    send(admin, request, ADMIN)
    [(_, claimed_on, _)] = admin.store.claims
    assert claimed_on == HOSTS[1]


@pytest.mark.parametrize("fields, refused", FORCED)
def test_a_forced_request_that_does_not_fit_tells_the_admin_why_and_the_user_nothing(
    fields: dict[str, Any], refused: str
) -> None:
    r = rig()
    with pytest.raises(NoValidHost) as err:
        _select(r, spec(ram=10**6, **fields), ADMIN)
    assert str(err.value) == NoValidHost.USER_MESSAGE
    assert err.value.details.startswith("0/4 hosts available: 3 not ")
    assert "insufficient MEMORY_MB" in err.value.details
    assert r.store.claims == []


# --- the zone of each selection (RPC 1.3) --------------------------------------------

#: The fields a Selection had before RPC 1.3: a reader of that time refuses any other.
PRE_ZONE_FIELDS = {"host", "node", "provider_uuid", "allocation_request", "weight"}


def _zoned_rig() -> Rig:
    east = az("agg-east", "east")
    return rig(host("e1", aggregates=[east.uuid]), host("n1"), host("n2"), aggregates=[east])


def test_a_client_that_asks_for_zones_gets_each_selections_zone() -> None:
    r = _zoned_rig()
    [per_instance] = unwrapped(r.endpoint.select_destinations)(
        USER, spec().to_primitive(), [str(uuidlib.uuid4())], return_zones=True
    )
    assert {s["host"]: s["availability_zone"] for s in per_instance} == {
        "e1": "east",
        "n1": "nova",
        "n2": "nova",
    }


def test_a_client_older_than_zones_gets_selections_it_can_read() -> None:
    r = _zoned_rig()
    [per_instance] = unwrapped(r.endpoint.select_destinations)(
        USER, spec().to_primitive(), [str(uuidlib.uuid4())]
    )
    assert len(per_instance) == 3
    assert all(set(s) == PRE_ZONE_FIELDS for s in per_instance)


def test_return_zones_must_be_a_boolean() -> None:
    with pytest.raises(InvalidRequest, match="return_zones must be a boolean"):
        unwrapped(rig().endpoint.select_destinations)(
            USER, spec().to_primitive(), [str(uuidlib.uuid4())], return_zones="yes"
        )


def test_a_build_is_cast_with_the_zones_of_the_primary_and_alternates() -> None:
    r = _zoned_rig()
    _run(r, spec())
    [(_, _, primary, alternates)] = cast_builds(r.compute.calls)
    assert len(r.compute.calls) == 1
    zones = {s.host: s.availability_zone for s in (primary, *alternates)}
    assert zones == {"e1": "east", "n1": "nova", "n2": "nova"}


# --- an instance deleted while it is being scheduled -----------------------------------


def _deleting(r: Rig, uuid: str) -> None:
    """The conductor started deleting ``uuid``: its record DELETING, claims fenced."""
    r.store.create_instances([InstanceRecord(uuid=uuid)])
    r.store.start_delete(uuid)


def test_run_instance_places_the_others_of_a_request_without_a_deleted_one() -> None:
    r = rig()
    uuids = [str(uuidlib.uuid4()) for _ in range(3)]
    _deleting(r, uuids[1])
    r.endpoint.run_instance(USER, spec(num_instances=3).to_primitive(), uuids)
    built = [args[0] for args in cast_builds(r.compute.calls)]
    assert built == [uuids[0], uuids[2]]
    assert r.conductor.calls == []  # nothing failed
    assert r.store.get_consumer(uuids[1]) is None
    assert {c.uuid for c in r.store.list_consumers()} == {uuids[0], uuids[2]}


def test_run_instance_of_a_deleted_instance_alone_claims_and_casts_nothing() -> None:
    r = rig()
    uuid = str(uuidlib.uuid4())
    _deleting(r, uuid)
    r.endpoint.run_instance(USER, spec().to_primitive(), [uuid])
    assert r.compute.calls == [] and r.conductor.calls == []
    assert r.store.list_consumers() == []
    ends = [p for _, event, p in r.notifier.sent if event == "scheduler.run_instance.end"]
    assert ends and "state" not in ends[-1]  # not an error: nothing to do


def test_select_destinations_gives_a_deleted_instance_no_selection() -> None:
    r = rig()
    uuids = [str(uuidlib.uuid4()) for _ in range(2)]
    _deleting(r, uuids[0])
    answer = unwrapped(r.endpoint.select_destinations)(
        USER, spec(num_instances=2).to_primitive(), uuids
    )
    assert answer[0] == [] and len(answer[1]) >= 1
    assert [c.uuid for c in r.store.list_consumers()] == [uuids[1]]


def test_a_resize_of_an_instance_deleted_meanwhile_hands_the_source_back() -> None:
    r = rig()
    r.store.place(RESIZED, HOSTS[0], {MEMORY_MB: 512})
    _deleting(r, RESIZED)
    flavor = spec().flavor
    r.endpoint.resize(USER, RESIZED, HOSTS[0], flavor.to_primitive(), spec().to_primitive())
    assert r.compute.calls == [] and r.conductor.calls == []
    held = r.store.get_consumer(RESIZED)  # the delete releases it, with the migration's
    assert (
        held is not None and r.store.get_consumer(migration_uuid_for(RESIZED, "req-user")) is None
    )


@pytest.mark.parametrize(
    "extra", [pytest.param(1, id="one-over"), pytest.param(1500, id="well-over")]
)
def test_a_request_over_the_limit_fails_every_instance_and_lists_few(extra: int) -> None:
    r = rig()
    n = MAX_INSTANCES_PER_REQUEST + extra
    uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    raw = {**spec().to_primitive(), "num_instances": n}
    r.endpoint.run_instance(USER, raw, [*uuids, uuids[0], "not-a-uuid"])
    told = [args for name, args in r.conductor.calls if name == "schedule_failed"]
    assert [u for chunk, *_ in told for u in chunk] == uuids, "every instance, once each"
    assert max(len(chunk) for chunk, *_ in told) <= MAX_INSTANCES_PER_REQUEST
    assert {reason for _, reason, _ in told} == {
        f"invalid request: request_spec.num_instances must be between 1 and "
        f"{MAX_INSTANCES_PER_REQUEST}, got {n}"
    }
    assert r.store.claims == [] and r.compute.calls == []
    for _, _, payload in r.notifier.sent:  # never a bulky payload
        assert payload["instance_uuids"] == uuids[:MAX_INSTANCES_PER_REQUEST]
        assert payload["instance_uuids_omitted"] == n - MAX_INSTANCES_PER_REQUEST


# --- priority classes ---------------------------------------------------------------

CLASSES = PriorityClasses.parse(["standard:100", "spot:10:preemptible"], "standard")


def _published(r: Rig, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, EventPayload]]:
    """The payload objects the endpoint publishes (the recorder keeps legacy views)."""
    kept: list[tuple[str, EventPayload]] = []
    emit = r.notifier._emit

    def keep(priority: str, ctxt: Any, event_type: str, payload: EventPayload) -> None:
        kept.append((event_type, payload))
        emit(priority, ctxt, event_type, payload)

    monkeypatch.setattr(r.notifier, "_emit", keep)
    return kept


def _class_published(payload: EventPayload) -> dict[str, Any] | None:
    spec_payload = payload.to_primitive()["nova_object.data"]["request_spec"]
    chosen = spec_payload["nova_object.data"]["priority_class"]
    return None if chosen is None else chosen["nova_object.data"]


@pytest.mark.parametrize(
    ("extra_specs", "published"),
    [
        pytest.param(
            {"sched:priority_class": "spot"},
            {"name": "spot", "priority": 10, "preemptible": True, "preemption_policy": "preempt"},
            id="the-flavor-s-class",
        ),
        pytest.param(
            {},
            {
                "name": "standard",
                "priority": 100,
                "preemptible": False,
                "preemption_policy": "preempt",
            },
            id="the-default-class",
        ),
    ],
)
def test_the_notifications_and_explain_name_the_request_s_class(
    monkeypatch: pytest.MonkeyPatch, extra_specs: dict[str, str], published: dict[str, Any]
) -> None:
    r = rig(priority_classes=CLASSES)
    kept = _published(r, monkeypatch)
    request = spec(ram=512, extra_specs=extra_specs).to_primitive()
    r.endpoint.run_instance(USER, request, [BOOTED])
    r.endpoint.select_destinations(USER, request, [str(uuidlib.uuid4())])
    starts = {e: p for e, p in kept if e.endswith(".start")}
    assert set(starts) == {"scheduler.run_instance.start", "scheduler.select_destinations.start"}
    assert all(_class_published(p) == published for p in starts.values())
    assert [name for name, _ in r.compute.calls] == ["build_and_run_instances"]
    report = ExplainReport.from_primitive(r.endpoint.explain(ADMIN, request))
    assert report.priority_class is not None
    assert report.priority_class.to_primitive() == published


def test_a_request_naming_an_unknown_class_is_refused_and_claims_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = rig(priority_classes=CLASSES)
    kept = _published(r, monkeypatch)
    request = spec(ram=512, extra_specs={"sched:priority_class": "gold"}).to_primitive()
    r.endpoint.run_instance(USER, request, [BOOTED])
    [(name, (uuids, reason, *_))] = r.conductor.calls
    assert (name, uuids) == ("schedule_failed", [BOOTED])
    assert "'sched:priority_class' = 'gold': no such priority class is defined" in reason
    assert r.store.claims == [] and r.compute.calls == []
    (start,) = [p for e, p in kept if e == "scheduler.run_instance.start"]
    assert start.to_primitive()["nova_object.data"]["request_spec"] is None  # refused unread
    with pytest.raises(InvalidRequest, match="no such priority class"):
        unwrapped(r.endpoint.explain)(ADMIN, request)


def test_without_classes_a_request_has_none() -> None:
    r = rig()
    request = spec(ram=512).to_primitive()
    assert ExplainReport.from_primitive(r.endpoint.explain(ADMIN, request)).priority_class is None


# --- preemption ---------------------------------------------------------------------

SPOT = uuid_of("spot-victim")


def _full_of_spot(record_preemptor: bool = True) -> Rig:
    """One host whose memory a spot instance holds whole; the boot's record."""
    r = rig(host("h1", ram=2048), priority_classes=CLASSES)
    r.store.create_instances(
        [
            InstanceRecord(
                uuid=SPOT,
                state="ACTIVE",
                task_state=None,
                host="h1",
                priority_class="spot",
                priority=10,
                preemptible=True,
            )
        ]
    )
    r.store.claim(SPOT, AllocationRequest({uuid_of("h1"): {MEMORY_MB: 2048}}, "p", "u"))
    if record_preemptor:
        r.store.create_instances([InstanceRecord(uuid=BOOTED)])
    return r


def _preemption_counts() -> tuple[float, float]:
    return (
        REGISTRY.get_sample_value("scheduler_preemptions_total") or 0.0,
        REGISTRY.get_sample_value("scheduler_preemption_victims_total", {"priority_class": "spot"})
        or 0.0,
    )


def test_a_boot_that_finds_no_host_evicts_a_lower_priority_instance() -> None:
    r = _full_of_spot()
    before = _preemption_counts()
    r.endpoint.run_instance(USER, spec(ram=1024).to_primitive(), [BOOTED])
    # Counted once, its one victim under its class.
    assert _preemption_counts() == (before[0] + 1, before[1] + 1)
    # Placed by evicting, in one store step: no build cast, no failure told.
    assert r.compute.calls == [] and r.conductor.calls == []
    victim, preemptor = r.store.get_instance(SPOT), r.store.get_instance(BOOTED)
    assert (victim.state, victim.preempted_by, victim.fault) == (
        "DELETING",
        BOOTED,
        f"preempted by instance {BOOTED}",
    )
    assert (preemptor.task_state, preemptor.host, preemptor.victims) == (
        "preempting",
        "h1",
        (SPOT,),
    )
    assert r.store.get_consumer(SPOT) is None and r.store.get_consumer(BOOTED) is not None
    [(_, _, payload)] = [n for n in r.notifier.sent if n[1] == "scheduler.preempt"]
    assert payload["victims"] == [
        {"instance_uuid": SPOT, "priority_class": "spot", "priority": 10}
    ]
    assert (payload["instance_uuid"], payload["host"], payload["priority"]) == (BOOTED, "h1", 100)


@pytest.mark.parametrize(
    ("extra_specs", "record_preemptor"),
    [
        pytest.param({"sched:priority_class": "spot"}, True, id="no-lower-priority"),
        pytest.param({}, False, id="no-boot-record"),
    ],
)
def test_a_boot_that_may_not_evict_fails_and_evicts_nothing(
    extra_specs: dict[str, str], record_preemptor: bool
) -> None:
    r = _full_of_spot(record_preemptor)
    before = _preemption_counts()
    r.endpoint.run_instance(USER, spec(ram=1024, extra_specs=extra_specs).to_primitive(), [BOOTED])
    assert _preemption_counts() == before
    [(name, (uuids, *_))] = r.conductor.calls
    assert (name, uuids) == ("schedule_failed", [BOOTED])
    assert r.store.get_instance(SPOT).state == "ACTIVE"
    assert r.store.get_consumer(SPOT) is not None and r.store.get_consumer(BOOTED) is None
    assert not [n for n in r.notifier.sent if n[1] == "scheduler.preempt"]


def test_a_boot_whose_victims_another_evicted_first_searches_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another worker's preemption takes the same victim between this one's
    search and its store step: the step is refused, and the search, run again,
    evicts on the other host."""
    r = rig(host("h1", ram=2048), host("h2", ram=2048), priority_classes=CLASSES)
    spots = {name: uuid_of(f"spot-{name}") for name in ("h1", "h2")}
    for name, uuid in spots.items():
        r.store.create_instances(
            [
                InstanceRecord(
                    uuid=uuid,
                    state="ACTIVE",
                    task_state=None,
                    host=name,
                    priority_class="spot",
                    priority=10,
                    preemptible=True,
                )
            ]
        )
        r.store.claim(uuid, AllocationRequest({uuid_of(name): {MEMORY_MB: 2048}}, "p", "u"))
    rival = uuid_of("rival")
    r.store.create_instances([InstanceRecord(uuid=BOOTED), InstanceRecord(uuid=rival)])
    real = r.store.claim_preempting
    steps: list[str] = []

    def raced(consumer: str, request: AllocationRequest, *args: Any, **kwargs: Any) -> bool:
        if not steps:  # the rival's step lands first, with the same victims
            steps.append(rival)
            real(rival, request, *args, **kwargs)
        steps.append(consumer)
        return real(consumer, request, *args, **kwargs)

    monkeypatch.setattr(r.store, "claim_preempting", raced)
    r.endpoint.run_instance(USER, spec(ram=1024).to_primitive(), [BOOTED])
    assert steps == [rival, BOOTED, BOOTED]
    assert r.conductor.calls == []
    booted, taken = r.store.get_instance(BOOTED), r.store.get_instance(rival)
    assert {booted.host, taken.host} == {"h1", "h2"}
    assert booted.victims == (spots[booted.host or ""],)
    assert {r.store.get_instance(u).state for u in spots.values()} == {"DELETING"}


def test_select_destinations_places_one_instance_by_evicting() -> None:
    """Nova's flow: the answer is the one claimed Selection (no alternate);
    the instance waits on its victims as a run_instance boot does."""
    r = _full_of_spot()
    [[chosen]] = r.endpoint.select_destinations(USER, spec(ram=1024).to_primitive(), [BOOTED])
    assert chosen["host"] == "h1"
    assert r.store.get_instance(BOOTED).task_state == "preempting"
    assert r.store.get_instance(SPOT).state == "DELETING"
    # Without the conductor's record (Nova's own select_destinations): no eviction.
    r = _full_of_spot(record_preemptor=False)
    with pytest.raises(NoValidHost):
        unwrapped(r.endpoint.select_destinations)(USER, spec(ram=1024).to_primitive(), [BOOTED])
    assert r.store.get_instance(SPOT).state == "ACTIVE"
