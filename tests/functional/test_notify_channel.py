"""The notification channel over RabbitMQ: what it publishes is what
oslo.messaging's Notifier (driver messagingv2) publishes, as an oslo.messaging
listener reads it and on the wire; a notification nobody consumes yet is kept;
a lost connection is opened again and nothing is lost.
"""

from __future__ import annotations

import json
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import amqp
import kombu
import oslo_messaging
import pytest
import structlog
from oslo_config import cfg

from bench.cluster import RABBIT_HOST, RABBIT_PORT
from scheduler import conf as conf_mod
from scheduler import rpc
from scheduler.cmd.notify_tail import listen
from scheduler.notify_transport import NotificationChannel, Outgoing, context, message
from tests.functional.conftest import Cluster

CTXT = rpc.RequestContext(user_id="u1", project_id="p1", auth_token="a-secret-token")
PAYLOAD = {"instance_uuids": ["0c0c0c0c-0000-4000-8000-000000000001"], "state": "scheduled"}


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    return conf_mod.CONF


@pytest.fixture
def oslo_transport(cluster: Cluster, conf: cfg.ConfigOpts) -> Iterator[oslo_messaging.Transport]:
    """The cluster's notification transport (its driver's options registered)."""
    t = rpc.get_notification_transport(conf, url=cluster.transport_url)
    yield t
    t.cleanup()


def _until(what: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.05)


def _raw_queue(cluster: Cluster, conf: cfg.ConfigOpts, routing_key: str) -> tuple[Any, Any]:
    """A queue of our own bound as the notification queues are: every message
    on ``routing_key``, as it is on the wire."""
    conn = kombu.Connection(f"pyamqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{cluster.vhost}")
    queue = kombu.Queue(
        f"raw-{uuidlib.uuid4().hex[:8]}",
        kombu.Exchange(conf.control_exchange, "topic", durable=False),
        routing_key=routing_key,
        auto_delete=True,
    )(conn.channel())
    queue.declare()
    return conn, queue


@pytest.mark.timeout(120)
def test_a_listener_and_the_wire_see_what_the_oslo_notifier_sends(
    cluster: Cluster, conf: cfg.ConfigOpts, oslo_transport: oslo_messaging.Transport
) -> None:
    topic = "compat"
    seen: list[dict[str, Any]] = []
    listener = listen(oslo_transport, topic, seen.append, pool="compat-test")
    conn, raw = _raw_queue(cluster, conf, f"{topic}.info")
    channel = NotificationChannel(conf, cluster.transport_url)
    try:
        oslo_messaging.Notifier(
            oslo_transport, publisher_id="scheduler.h1", driver="messagingv2", topics=[topic]
        ).info(CTXT, "scheduler.select_destinations.start", PAYLOAD)
        channel.publish(
            [
                Outgoing(
                    f"{topic}.info",
                    message(
                        context(CTXT),
                        "scheduler.h1",
                        "scheduler.select_destinations.start",
                        "info",
                        PAYLOAD,
                    ),
                )
            ]
        )
        _until(lambda: len(seen) == 2)
        wire = [raw.get(no_ack=True) for _ in range(2)]
    finally:
        channel.close()
        listener.stop()
        listener.wait()
        conn.release()

    # The listener's view: everything but the message's own id and time.
    by_oslo, by_channel = (
        {k: v for k, v in n.items() if k not in ("message_id", "timestamp")} for n in seen
    )
    assert by_channel == by_oslo
    assert by_channel["payload"] == PAYLOAD
    assert by_channel["publisher_id"] == "scheduler.h1"
    # On the wire: the same properties, exchange, routing key, envelope and keys.
    assert all(m is not None for m in wire)
    assert wire[1].properties == wire[0].properties
    assert wire[1].delivery_info["exchange"] == wire[0].delivery_info["exchange"] == "scheduler"
    assert wire[1].delivery_info["routing_key"] == wire[0].delivery_info["routing_key"]
    bodies = [json.loads(m.body) for m in wire]
    assert [sorted(b) for b in bodies] == [["oslo.message", "oslo.version"]] * 2
    assert bodies[1]["oslo.version"] == bodies[0]["oslo.version"]
    inner = [json.loads(b["oslo.message"]) for b in bodies]
    assert sorted(inner[1]) == sorted(inner[0])
    volatile = ("message_id", "timestamp", "_unique_id", "_context_request_id")
    assert {k: v for k, v in inner[1].items() if k not in volatile} == {
        k: v for k, v in inner[0].items() if k not in volatile
    }
    assert inner[1]["_context_auth_token"] is None  # the context sanitised, as oslo does


@pytest.mark.timeout(120)
@pytest.mark.parametrize("confirm", [True, False], ids=["confirms", "no-confirms"])
def test_nothing_consumes_yet_the_queue_keeps_it_and_a_lost_connection_is_reopened(
    cluster: Cluster,
    conf: cfg.ConfigOpts,
    oslo_transport: oslo_messaging.Transport,
    confirm: bool,
) -> None:
    channel = NotificationChannel(conf, cluster.transport_url, confirm=confirm)
    batch = [
        Outgoing("quiet.info", message(context(CTXT), "scheduler.h1", f"e{n}", "info", PAYLOAD))
        for n in range(3)
    ]
    try:
        channel.publish(batch[:1])
        # The broker drops the connection under the channel.
        channel._conn.connection.transport.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        with structlog.testing.capture_logs() as logs:
            channel.publish(batch[1:])
    finally:
        channel.close()
    conn = amqp.Connection(f"{RABBIT_HOST}:{RABBIT_PORT}", virtual_host=cluster.vhost)
    conn.connect()
    try:
        check = conn.channel()

        def held() -> int:
            return int(check.queue_declare("quiet.info", passive=True).message_count)

        _until(lambda: held() >= 3)
        events = [
            json.loads(
                json.loads(check.basic_get("quiet.info", no_ack=True).body)["oslo.message"]
            )["event_type"]
            for _ in range(held())
        ]
    finally:
        conn.close()
    assert [e["event"] for e in logs] == ["notification_connection_lost"]
    # Each notification kept; one written before the loss may come twice.
    assert sorted(set(events)) == ["e0", "e1", "e2"]
