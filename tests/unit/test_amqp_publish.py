"""The shared publishing channel and the build casts made for it, without a
broker: callers that publish while a batch waits for its confirms go out
together in the next batch, each told how its own batch went; the compute
client's build casts of one call are one publish of oslo.messaging's cast
messages, under the version cap, a refusal raised as a delivery failure."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import Any

import oslo_messaging
import pytest

from scheduler import amqp_publish, rpc
from scheduler.amqp_publish import Outgoing, SharedChannel
from scheduler.objects import AllocationRequest, Flavor, RequestSpec, Selection
from tests.fixtures import rpc as rpc_fixtures

#: The fake:// transport fixture, one per module.
transport = rpc_fixtures.transport

CTXT = rpc.RequestContext(user_id="u1", project_id="p1", request_id="req-1")
RP = "7f1c9a52-0b7e-4d0a-8d7c-3e2b1a0c9d88"
SPEC = RequestSpec(
    flavor=Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1), project_id="p", user_id="u"
)
SEL = Selection(
    host="h1",
    node="h1",
    provider_uuid=RP,
    weight=0.5,
    allocation_request=AllocationRequest({RP: {"VCPU": 1}}, "p", "u"),
)


def on(host: str) -> Selection:
    return dataclasses.replace(SEL, host=host, node=host)


class HeldChannel:
    """Stands for a Channel: records each batch; the first one waits until
    released (its confirms outstanding); a batch may be told to fail."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.first_out = threading.Event()
        self.release = threading.Event()
        self.fail: Exception | None = None

    def publish(self, batch: Sequence[Outgoing]) -> None:
        self.batches.append([m.routing_key for m in batch])
        if len(self.batches) == 1:
            self.first_out.set()
            assert self.release.wait(10)
        if self.fail is not None:
            raise self.fail

    def close(self) -> None:
        pass


def _publish_from_threads(
    shared: SharedChannel, keys: list[str]
) -> tuple[dict[str, BaseException], list[threading.Thread]]:
    """Each key published by a thread of its own (started); what each raised,
    filled in as they end."""
    raised: dict[str, BaseException] = {}

    def one(key: str) -> None:
        try:
            shared.publish([Outgoing(key, {})])
        except BaseException as exc:  # noqa: BLE001 - returned
            raised[key] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    return raised, threads


def test_what_is_published_while_a_batch_is_out_goes_in_one_next_batch() -> None:
    held = HeldChannel()
    shared = SharedChannel(lambda: held)  # type: ignore[arg-type, return-value]
    first = threading.Thread(target=shared.publish, args=([Outgoing("first", {})],))
    first.start()
    assert held.first_out.wait(10)
    waiting, threads = _publish_from_threads(shared, [f"k{n}" for n in range(5)])
    # They queue behind the batch awaiting its confirms.
    while len(shared._queued) < 5:
        threading.Event().wait(0.01)
    held.release.set()
    first.join(10)
    for t in threads:
        t.join(10)
    assert held.batches[0] == ["first"]
    assert sorted(held.batches[1]) == [f"k{n}" for n in range(5)]
    assert len(held.batches) == 2
    assert waiting == {}


def test_a_failed_batch_raises_in_each_of_its_callers_and_the_next_batch_is_its_own() -> None:
    held = HeldChannel()
    shared = SharedChannel(lambda: held)  # type: ignore[arg-type, return-value]
    outcome: list[BaseException | None] = []

    def first() -> None:
        try:
            shared.publish([Outgoing("first", {})])
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert held.first_out.wait(10)
    waiting, threads = _publish_from_threads(shared, ["a", "b"])
    while len(shared._queued) < 2:
        threading.Event().wait(0.01)
    held.fail = RuntimeError("nacked")
    held.release.set()
    thread.join(10)
    for t in threads:
        t.join(10)
    assert [type(e) for e in outcome] == [RuntimeError]
    assert sorted(waiting) == ["a", "b"]
    assert all(isinstance(e, RuntimeError) for e in waiting.values())
    held.fail = None
    shared.publish([Outgoing("later", {})])  # the next batch is its own
    assert held.batches[-1] == ["later"]


