"""A bare kombu publish/consume loop: what a cast costs with nothing above the broker.

:func:`cast_loop` publishes ``count`` messages of ``size`` bytes to a queue of
its own, each publish waiting for the broker's confirm (``confirm_publish``,
as oslo.messaging's rabbit driver publishes), transient, as oslo.messaging's
casts are by default; a consumer on a second connection, in a thread of the
same process, takes each and acks it. Nothing is serialized but one JSON
body, nothing dispatched: the floor a cast through oslo.messaging stands on.
"""

from __future__ import annotations

import json
import threading
import uuid as uuidlib
from typing import Any

import kombu

from bench.procstat import CpuMeter

#: Bytes of a message body: about a ``run_instance`` cast's.
SIZE = 2000


def cast_loop(url: str, count: int, meter: CpuMeter, size: int = SIZE) -> dict[str, float]:
    """Publish ``count`` messages and consume them; what ``meter`` read from
    the first publish to the last ack (the connections and the queue made and
    removed outside it)."""
    queue = kombu.Queue(
        f"bench-casts-{uuidlib.uuid4().hex[:8]}",
        exchange=kombu.Exchange("", type="direct"),
        routing_key=None,
        durable=False,
        auto_delete=False,
    )
    body = json.dumps({"padding": "x" * max(size - 20, 0)})
    got = threading.Event()
    seen = [0]
    errors: list[BaseException] = []

    with (
        kombu.Connection(url) as consuming,
        kombu.Connection(url, transport_options={"confirm_publish": True}) as publishing,
    ):
        bound = queue(consuming.channel())
        bound.declare()

        def on_message(_body: Any, message: Any) -> None:
            message.ack()
            seen[0] += 1
            if seen[0] >= count:
                got.set()

        def consume() -> None:
            try:
                with consuming.Consumer(bound, callbacks=[on_message], prefetch_count=100):
                    while not got.is_set():
                        try:
                            consuming.drain_events(timeout=1)
                        except TimeoutError:
                            continue
            except BaseException as exc:  # noqa: BLE001 - raised by the caller
                errors.append(exc)
                got.set()

        consumer = threading.Thread(target=consume, name="bench-cast-consumer")
        consumer.start()
        producer = publishing.Producer()
        meter.start()
        try:
            for _ in range(count):
                producer.publish(
                    body,
                    routing_key=queue.name,
                    content_type="application/json",
                    content_encoding="utf-8",
                    delivery_mode=1,
                )
            got.wait(timeout=60 + count / 100)
            measured = meter.stop()
        finally:
            got.set()
            consumer.join()
            bound.delete()
    if errors:
        raise errors[0]
    if seen[0] < count:
        raise RuntimeError(f"kombu loop: {seen[0]} of {count} casts consumed")
    return measured
