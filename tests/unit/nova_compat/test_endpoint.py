"""Nova's scheduler API over oslo.messaging's fake:// driver: a client as Nova
34's conductor sends (exchange ``nova``, topic ``scheduler``, RPC 4.5,
versioned-object primitives, Nova's context dict), the endpoint over a real
engine and store; Selections checked field by field against the store's
claims, and NoValidHost rebuilt on the caller as ``nova.exception.NoValidHost``."""

from __future__ import annotations

import json
import sys
import types
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import oslo_messaging
import pytest
from oslo_messaging._drivers import common as wire_errors
from structlog.testing import capture_logs

from bench import nova_wire as wire
from scheduler.nova_compat.endpoint import (
    RPC_VERSION,
    NoValidHost,
    NovaSchedulerEndpoint,
    get_server,
)
from scheduler.nova_compat.objects import NovaSerializer
from tests.fixtures import rpc as rpc_fixtures
from tests.fixtures.manager import HOSTS, Rig, rig
from tests.unit.factories import host, uuid_of

#: The fake:// transport fixture, one per module (it hands the caller the
#: server's exception object itself: what a broker sends is checked by
#: test_no_valid_host_is_rebuilt_as_novas).
transport = rpc_fixtures.transport

CELL = "5c1e7a2d-3b4f-4e6a-9d8c-0f1e2d3c4b5a"


class _NovaNoValidHost(Exception):
    """What the caller's ``nova.exception.NoValidHost`` does with what it is sent:
    Nova's ``NovaException(message=None, **kwargs)``."""

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        super().__init__(message or f"No valid host was found. {kwargs.get('reason', '')}")


@pytest.fixture
def nova_exception(monkeypatch: pytest.MonkeyPatch) -> type[Exception]:
    """A ``nova.exception`` module on the caller's side (Nova is not installed
    here), so the caller rebuilds the error as Nova's client does."""
    nova = types.ModuleType("nova")
    module = types.ModuleType("nova.exception")
    _NovaNoValidHost.__name__ = "NoValidHost"
    module.NoValidHost = _NovaNoValidHost  # type: ignore[attr-defined]
    nova.exception = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nova", nova)
    monkeypatch.setitem(sys.modules, "nova.exception", module)
    return _NovaNoValidHost


class Nova:
    """Nova's conductor-side client, and the worker's endpoint it calls."""

    def __init__(self, transport: Any, r: Rig) -> None:
        self.rig = r
        self.endpoint = NovaSchedulerEndpoint(r.endpoint, CELL)
        topic = f"scheduler-{uuidlib.uuid4().hex[:8]}"
        self.server = get_server(transport, "nova", topic, "worker-1", self.endpoint)
        target = oslo_messaging.Target(exchange="nova", topic=topic, version="4.0")
        self.client = oslo_messaging.get_rpc_client(
            transport, target, serializer=NovaSerializer(), timeout=10
        )

    def select(
        self, spec: dict[str, Any], uuids: list[str], admin: bool = False, **kwargs: Any
    ) -> Any:
        kwargs = {"return_objects": True, "return_alternates": True, **kwargs}
        cctxt = self.client.prepare(version=RPC_VERSION)
        return cctxt.call(
            wire.context(is_admin=admin),
            "select_destinations",
            instance_uuids=uuids,
            spec_obj=spec,
            **kwargs,
        )


@pytest.fixture
def nova(transport: Any) -> Iterator[Nova]:
    n = Nova(transport, rig())
    n.server.start()
    yield n
    n.server.stop()
    n.server.wait()


def uuids(n: int, name: str = "vm") -> list[str]:
    return [uuid_of(f"{name}-{i}") for i in range(n)]


def claimed_host(r: Rig, instance: str) -> str:
    """The host whose provider holds the instance's claim."""
    (provider,) = r.store.consumers[instance].allocations
    (name,) = [name for name in HOSTS if uuid_of(name) == provider]
    return name


def check_against_claims(r: Rig, instance: str, per: list[Any]) -> None:
    """Each Selection, field by field, against what the store says."""
    consumer = r.store.consumers[instance]
    primary = per[0]
    assert primary.obj_name() == "Selection" and primary.VERSION == "1.1"
    assert claimed_host(r, instance) == primary.service_host
    for s in per:
        assert s.nodename == s.service_host
        assert s.cell_uuid == CELL
        assert s.compute_node_uuid == uuid_of(s.service_host)
        assert s.limits is not None and s.limits.vcpu is None
        assert s.allocation_request_version == "1.36"
        assert s.availability_zone == "nova"
        request = json.loads(s.allocation_request)
        assert set(request["allocations"]) == {s.compute_node_uuid}
        assert request["mappings"] == {"": [s.compute_node_uuid]}
        resources = request["allocations"][s.compute_node_uuid]["resources"]
        assert resources == {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40}
    assert dict(consumer.allocations) == {
        primary.compute_node_uuid: {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40}
    }
    assert consumer.project_id == wire.PROJECT and consumer.user_id == wire.USER


