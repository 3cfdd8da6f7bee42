"""Nova's select_destinations notifications ([nova_compat] notifications): the
payload made from the wire RequestSpec, the endpoint's .start / .end, and the
notifier's route to Nova's exchange beside the scheduler's own formats.

The payload's agreement with Nova's own payload classes is checked in the
side environment (tests/nova_compat); here, what each rule makes."""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

import oslo_messaging
import pytest
from oslo_config import cfg

from bench import nova_wire as wire
from scheduler import rpc
from scheduler.cmd.worker import topic_clash
from scheduler.notifications import SchedulingPayload
from scheduler.notifier import Notifier, Route
from scheduler.notify_transport import Outgoing
from scheduler.nova_compat.endpoint import NoValidHost, NovaSchedulerEndpoint
from scheduler.nova_compat.notifications import (
    END,
    START,
    NovaNotifications,
    request_spec_payload,
)
from scheduler.nova_compat.objects import NovaSerializer, RequestSpec
from scheduler.objects import Flavor
from scheduler.objects import RequestSpec as OwnRequestSpec
from scheduler.service import SchedulerService
from scheduler.store.memory import MemoryStore
from tests.fixtures.manager import rig
from tests.unit.factories import host, uuid_of

CELL = "5c1e7a2d-3b4f-4e6a-9d8c-0f1e2d3c4b5a"
VM = uuid_of("vm-0")


def data(primitive: dict[str, Any]) -> dict[str, Any]:
    """The fields of a payload object, after its envelope was checked as Nova's."""
    assert primitive["nova_object.namespace"] == "nova"
    assert "nova_object.changes" not in primitive
    fields: dict[str, Any] = primitive["nova_object.data"]
    return fields


def test_a_plain_boot_is_novas_request_spec_payload_field_for_field() -> None:
    spec = wire.request_spec([VM], image_primitive=wire.image({"hw_architecture": "x86_64"}))
    payload = request_spec_payload(spec)
    assert (payload["nova_object.name"], payload["nova_object.version"]) == (
        "RequestSpecPayload",
        "1.1",
    )
    got = data(payload)
    assert set(got) == {
        "instance_uuid",
        "project_id",
        "user_id",
        "availability_zone",
        "flavor",
        "force_hosts",
        "force_nodes",
        "ignore_hosts",
        "instance_group",
        "image",
        "numa_topology",
        "pci_requests",
        "num_instances",
        "requested_destination",
        "retry",
        "scheduler_hints",
        "security_groups",
    }
    assert (got["instance_uuid"], got["project_id"], got["num_instances"]) == (
        VM,
        wire.PROJECT,
        1,
    )
    flavor = data(got["flavor"])
    assert got["flavor"]["nova_object.version"] == "1.4"
    assert flavor["flavorid"] == "2" and flavor["swap"] == 0 and flavor["projects"] is None
    assert "created_at" not in flavor  # a Flavor field the payload does not carry
    image = data(got["image"])
    assert image["id"] == wire.IMAGE and image["direct_url"] is None  # not sent: null
    props = got["image"]["nova_object.data"]["properties"]
    assert (props["nova_object.name"], props["nova_object.version"]) == (
        "ImageMetaPropsPayload",
        "1.20",
    )
    # Only the properties set, none made null.
    assert data(props) == {
        "hw_disk_bus": "virtio",
        "hw_rng_model": "virtio",
        "hw_architecture": "x86_64",
    }
    assert data(got["pci_requests"]) == {"instance_uuid": VM, "requests": []}
    assert got["instance_group"] is None and got["requested_destination"] is None
    assert got["security_groups"] == ["default"]
    json.dumps(payload)  # JSON as it is


def test_a_move_carries_group_destination_retry_and_the_first_forced_host() -> None:
    group_uuid = uuid_of("group")
    spec = wire.request_spec(
        [VM],
        instance_group=wire.group(group_uuid, rules={"max_server_per_host": "2"}),
        requested_destination=wire.destination("h3", "h3", CELL),
        retry=wire.retry(["h1", "h2"]),
        force_hosts=["h3", "h4"],
        ignore_hosts=["h0"],
    )
    got = data(request_spec_payload(spec))
    group = data(got["instance_group"])
    assert group["uuid"] == group_uuid and group["policy"] == "anti-affinity"
    assert group["rules"] == {"max_server_per_host": "2"} and group["policies"] is None
    destination = data(got["requested_destination"])
    assert (destination["host"], destination["node"], destination["aggregates"]) == (
        "h3",
        "h3",
        None,
    )
    assert data(destination["cell"]) == {"uuid": CELL, "name": "cell1", "disabled": False}
    assert data(got["retry"]) == {"num_attempts": 3, "hosts": ["h1", "h2"]}
    assert (got["force_hosts"], got["force_nodes"], got["ignore_hosts"]) == ("h3", None, ["h0"])


def test_a_destination_without_node_or_cell_leaves_them_out() -> None:
    spec = wire.request_spec([VM], requested_destination=wire.destination("h3"))
    assert data(data(request_spec_payload(spec))["requested_destination"]) == {
        "host": "h3",
        "aggregates": None,
    }