class Recording:
    """Stands for the compute client's build channel: records each publish."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.publishes: list[list[Outgoing]] = []
        self.fail = fail

    def publish(self, messages: Sequence[Outgoing]) -> None:
        self.publishes.append(list(messages))
        if self.fail is not None:
            raise self.fail


def _inner(out: Outgoing) -> dict[str, Any]:
    assert sorted(out.body) == ["oslo.message", "oslo.version"]
    assert out.body["oslo.version"] == "2.0"
    return dict(json.loads(out.body["oslo.message"]))


SERVERS = {"h1": "sim-1", "h2": "sim-1", "h3": "sim-2"}
PLACED = [("i-1", [on("h1"), on("h3")]), ("i-2", [on("h3")]), ("i-3", []), ("i-4", [on("h2")])]


def test_a_request_s_builds_are_one_publish_of_oslo_s_cast_messages(transport: Any) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, "compute")
    channel = client._builds = Recording()  # type: ignore[assignment]

    assert client.build_and_run_instances(CTXT, SPEC.replace(num_instances=4), PLACED) == 2

    [messages] = channel.publishes
    assert [(m.routing_key, m.exchange) for m in messages] == [
        ("compute.sim-1", None),
        ("compute.sim-2", None),
    ]
    inner = [_inner(m) for m in messages]
    assert [(i["method"], i["version"]) for i in inner] == [("build_and_run_instances", "1.9")] * 2
    assert [[b["instance_uuid"] for b in i["args"]["builds"]] for i in inner] == [
        ["i-1", "i-4"],
        ["i-2"],
    ]
    assert all(i["_context_request_id"] == "req-1" for i in inner)
    assert len({i["_unique_id"] for i in inner}) == 2


def test_under_a_version_cap_the_single_builds_are_one_publish_too(transport: Any) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, "compute", version_cap="1.8")
    channel = client._builds = Recording()  # type: ignore[assignment]

    assert client.build_and_run_instances(CTXT, SPEC.replace(num_instances=4), PLACED) == 3

    [messages] = channel.publishes
    inner = [_inner(m) for m in messages]
    assert [
        (m.routing_key, i["method"], i["version"]) for m, i in zip(messages, inner, strict=True)
    ] == [
        ("compute.sim-1", "build_and_run_instance", "1.1"),
        ("compute.sim-2", "build_and_run_instance", "1.1"),
        ("compute.sim-1", "build_and_run_instance", "1.1"),
    ]


def test_a_cast_above_the_version_cap_is_refused_before_anything_is_published(
    transport: Any,
) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, "compute", version_cap="1.0")
    channel = client._builds = Recording()  # type: ignore[assignment]
    with pytest.raises(oslo_messaging.RPCVersionCapError):
        client.build_and_run_instance(CTXT, "i-1", SPEC, SEL, [])
    assert channel.publishes == []


def test_a_publish_the_broker_did_not_confirm_raises_a_delivery_failure(transport: Any) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, "compute")
    client._builds = Recording(fail=RuntimeError("the broker refused 1 cast(s) (nack)"))  # type: ignore[assignment]
    with pytest.raises(oslo_messaging.MessageDeliveryFailure, match="nack"):
        client.build_and_run_instance(CTXT, "i-1", SPEC, SEL, [])
    assert isinstance(rpc.SEND_FAILURES, tuple)
    with pytest.raises(rpc.SEND_FAILURES):
        client.build_and_run_instance(CTXT, "i-1", SPEC, SEL, [])


def test_no_channel_on_a_transport_that_is_not_rabbitmq(transport: Any) -> None:
    assert amqp_publish.cast_channel_for(transport) is None
    assert amqp_publish.cast_channel_for(None) is None