def test_the_endpoint_is_novas_scheduler_manager_at_4_5() -> None:
    assert NovaSchedulerEndpoint.target.version == "4.5"
    assert NovaSchedulerEndpoint.target.namespace is None


def test_a_boot_of_two_gets_claimed_primaries_and_alternates(nova: Nova) -> None:
    flavor = wire.flavor(vcpus=2, memory_mb=4096, root_gb=40)
    vms = uuids(2)
    answer = nova.select(wire.request_spec(vms, flavor), vms)
    assert len(answer) == 2 and all(len(per) == 3 for per in answer)
    for vm, per in zip(vms, answer, strict=True):
        check_against_claims(nova.rig, vm, per)
    assert answer[0][0].service_host != answer[1][0].service_host or len(HOSTS) == 1
    events = [e for _, e, _ in nova.rig.notifier.sent]
    assert "scheduler.select_destinations.end" in events


def test_without_alternates_each_instance_gets_its_primary_only(nova: Nova) -> None:
    vms = uuids(3, "solo")
    flavor = wire.flavor(vcpus=2, memory_mb=4096, root_gb=40)
    answer = nova.select(wire.request_spec(vms, flavor), vms, return_alternates=False)
    assert [len(per) for per in answer] == [1, 1, 1]
    for vm, per in zip(vms, answer, strict=True):
        check_against_claims(nova.rig, vm, per)


def test_a_strict_anti_affinity_group_lands_on_distinct_hosts(nova: Nova) -> None:
    vms = uuids(4, "aa")
    group = wire.group(str(uuidlib.uuid4()))
    answer = nova.select(wire.request_spec(vms, instance_group=group), vms)
    assert len({per[0].service_host for per in answer}) == 4
    more = uuids(1, "aa-fifth")
    with pytest.raises(NoValidHost, match="not enough hosts"):
        nova.select(wire.request_spec(more, instance_group=group), more)


def test_no_valid_host_is_rebuilt_as_novas(nova: Nova, nova_exception: type) -> None:
    vms = uuids(1, "huge")
    huge = wire.flavor(vcpus=512, memory_mb=4096)
    with pytest.raises(NoValidHost) as raised:
        nova.select(wire.request_spec(vms, huge), vms)
    assert vms[0] not in nova.rig.store.consumers
    # What a broker carries back, and what Nova's caller (allowing nova.exception)
    # rebuilds from it.
    sent = json.loads(wire_errors.serialize_remote_exception((NoValidHost, raised.value, None)))
    assert (sent["module"], sent["class"]) == ("nova.exception", "NoValidHost")
    assert sent["kwargs"] == {"reason": "There are not enough hosts available."}
    rebuilt = wire_errors.deserialize_remote_exception(json.dumps(sent), ["nova.exception"])
    assert isinstance(rebuilt, nova_exception)
    assert type(rebuilt).__name__ == "NoValidHost_Remote"  # oslo.messaging's subclass
    assert rebuilt.args[0] == "No valid host was found. There are not enough hosts available."


def test_no_valid_host_is_sent_without_a_traceback() -> None:
    assert NoValidHost.__module__ == "nova.exception"
    r = rig(host("only", vcpus=1))
    endpoint = NovaSchedulerEndpoint(r.endpoint, CELL)
    ctxt = NovaSerializer().deserialize_context(wire.context())
    big = wire.request_spec(uuids(1), wire.flavor(vcpus=2))
    spec = NovaSerializer().deserialize_entity(ctxt, big)
    with pytest.raises(oslo_messaging.ExpectedException) as raised:
        endpoint.select_destinations(ctxt, spec_obj=spec, instance_uuids=uuids(1))
    kind, exc, tb = raised.value.exc_info
    assert kind is NoValidHost and tb is None and exc.__cause__ is None


def test_legacy_callers_get_host_dicts(nova: Nova) -> None:
    vms = uuids(1, "legacy")
    answer = nova.select(wire.request_spec(vms), vms, return_objects=False)
    assert answer == [
        {"host": claimed_host(nova.rig, vms[0]), "nodename": answer[0]["host"], "limits": {}}
    ]


def test_a_forced_host_needs_an_admin_context(nova: Nova) -> None:
    vms = uuids(1, "forced")
    spec = wire.request_spec(vms, force_hosts=[HOSTS[2]])
    with pytest.raises(NoValidHost, match="forcing a host requires an admin context"):
        nova.select(spec, vms)
    answer = nova.select(spec, vms, admin=True)
    assert answer[0][0].service_host == HOSTS[2]