def test_numa_cells_and_pci_requests_and_security_groups() -> None:
    cell = wire.obj(
        "InstanceNUMACell",
        "1.6",
        {"id": 0, "cpuset": [], "pcpuset": [0, 1], "memory": 1024, "cpu_policy": "dedicated"},
    )
    topology = wire.obj("InstanceNUMATopology", "1.3", {"cells": [cell]})
    pci = wire.obj(
        "InstancePCIRequests",
        "1.1",
        {"requests": [wire.obj("InstancePCIRequest", "1.4", {"count": 1, "alias_name": "a1"})]},
    )
    groups = wire.obj(
        "SecurityGroupList",
        "1.1",
        {
            "objects": [
                wire.obj("SecurityGroup", "1.2", {"name": "default"}),
                wire.obj("SecurityGroup", "1.2", {"name": "web", "uuid": uuid_of("sg")}),
            ]
        },
    )
    spec = wire.request_spec(
        [VM], numa_topology=topology, pci_requests=pci, security_groups=groups
    )
    got = data(request_spec_payload(spec))
    numa = data(got["numa_topology"])
    assert numa["instance_uuid"] == VM  # the spec's, as the topology names none
    [made] = numa["cells"]
    assert made["nova_object.version"] == "1.2"
    assert data(made) == {
        "id": 0,
        "cpuset": [],
        "pcpuset": [0, 1],
        "cpuset_reserved": None,
        "memory": 1024,
        "pagesize": None,
        "cpu_pinning_raw": None,
        "cpu_policy": "dedicated",
        "cpu_thread_policy": None,
        "cpu_topology": None,
    }
    [request] = data(got["pci_requests"])["requests"]
    assert data(request) == {
        "count": 1,
        "spec": None,
        "alias_name": "a1",
        "request_id": None,
        "numa_policy": None,
    }
    assert got["security_groups"] == ["default", uuid_of("sg")]


class Recorded:
    """Stands in for the notifier: what :meth:`Notifier.info_as` was given, its
    payload made."""

    def __init__(self) -> None:
        self.sent: list[tuple[Route, str, dict[str, Any]]] = []

    def info_as(self, route: Route, ctxt: Any, event_type: str, make: Any) -> None:
        self.sent.append((route, event_type, make()))


def endpoint_with(recorded: Recorded, *hosts: Any) -> NovaSchedulerEndpoint:
    notifications = NovaNotifications(recorded, "sched-1", "nova", "versioned_notifications")  # type: ignore[arg-type]
    return NovaSchedulerEndpoint(rig(*hosts).endpoint, CELL, notifications)


def call(endpoint: NovaSchedulerEndpoint, spec: dict[str, Any]) -> Any:
    """The endpoint's answer to ``spec``, as it came over the wire (its
    expected exception raised as itself)."""
    serializer = NovaSerializer()
    ctxt = serializer.deserialize_context(wire.context(is_admin=True))
    obj = serializer.deserialize_entity(ctxt, spec)
    assert isinstance(obj, RequestSpec) and obj.wire is spec  # kept as it came
    try:
        return endpoint.select_destinations(
            ctxt, spec_obj=obj, instance_uuids=[VM], return_objects=True
        )
    except oslo_messaging.ExpectedException as exc:
        raise exc.exc_info[1] from None


def test_a_select_destinations_publishes_novas_start_and_end() -> None:
    recorded = Recorded()
    spec = wire.request_spec([VM])
    [[selection]] = call(endpoint_with(recorded), spec)
    assert selection["nova_object.name"] == "Selection"
    route = Route("nova-scheduler:sched-1", "nova", "versioned_notifications")
    assert [(r, e) for r, e, _ in recorded.sent] == [(route, START), (route, END)]
    assert START == "scheduler.select_destinations.start"
    assert all(p == request_spec_payload(spec) for _, _, p in recorded.sent)


def test_no_valid_host_publishes_the_start_alone_as_nova() -> None:
    recorded = Recorded()
    endpoint = endpoint_with(recorded, host("only", vcpus=1))
    with pytest.raises(NoValidHost):
        call(endpoint, wire.request_spec([VM], wire.flavor(vcpus=2)))
    assert [e for _, e, _ in recorded.sent] == [START]


def test_a_refused_request_publishes_nothing() -> None:
    recorded = Recorded()
    spec = wire.request_spec([VM], image_primitive=wire.image({"hw_mem_page_size": "large"}))
    with pytest.raises(NoValidHost, match="hw_mem_page_size"):
        call(endpoint_with(recorded), spec)
    assert recorded.sent == []


class Channel:
    """Stands in for the notification channel: every message published, in order."""

    def __init__(self) -> None:
        self.sent: list[Outgoing] = []

    def publish(self, batch: list[Outgoing]) -> None:
        self.sent.extend(batch)

    def close(self) -> None:
        pass


