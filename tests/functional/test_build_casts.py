"""The build casts over RabbitMQ, on the compute client's own channel: on
the wire, what oslo.messaging's cast sends (byte for byte but the message's
unique id); an oslo.messaging RPC server serves them as it serves oslo's
casts, at 1.9 or, under ``[upgrade_levels] compute``, one build per cast;
casts sent by many threads at once all arrive.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import kombu
import oslo_messaging
import pytest
from oslo_config import cfg

from bench.cluster import RABBIT_HOST, RABBIT_PORT
from scheduler import amqp_publish, rpc
from scheduler import conf as conf_mod
from scheduler.objects import AllocationRequest, Flavor, RequestSpec, Selection
from tests.functional.conftest import Cluster

CTXT = rpc.RequestContext(user_id="u1", project_id="p1", auth_token="a-secret-token")
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
TOPIC = "compute"


def on(host: str) -> Selection:
    return dataclasses.replace(SEL, host=host, node=host)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    return conf_mod.CONF


@pytest.fixture
def transport(cluster: Cluster, conf: cfg.ConfigOpts) -> Iterator[oslo_messaging.Transport]:
    t = rpc.get_transport(conf, url=cluster.transport_url)
    yield t
    t.cleanup()


def _until(what: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_on_the_wire_a_build_cast_is_oslo_messaging_s_byte_for_byte(
    cluster: Cluster, conf: cfg.ConfigOpts, transport: oslo_messaging.Transport
) -> None:
    conn = kombu.Connection(f"pyamqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{cluster.vhost}")
    raw = kombu.Queue(
        f"raw-{uuidlib.uuid4().hex[:8]}",
        kombu.Exchange(conf.control_exchange, "topic", durable=False),
        routing_key=f"{TOPIC}.sim-1",
        auto_delete=True,
    )(conn.channel())
    raw.declare()
    client = rpc.ComputeClient(transport, lambda host: "sim-1")
    prepared = client._client.prepare(server="sim-1", version="1.9")
    kwargs = {
        "request_spec": SPEC.to_primitive(),
        "builds": [{"instance_uuid": "i-1", "selection": SEL.to_primitive(), "host_list": []}],
    }
    channel = amqp_publish.Channel(conf, cluster.transport_url, declare_queues=False, kind="cast")
    try:
        prepared.cast(CTXT, "build_and_run_instances", **kwargs)
        channel.publish([amqp_publish.cast(prepared, CTXT, "build_and_run_instances", **kwargs)])
        wire = []
        _until(lambda: wire.append(raw.get(no_ack=True)) or len([m for m in wire if m]) == 2)
        by_oslo, by_channel = [m for m in wire if m]
    finally:
        channel.close()
        conn.release()

    assert by_channel.properties == by_oslo.properties
    assert by_channel.delivery_info["exchange"] == by_oslo.delivery_info["exchange"] == "scheduler"
    assert by_channel.delivery_info["routing_key"] == by_oslo.delivery_info["routing_key"]
    ids = [
        json.loads(json.loads(m.body)["oslo.message"])["_unique_id"] for m in (by_oslo, by_channel)
    ]
    assert ids[0] != ids[1]
    assert by_channel.body.replace(ids[1], ids[0]) == by_oslo.body
    inner = json.loads(json.loads(by_channel.body)["oslo.message"])
    assert (inner["method"], inner["version"]) == ("build_and_run_instances", "1.9")
    assert inner["args"] == kwargs


class Compute:
    """A compute's endpoint: records the builds it is sent."""

    target = oslo_messaging.Target(version="1.9")

    def __init__(self) -> None:
        self.builds: list[tuple[str, str, str]] = []  # method, instance, host
        self.lock = threading.Lock()

    def build_and_run_instance(
        self, ctxt: Any, instance_uuid: str, selection: Any, **_: Any
    ) -> None:
        with self.lock:
            self.builds.append(("build_and_run_instance", instance_uuid, selection["host"]))

    def build_and_run_instances(self, ctxt: Any, request_spec: Any, builds: Any) -> None:
        assert request_spec["num_instances"] == 1
        with self.lock:
            self.builds.extend(
                ("build_and_run_instances", b["instance_uuid"], b["selection"]["host"])
                for b in builds
            )


@pytest.fixture
def computes(transport: oslo_messaging.Transport) -> Iterator[dict[str, Compute]]:
    """Two compute processes' RPC servers (``sim-1``, ``sim-2``)."""
    made = {name: Compute() for name in ("sim-1", "sim-2")}
    servers = [rpc.get_server(transport, TOPIC, name, [c]) for name, c in made.items()]
    for server in servers:
        server.start()
    yield made
    for server in servers:
        server.stop()
        server.wait()


SERVERS = {"h1": "sim-1", "h2": "sim-1", "h3": "sim-2"}
PLACED = [("i-1", [on("h1"), on("h3")]), ("i-2", [on("h3")]), ("i-3", []), ("i-4", [on("h2")])]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "cap, method, sent",
    [(None, "build_and_run_instances", 2), ("1.8", "build_and_run_instance", 3)],
    ids=["1.9", "capped-1.8"],
)
def test_an_rpc_server_serves_the_builds_of_a_request(
    transport: oslo_messaging.Transport,
    computes: dict[str, Compute],
    cap: str | None,
    method: str,
    sent: int,
) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, TOPIC, version_cap=cap)
    assert client._builds is not None  # the channel, not oslo.messaging's cast

    assert client.build_and_run_instances(CTXT, SPEC.replace(num_instances=4), PLACED) == sent

    _until(lambda: len(computes["sim-1"].builds) + len(computes["sim-2"].builds) == 3)
    assert sorted(computes["sim-1"].builds) == [(method, "i-1", "h1"), (method, "i-4", "h2")]
    assert computes["sim-2"].builds == [(method, "i-2", "h3")]


@pytest.mark.timeout(120)
def test_builds_cast_by_many_threads_at_once_all_arrive(
    transport: oslo_messaging.Transport, computes: dict[str, Compute]
) -> None:
    client = rpc.ComputeClient(transport, SERVERS.__getitem__, TOPIC)
    errors: list[BaseException] = []

    def request(n: int) -> None:
        try:
            for k in range(5):
                client.build_and_run_instances(
                    CTXT, SPEC, [(f"i-{n}-{k}", [on(("h1", "h3")[(n + k) % 2])])]
                )
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=request, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    _until(lambda: len(computes["sim-1"].builds) + len(computes["sim-2"].builds) >= 40)
    got = sorted(b[1] for c in computes.values() for b in c.builds)
    assert got == sorted(f"i-{n}-{k}" for n in range(8) for k in range(5))