def test_a_live_migration_goes_to_its_requested_destination(nova: Nova) -> None:
    vms = uuids(1, "live")
    spec = wire.request_spec(
        vms, requested_destination=wire.destination(HOSTS[1], HOSTS[1], cell_uuid=CELL)
    )
    answer = nova.select(spec, vms, admin=True, return_alternates=False)
    assert [s.service_host for s in answer[0]] == [HOSTS[1]]


def test_a_cold_migration_ignores_its_source_and_the_hosts_tried(nova: Nova) -> None:
    vms = uuids(1, "cold")
    spec = wire.request_spec(
        vms,
        num_instances=3,  # the boot's: Nova's scheduler counts the uuids instead
        ignore_hosts=[HOSTS[0]],
        retry=wire.retry([HOSTS[1], HOSTS[2]]),
        requested_destination=wire.destination(cell_uuid=CELL),
    )
    answer = nova.select(spec, vms)
    assert [s.service_host for s in answer[0]] == [HOSTS[3]]


REFUSED = {
    "requested_resources": (
        {"requested_resources": [wire.obj("RequestGroup", "1.3", {"resources": {"X": 1}})]},
        "requested_resources",
    ),
    "root traits": (
        {
            "request_level_params": wire.obj(
                "RequestLevelParams", "1.1", {"root_required": ["HW_CPU_X86_AVX2"]}
            )
        },
        "request_level_params.root_required",
    ),
    "a port's PCI request": (
        {
            "pci_requests": wire.obj(
                "InstancePCIRequests",
                "1.1",
                {
                    "requests": [
                        wire.obj(
                            "InstancePCIRequest",
                            "1.4",
                            {"count": 1, "alias_name": None, "requester_id": "port-1"},
                        )
                    ]
                },
            )
        },
        "PCI requests of ports",
    ),
    "huge pages": (
        {"image": wire.image({"hw_mem_page_size": "large"})},
        "image property hw_mem_page_size",
    ),
    "another cell": (
        {"requested_destination": wire.destination(cell_uuid=str(uuidlib.uuid4()))},
        "a cell this scheduler does not serve",
    ),
    "aggregates": (
        {"requested_destination": wire.destination(aggregates=["a1"])},
        "requested_destination.aggregates",
    ),
    "a group rule": (
        {"instance_group": wire.group(str(uuidlib.uuid4()), rules={"max_instances": "3"})},
        "server group rules max_instances",
    ),
    "a newer RequestSpec": (
        {"__version__": "1.16"},
        "spec_obj cannot be read",
    ),
    "a newer Flavor": (
        {"flavor": {**wire.flavor(), "nova_object.version": "1.3"}},
        "spec_obj cannot be read",
    ),
    "no spec_obj": (None, "spec_obj is required"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_field_the_project_cannot_honour_is_refused_with_its_reason(
    nova: Nova, case: str
) -> None:
    fields, reason = REFUSED[case]
    vms = uuids(1, case)
    spec: dict[str, Any] | None = None
    if fields is not None:
        version = fields.pop("__version__", None)
        spec = wire.request_spec(vms, **fields)
        if version:
            spec["nova_object.version"] = version
    with pytest.raises(NoValidHost, match=reason):
        nova.select(spec, vms)  # type: ignore[arg-type]
    assert vms[0] not in nova.rig.store.consumers


def test_the_fanout_casts_are_accepted_and_logged_once(nova: Nova) -> None:
    aggregates = [wire.obj("Aggregate", "1.3", {"id": 1, "name": "a"})]
    ctxt = NovaSerializer().deserialize_context(wire.context())
    with capture_logs() as logs:
        for _ in range(2):
            nova.endpoint.update_aggregates(ctxt, aggregates)
            nova.endpoint.delete_aggregate(ctxt, aggregates[0])
            nova.endpoint.update_instance_info(ctxt, "h", {})
            nova.endpoint.delete_instance_info(ctxt, "h", uuids(1)[0])
            nova.endpoint.sync_instance_info(ctxt, "h", uuids(2))
    ignored = [e["method"] for e in logs if e["event"] == "nova_cast_ignored"]
    assert sorted(ignored) == sorted(
        [
            "update_aggregates",
            "delete_aggregate",
            "update_instance_info",
            "delete_instance_info",
            "sync_instance_info",
        ]
    )
    assert all(e["reason"] for e in logs if e["event"] == "nova_cast_ignored")
    # Over the wire too: an unregistered object class does not fail the dispatch.
    nova.client.prepare(fanout=True, version="4.0").cast(
        wire.context(), "update_aggregates", aggregates=aggregates
    )
    vms = uuids(1, "after-cast")
    assert nova.select(wire.request_spec(vms), vms)[0]