def test_the_notifier_publishes_the_route_on_its_exchange_beside_its_own_formats() -> None:
    channel = Channel()
    notifier = Notifier(object(), "h1", channel=channel)  # type: ignore[arg-type]
    route = Route("nova-scheduler:h1", "nova", "nova_versioned")
    own = SchedulingPayload.starting(
        OwnRequestSpec(flavor=Flavor("m1.small", 1, 2048, 20), project_id="p", user_id="u"), [VM]
    )
    with notifier.action(None, "select_destinations", own):
        notifier.info_as(route, None, START, lambda: {"made": "here"})
    notifier.stop()
    assert [(out.exchange, out.routing_key) for out in channel.sent] == [
        (None, "notifications.info"),
        (None, "versioned_notifications.info"),
        ("nova", "nova_versioned.info"),
        (None, "notifications.info"),
        (None, "versioned_notifications.info"),
    ]
    messages = [json.loads(out.body["oslo.message"]) for out in channel.sent]
    m = messages[2]
    assert (m["publisher_id"], m["event_type"], m["priority"], m["payload"]) == (
        "nova-scheduler:h1",
        START,
        "INFO",
        {"made": "here"},
    )
    # The scheduler's own, as without the route.
    assert messages[1]["publisher_id"] == "scheduler-worker:h1"
    assert messages[1]["payload"] == json.loads(json.dumps(own.to_primitive()))


def test_notifications_off_publish_no_route() -> None:
    channel = Channel()
    notifier = Notifier(object(), "h1", enabled=False, channel=channel)  # type: ignore[arg-type]
    notifier.info_as(Route("p", "nova", "t"), None, START, lambda: {})
    notifier.stop()
    assert channel.sent == []


@pytest.mark.parametrize("enabled", [False, True])
def test_a_worker_publishes_novas_notifications_only_when_asked(
    conf: cfg.ConfigOpts, enabled: bool
) -> None:
    conf.set_override("enabled", True, "nova_compat")
    conf.set_override("notifications", enabled, "nova_compat")
    conf.set_override("exchange", "nova-cell1", "nova_compat")
    transport = rpc.get_transport(conf, url=f"fake://{uuidlib.uuid4().hex}")
    try:
        service = SchedulerService(conf, transport, None, MemoryStore(), server_name="w-3")
        assert service.nova_server is not None
        (endpoint,) = service.nova_server.dispatcher.endpoints  # type: ignore[attr-defined]
        if not enabled:
            assert endpoint.notifications is None
            return
        assert endpoint.notifications.notifier is service.notifier
        assert endpoint.notifications.route == Route(
            f"nova-scheduler:{conf.host}", "nova-cell1", "versioned_notifications"
        )
    finally:
        transport.cleanup()


@pytest.mark.parametrize(
    ("notifications", "clash"),
    [
        ({}, "[notifications] versioned_topic"),
        ({"format": "unversioned"}, None),
        ({"format": "unversioned", "topic": "versioned_notifications"}, "[notifications] topic"),
        ({"versioned_topic": "scheduler_versioned"}, None),
        ({"enabled": False}, None),
    ],
)
def test_novas_topic_may_not_be_one_the_scheduler_publishes_its_own_on(
    conf: cfg.ConfigOpts, notifications: dict[str, Any], clash: str | None
) -> None:
    """Queues are named by topic alone: Nova's consumers would read the
    scheduler's own notifications too."""
    conf.set_override("enabled", True, "nova_compat")
    conf.set_override("topic", "scheduler-nova", "nova_compat")
    assert topic_clash(conf) is None  # Nova's notifications off
    conf.set_override("notifications", True, "nova_compat")
    for name, value in notifications.items():
        conf.set_override(name, value, "notifications")
    said = topic_clash(conf)
    if clash is None:
        assert said is None
    else:
        assert said is not None and said.startswith(
            f"[nova_compat] notifications_topic and {clash} are both"
        )


def test_without_the_channel_oslo_messaging_publishes_the_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transport other than RabbitMQ: oslo.messaging's Notifier, one per
    route, with the route's publisher id and topic."""
    made: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = []

    class Recording:
        def __init__(self, transport: Any, **kwargs: Any) -> None:
            self.sent: list[tuple[str, dict[str, Any]]] = []
            made.append((kwargs, self.sent))

        def info(self, ctxt: Any, event_type: str, payload: dict[str, Any]) -> None:
            self.sent.append((event_type, payload))

    monkeypatch.setattr("scheduler.notifier.oslo_messaging.Notifier", Recording)
    notifier = Notifier(object(), "h1", notification_format="unversioned")  # type: ignore[arg-type]
    route = Route("nova-scheduler:h1", "nova", "nova_versioned")
    for event in (START, END):
        notifier.info_as(route, None, event, lambda: {"made": "here"})
    notifier.stop()
    routes = [(kwargs, sent) for kwargs, sent in made if kwargs["topics"] == ["nova_versioned"]]
    assert routes == [
        (
            {
                "publisher_id": "nova-scheduler:h1",
                "driver": "messagingv2",
                "topics": ["nova_versioned"],
            },
            [(START, {"made": "here"}), (END, {"made": "here"})],
        )
    ]
