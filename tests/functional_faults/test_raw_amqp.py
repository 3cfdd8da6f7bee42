"""Raw AMQP on the scheduler's queue: what no oslo.messaging client would send.

Published with kombu straight onto the ``scheduler`` topic: bodies that are
not JSON, JSON that is not an oslo.messaging envelope, envelopes of an
unknown envelope version or with an unreadable message, unknown methods,
versions the worker does not serve (2.0, 1.99), arguments of the wrong
shape, contexts that are not contexts, and payloads over 1 MB. Each is
logged and dropped (a cast) or answered with an error (a call: the reply
names the error's class, never a traceback of ours); and after every one of
them the same worker process still serves a proper request.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import kombu
import pytest

from scheduler import rpc
from scheduler.objects import RequestSpec
from tests.fixtures.amqp import SPEC, amqp_url, envelope, publish
from tests.functional_faults.conftest import FaultCluster, PrivateRabbit

MB = 1024 * 1024


#: (id, body, content type): casts the worker must log and drop.
BAD_CASTS = [
    pytest.param(b"\x00\xff\xfe not json at all", "application/json", id="binary-as-json"),
    pytest.param(b"\x00\x01\x02", "application/octet-stream", id="binary"),
    pytest.param(b"[1, 2, 3]", "application/json", id="json-list"),
    pytest.param(b'"just a string"', "application/json", id="json-string"),
    pytest.param(b'{"method": "run_instance"}', "application/json", id="no-envelope-no-args"),
    pytest.param(
        json.dumps({"oslo.version": "2.0", "oslo.message": "{broken"}).encode(),
        "application/json",
        id="envelope-unreadable-message",
    ),
    pytest.param(
        envelope("run_instance", {}, envelope_version="9.0"),
        "application/json",
        id="unknown-envelope-version",
    ),
    pytest.param(
        envelope("drop_tables", {"really": True}), "application/json", id="unknown-method"
    ),
    pytest.param(
        envelope("run_instance", {"request_spec": SPEC, "instance_uuids": []}, version="2.0"),
        "application/json",
        id="version-2.0",
    ),
    pytest.param(
        envelope("run_instance", {"request_spec": SPEC, "instance_uuids": []}, version="1.99"),
        "application/json",
        id="version-1.99",
    ),
    pytest.param(envelope("run_instance", [1, 2]), "application/json", id="args-a-list"),
    pytest.param(
        envelope("run_instance", {"request_spec": SPEC, "bogus": 1}),
        "application/json",
        id="unexpected-argument",
    ),
    # A context of the wrong types gives no admin powers: forcing a host is refused.
    pytest.param(
        envelope(
            "run_instance",
            {
                "request_spec": {**SPEC, "force_hosts": ["h"]},
                "instance_uuids": [str(uuidlib.uuid4())],
            },
            context={"roles": 5, "is_admin": "yes", "request_id": ["x"] * 9},
        ),
        "application/json",
        id="context-of-the-wrong-types",
    ),
    pytest.param(
        envelope(
            "run_instance",
            {
                "request_spec": {**SPEC, "user_id": "u" * (2 * MB)},
                "instance_uuids": [str(uuidlib.uuid4())],
            },
        ),
        "application/json",
        id="two-megabyte-field",
    ),
    pytest.param(
        envelope(
            "run_instance",
            {
                "request_spec": {
                    **SPEC,
                    "flavor": {
                        **SPEC["flavor"],
                        "extra_specs": {f"k{i}": "v" * 200 for i in range(6000)},
                    },
                },
                "instance_uuids": [str(uuidlib.uuid4())],
            },
        ),
        "application/json",
        id="megabyte-of-extra-specs",
    ),
    pytest.param(b"{" * (2 * MB), "application/json", id="two-megabytes-of-garbage"),
]

#: (id, method, args, version, error class the reply must name): calls.
BAD_CALLS = [
    pytest.param("drop_tables", {}, "1.0", "NoSuchMethod", id="unknown-method"),
    pytest.param(
        "select_destinations",
        {"request_spec": SPEC, "instance_uuids": []},
        "2.0",
        "UnsupportedVersion",
        id="version-2.0",
    ),
    pytest.param(
        "select_destinations",
        {"request_spec": SPEC, "instance_uuids": []},
        "1.99",
        "UnsupportedVersion",
        id="version-1.99",
    ),
    pytest.param(
        "select_destinations",
        {
            "request_spec": {**SPEC, "user_id": "u" * (2 * MB)},
            "instance_uuids": [str(uuidlib.uuid4())],
        },
        "1.0",
        "InvalidRequest",
        id="two-megabyte-field",
    ),
    pytest.param(
        "select_destinations",
        {"request_spec": "not a spec", "instance_uuids": "nor uuids"},
        "1.0",
        "InvalidRequest",
        id="arguments-of-the-wrong-types",
    ),
    pytest.param("explain", {"request_spec": SPEC}, "1.1", "Forbidden", id="explain-for-a-member"),
    pytest.param(
        "explain", {"request_spec": SPEC}, "1.1", "Forbidden", id="explain-for-a-truthy-is_admin"
    ),
]


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, private_rabbit: PrivateRabbit
) -> Iterator[tuple[FaultCluster, Any]]:
    """One deployment for every message of this module: each test checks the
    same worker process is still there and serving."""
    cluster = FaultCluster(tmp_path_factory.mktemp("raw-amqp"), broker=private_rabbit)
    try:
        cluster.start_conductor()
        cluster.start_compute(3, "--build-time", "0.01")
        worker = cluster.start_worker()
        yield cluster, worker
        cluster.check_accounting()
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def transport(deployment: tuple[FaultCluster, Any]) -> Iterator[Any]:
    from scheduler import conf as conf_mod

    conf_mod.set_defaults()
    conf_mod.CONF([], project="scheduler", default_config_files=[])
    t = rpc.get_transport(conf_mod.CONF, url=deployment[0].transport_url)
    yield t
    t.cleanup()


def serves(cluster: FaultCluster, transport: Any) -> bool:
    """A proper call still gets a proper answer (and its claim is released)."""
    uuid = str(uuidlib.uuid4())
    client = rpc.SchedulerClient(transport, timeout=30)
    [[primary, *_]] = client.select_destinations(
        rpc.RequestContext(user_id="u", project_id="p"), RequestSpec.from_primitive(SPEC), [uuid]
    )
    assert cluster.store.release(uuid)
    return bool(primary.host)


@pytest.mark.parametrize("body, content_type", BAD_CASTS)
def test_a_bad_cast_is_logged_and_dropped_and_the_worker_serves_on(
    deployment: tuple[FaultCluster, Any], transport: Any, body: bytes, content_type: str
) -> None:
    cluster, worker = deployment
    pid = worker.serving_pid()
    before = len(worker.log_events())
    held = cluster.store.list_consumers()
    publish(cluster, body, content_type)
    assert serves(cluster, transport)
    worker.assert_kept_serving()
    assert worker.serving_pid() == pid
    logged = worker.log_events()[before:]
    assert any(e.get("level") in ("error", "warning") for e in logged), (
        "the bad message was logged"
    )
    assert cluster.store.list_consumers() == held, "nothing claimed for it"


@pytest.mark.parametrize("method, args, version, error", BAD_CALLS)
def test_a_bad_call_is_answered_with_an_error_and_the_worker_serves_on(
    request: pytest.FixtureRequest,
    deployment: tuple[FaultCluster, Any],
    transport: Any,
    method: str,
    args: Any,
    version: str,
    error: str,
) -> None:
    cluster, worker = deployment
    context = (
        {"request_id": "req-1", "is_admin": "yes", "roles": ["admin"]}
        if request.node.callspec.id == "explain-for-a-truthy-is_admin"
        else None
    )
    reply_q = f"test-reply-{uuidlib.uuid4().hex}"
    msg_id = uuidlib.uuid4().hex
    with kombu.Connection(amqp_url(cluster)) as conn:
        exchange = kombu.Exchange(reply_q, type="direct", durable=False, auto_delete=True)
        queue = kombu.Queue(
            reply_q, exchange, routing_key=reply_q, durable=False, auto_delete=True
        )
        replies: list[dict[str, Any]] = []
        with conn.Consumer(queue, callbacks=[lambda body, msg: (replies.append(body), msg.ack())]):
            conn.Producer().publish(
                envelope(method, args, version, context=context, reply_q=reply_q, msg_id=msg_id),
                exchange="scheduler",
                routing_key="scheduler",
                content_type="application/json",
                content_encoding="utf-8",
            )
            while not any(json.loads(r["oslo.message"]).get("ending") for r in replies):
                conn.drain_events(timeout=30)
    answers = [json.loads(r["oslo.message"]) for r in replies]
    [failure] = [json.loads(a["failure"]) for a in answers if a.get("failure")]
    assert failure["class"] == error
    assert all(a["_msg_id"] == msg_id for a in answers)
    assert serves(cluster, transport)
    worker.assert_kept_serving()
