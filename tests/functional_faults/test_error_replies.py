"""An expected error reaches the caller as its type and message, never with the
worker's traceback.

Each call is sent twice: with raw AMQP (kombu), reading the reply exactly as
the worker wrote it on the wire, which must hold no file, line or source of
the worker's (no ``Traceback``, ``.py`` or ``line ``); and through
oslo.messaging, whose caller must still get the error as its own type
(Forbidden, InvalidRequest, NoValidHost, and SchedulerUnavailable while the
store is down).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import kombu
import pytest

from scheduler import rpc
from scheduler.exceptions import (
    Forbidden,
    InvalidRequest,
    NoValidHost,
    SchedulerError,
    SchedulerUnavailable,
)
from scheduler.objects import Flavor, RequestSpec
from tests.fixtures.amqp import SPEC, amqp_url, envelope
from tests.functional_faults.conftest import FaultCluster, PrivateRabbit, PrivateRedis

#: What a formatted traceback holds and an error's type and message do not.
TRACEBACK_TEXT = ("Traceback", ".py", "line ")

MEMBER = rpc.RequestContext(user_id="u", project_id="p", roles=["member"])
HUGE = RequestSpec(
    flavor=Flavor(name="huge", vcpus=1, memory_mb=4 * 1024 * 1024, root_gb=1),
    project_id="p",
    user_id="u",
)


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, private_rabbit: PrivateRabbit
) -> Iterator[tuple[FaultCluster, PrivateRedis]]:
    """A worker and a compute on a store of their own (stopped for one case)."""
    redis_server = PrivateRedis()
    redis_server.start()
    cluster = FaultCluster(
        tmp_path_factory.mktemp("error-replies"),
        broker=private_rabbit,
        redis_url=redis_server.url(),
    )
    try:
        cluster.start_compute(2, "--build-time", "0.01")
        cluster.start_worker()
        yield cluster, redis_server
        cluster.check_accounting()
    finally:
        cluster.close()
        redis_server.destroy()


@pytest.fixture(scope="module")
def transport(deployment: tuple[FaultCluster, PrivateRedis]) -> Iterator[Any]:
    t = deployment[0].open_transport()
    yield t
    t.cleanup()


def raw_call(cluster: FaultCluster, method: str, args: Any, version: str) -> list[str]:
    """Call ``method`` with raw AMQP; the reply messages' bodies, as sent."""
    reply_q = f"test-reply-{uuidlib.uuid4().hex}"
    with kombu.Connection(amqp_url(cluster)) as conn:
        exchange = kombu.Exchange(reply_q, type="direct", durable=False, auto_delete=True)
        queue = kombu.Queue(
            reply_q, exchange, routing_key=reply_q, durable=False, auto_delete=True
        )
        replies: list[str] = []
        with conn.Consumer(
            queue, callbacks=[lambda body, msg: (replies.append(msg.body), msg.ack())]
        ):
            conn.Producer().publish(
                envelope(method, args, version, reply_q=reply_q, msg_id=uuidlib.uuid4().hex),
                exchange="scheduler",
                routing_key="scheduler",
                content_type="application/json",
                content_encoding="utf-8",
            )
            while not any(
                json.loads(json.loads(r)["oslo.message"]).get("ending") for r in replies
            ):
                conn.drain_events(timeout=60)
    return [r.decode() if isinstance(r, bytes) else r for r in replies]


class _StoreDown(AbstractContextManager[None]):
    """The worker's store stopped for the length of the block, then started."""

    def __init__(self, redis_server: PrivateRedis) -> None:
        self.redis_server = redis_server

    def __enter__(self) -> None:
        self.redis_server.stop()

    def __exit__(self, *exc: object) -> None:
        self.redis_server.start()


#: (error, method, arguments, version, the oslo.messaging call, whether the store is down).
CASES = [
    pytest.param(
        Forbidden,
        "explain",
        {"request_spec": SPEC},
        "1.1",
        lambda client: client.explain(MEMBER, RequestSpec.from_primitive(SPEC)),
        False,
        id="Forbidden",
    ),
    pytest.param(
        InvalidRequest,
        "select_destinations",
        {"request_spec": "not a spec", "instance_uuids": "nor uuids"},
        "1.0",
        lambda client: client.call_raw(
            MEMBER, "select_destinations", request_spec="not a spec", instance_uuids="nor uuids"
        ),
        False,
        id="InvalidRequest",
    ),
    pytest.param(
        NoValidHost,
        "select_destinations",
        {"request_spec": HUGE.to_primitive(), "instance_uuids": [str(uuidlib.uuid4())]},
        "1.0",
        lambda client: client.select_destinations(MEMBER, HUGE, [str(uuidlib.uuid4())]),
        False,
        id="NoValidHost",
    ),
    pytest.param(
        SchedulerUnavailable,
        "select_destinations",
        {"request_spec": SPEC, "instance_uuids": [str(uuidlib.uuid4())]},
        "1.0",
        lambda client: client.select_destinations(
            MEMBER, RequestSpec.from_primitive(SPEC), [str(uuidlib.uuid4())]
        ),
        True,
        id="SchedulerUnavailable",
    ),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("error, method, args, version, call, store_down", CASES)
def test_an_expected_error_reply_carries_no_traceback_and_arrives_typed(
    deployment: tuple[FaultCluster, PrivateRedis],
    transport: Any,
    error: type[SchedulerError],
    method: str,
    args: Any,
    version: str,
    call: Callable[[rpc.SchedulerClient], Any],
    store_down: bool,
) -> None:
    cluster, redis_server = deployment
    down: AbstractContextManager[None] = _StoreDown(redis_server) if store_down else nullcontext()
    with down:
        bodies = raw_call(cluster, method, args, version)
        with pytest.raises(error) as raised:
            call(rpc.SchedulerClient(transport, timeout=60))
    [failure] = [
        json.loads(answer["failure"])
        for answer in (json.loads(json.loads(b)["oslo.message"]) for b in bodies)
        if answer.get("failure")
    ]
    print(f"\n{error.__name__} reply: {sum(map(len, bodies))} bytes, tb {failure['tb']!r}")
    assert (failure["module"], failure["class"]) == ("scheduler.exceptions", error.__name__)
    for body in bodies:
        for text in TRACEBACK_TEXT:
            assert text not in body, f"{text!r} in the reply: {body}"
    # The caller gets the error rebuilt as its own type, message intact.
    assert type(raised.value).__mro__[1] is error
    assert raised.value.message == failure["message"]
    assert cluster.store.list_consumers() == [], "nothing claimed"
