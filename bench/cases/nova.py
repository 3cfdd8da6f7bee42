"""Case 10: what Nova's wire format costs a worker (``[nova_compat]``).

In worker CPU (``time.thread_time``), on one thread:

* codec: one typical boot RequestSpec primitive (:mod:`bench.nova_wire`)
  through oslo.versionedobjects (``obj_from_primitive``, by the serializer)
  alone, and then into the project's request (:func:`decode`); one
  instance's three Selections into Nova's primitives;
* ``select_destinations`` through the native endpoint and through Nova's, on
  the same in-memory store of ``nova_hosts`` hosts, ``nova_calls``
  one-instance requests each with two alternates, in turn (native, Nova,
  native, ...); the native request is the one Nova's decodes to, so both
  decide alike. Each includes what the worker does with the message body:
  ``json.loads`` of the arguments, the context and arguments through the
  endpoint's serializer, and ``json.dumps`` of the answer (oslo.messaging's
  own envelope and the transport are the same for both and left out).
  Notifications are off for both.

The target is the difference of the two medians, measured in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from bench import cloud
from bench import nova_wire as wire
from bench.runner import Bench
from bench.stats import summary
from bench.targets import Target
from scheduler.engine import Engine, EngineSettings
from scheduler.manager import SchedulerEndpoint
from scheduler.notifier import Notifier
from scheduler.nova_compat import encode
from scheduler.nova_compat.decode import decode
from scheduler.nova_compat.endpoint import NovaSchedulerEndpoint
from scheduler.nova_compat.objects import NovaSerializer
from scheduler.objects import AllocationRequest, Selection
from scheduler.rpc import ContextSerializer
from scheduler.store.memory import MemoryStore

CELL = "5c1e7a2d-3b4f-4e6a-9d8c-0f1e2d3c4b5a"

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target(
        "nova_extra",
        "select_destinations through [nova_compat]: <= 0.5 ms more worker CPU than the native "
        "one (medians, same run)",
        0.5,
        "max",
    ),
)


def per_call_ms(fn: Callable[[], Any], n: int) -> float:
    """Median of 5 rounds of ``n`` calls, in ms of this thread's CPU per call."""
    rounds = []
    for _ in range(5):
        started = time.thread_time()
        for _ in range(n):
            fn()
        rounds.append((time.thread_time() - started) * 1000 / n)
    return statistics.median(rounds)


def split_ms(first: Callable[[], Any], then: Callable[[Any], Any], n: int) -> tuple[float, float]:
    """``then(first())`` called ``n`` times a round, 5 rounds: the median
    round's ms of this thread's CPU per call in ``first``, and in both. Both
    come from the same calls, so the part never exceeds the whole (two loops
    timed apart can, by noise)."""
    rounds = []
    for _ in range(5):
        in_first = 0.0
        started = time.thread_time()
        for _ in range(n):
            began = time.thread_time()
            value = first()
            in_first += time.thread_time() - began
            then(value)
        rounds.append((in_first * 1000 / n, (time.thread_time() - started) * 1000 / n))
    return statistics.median_low(rounds)


def codec(n: int) -> dict[str, float]:
    serializer = NovaSerializer()
    primitive = json.loads(json.dumps(wire.request_spec([str(uuidlib.uuid4())])))
    rp = str(uuidlib.uuid4())
    own = [
        Selection(
            f"host-{i}",
            f"host-{i}",
            rp,
            AllocationRequest({rp: {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}, "p", "u"),
            0.5,
            "nova",
        )
        for i in range(3)
    ]
    ovo, total = split_ms(
        lambda: serializer.deserialize_entity(None, primitive), lambda o: decode(o, CELL), n
    )
    return {
        "decode_ovo_ms": ovo,
        "decode_total_ms": total,
        "encode_ms": per_call_ms(
            lambda: serializer.serialize_entity(None, encode.selections([own], CELL)), n
        ),
    }


def endpoints(hosts: int) -> tuple[SchedulerEndpoint, NovaSchedulerEndpoint]:
    store = MemoryStore()
    cloud.populate(store, cloud.plan(hosts))
    native = SchedulerEndpoint(
        Engine(store, EngineSettings()),
        None,  # type: ignore[arg-type]  # select_destinations casts nothing
        None,  # type: ignore[arg-type]
        Notifier(None, "bench", enabled=False),
    )
    return native, NovaSchedulerEndpoint(native, CELL)


def decisions(hosts: int, calls: int) -> dict[str, dict[str, Any]]:
    native, nova = endpoints(hosts)
    own_ctxt, nova_ctxt = ContextSerializer(), NovaSerializer()
    # The same request both ways: the native one is what Nova's decodes to.
    sample = wire.request_spec([str(uuidlib.uuid4())])
    own_spec = decode(nova_ctxt.deserialize_entity(None, sample), CELL)
    nova_context = wire.context()
    times: dict[str, list[float]] = {"native": [], "nova": []}

    def native_call() -> None:
        vm = str(uuidlib.uuid4())
        body = json.dumps(
            {"request_spec": own_spec, "instance_uuids": [vm], "return_alternates": True}
        )
        started = time.thread_time()
        args = json.loads(body)
        ctxt = own_ctxt.deserialize_context({"request_id": f"req-{vm}", "is_admin": False})
        answer = native.select_destinations.__wrapped__(native, ctxt, **args)  # type: ignore[attr-defined]
        json.dumps(answer)
        times["native"].append(time.thread_time() - started)

    def nova_call() -> None:
        vm = str(uuidlib.uuid4())
        body = json.dumps(
            {
                "spec_obj": wire.request_spec([vm]),
                "instance_uuids": [vm],
                "return_objects": True,
                "return_alternates": True,
                "context": {**nova_context, "request_id": f"req-{vm}"},
            }
        )
        started = time.thread_time()
        args = json.loads(body)
        ctxt = nova_ctxt.deserialize_context(args.pop("context"))
        args = {k: nova_ctxt.deserialize_entity(ctxt, v) for k, v in args.items()}
        answer = nova.select_destinations.__wrapped__(nova, ctxt, **args)  # type: ignore[attr-defined]
        json.dumps(nova_ctxt.serialize_entity(ctxt, answer))
        times["nova"].append(time.thread_time() - started)

    for _ in range(min(50, calls)):  # warm: the host view loaded, the code paths hot
        native_call()
        nova_call()
    times = {"native": [], "nova": []}
    for _ in range(calls):
        native_call()
        nova_call()
    return {name: summary(seconds) for name, seconds in times.items()}


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    bench.log(f"nova: codec, {sizes.nova_codec_calls} calls a round")
    costs = codec(sizes.nova_codec_calls)
    bench.log(f"nova: select_destinations at {sizes.nova_hosts} hosts, {sizes.nova_calls} each")
    decided = decisions(sizes.nova_hosts, sizes.nova_calls)
    rows = [{"endpoint": name, **row} for name, row in decided.items()]
    extra = decided["nova"]["median_ms"] - decided["native"]["median_ms"]
    bench.log(
        f"  native {decided['native']['median_ms']:.3f} ms, Nova's "
        f"{decided['nova']['median_ms']:.3f} ms: {extra:+.3f} ms"
    )
    return {"hosts": sizes.nova_hosts, "codec": costs, "rows": rows, "extra_ms": extra}
