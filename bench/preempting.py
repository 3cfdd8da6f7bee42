"""What a preempting decision costs next to a normal one (issue 33: at most
10x at 10k hosts), on the in-memory store, in process.

On a synthetic cloud (:mod:`bench.cloud`) every pre-existing consumer gets
an on-demand instance record (priority 100, not preemptible). A normal
decision is a dry run of one ``bench.medium`` instance of class on-demand
(``Engine.select(..., claim=False)``). Then every host's free memory is
taken by one spot instance (priority 10, preemptible: a record and a claim
each), so that the same request finds no host; a preempting decision is
that dry run failing with NoValidHost followed by the preemption search
(:meth:`Engine.preemption`), which must find a host and its victim. The
first preempting decision also reads the pool of instances that may be
evicted (reported apart: ``first_preempting_ms``); the later ones reuse it
(``scheduler.engine.preemption.POOL_AGE``). The spot claims are released
afterwards (their records stay: they change no decision).

``python -m bench.preempting [HOSTS ...]`` prints one line per size.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from bench import cloud
from bench.stats import summary, timed_loop
from scheduler.engine import Engine, EngineSettings
from scheduler.exceptions import NoValidHost
from scheduler.objects import ACTIVE, MEMORY_MB, AllocationRequest, RequestSpec
from scheduler.priority import CLASS_SPEC, PriorityClasses, record_fields
from scheduler.store import MemoryStore, Store

CLASSES = PriorityClasses.parse(["spot:10:preemptible", "on-demand:100"])
#: The request: the bench flavor, of class on-demand.
SPEC = RequestSpec(
    flavor=dataclasses.replace(cloud.FLAVOR, extra_specs={CLASS_SPEC: "on-demand"}),
    project_id="bench",
    user_id="bench",
)


def _records(store: Store, plan: list[cloud.HostPlan], cls: str, consumers: Any) -> None:
    fields = record_fields(CLASSES.classes[cls])
    store.create_instances(
        cloud.instance_record(uuid, state=ACTIVE, task_state=None, host=host, **fields)
        for host, uuid in consumers
    )


def measure(store: Store, plan: list[cloud.HostPlan], count: int, budget: float) -> dict[str, Any]:
    """The normal and the preempting decision's latency summaries on ``store``
    (holding ``plan``), and their medians' ratio."""
    _records(store, plan, "on-demand", ((h.name, c) for h in plan for c, _ in h.consumers))
    engine = Engine(store, EngineSettings(priority_classes=CLASSES))
    engine.select("warm", SPEC, [str(uuidlib.uuid4())], claim=False)  # loads the view

    def normal(i: int) -> None:
        engine.select(f"normal-{i}", SPEC, [str(uuidlib.uuid4())], claim=False)

    normal_times, _ = timed_loop(normal, count, budget)
    spot = []
    claims = []
    for h in plan:
        provider = store.get_provider(h.uuid)
        free = provider.free(MEMORY_MB)
        if free > 0:
            uuid = str(uuidlib.uuid5(cloud.NAMESPACE, f"spot/{h.name}"))
            claim = AllocationRequest({h.uuid: {MEMORY_MB: free}}, "spot", "spot")
            store.claim(uuid, claim)
            spot.append((h.name, uuid))
            claims.append((uuid, claim))
    _records(store, plan, "spot", spot)
    found = []

    def preempting(i: int) -> None:
        instance = str(uuidlib.uuid4())
        try:
            engine.select(f"preempting-{i}", SPEC, [instance], claim=False)
        except NoValidHost:
            pass
        else:
            raise AssertionError("the cloud is full of spot instances: no host without preempting")
        found.append(engine.preemption(f"preempting-{i}", SPEC, instance))

    def changed(i: int) -> None:
        # One host's row changes (its spot instance's claim released and made
        # again): the search reads that host's instances again first.
        uuid, claim = claims[(i * 7919) % len(claims)]
        store.release(uuid)
        store.claim(uuid, claim)

    try:
        preempting_times, _ = timed_loop(preempting, count, budget)
        changed_times = _after(changed, preempting, count, budget)
    finally:
        for _, uuid in spot:
            store.release(uuid)
    assert all(f is not None and len(f.victims) == 1 for f in found), "a victim each time"
    row = {
        "normal": summary(normal_times),
        "preempting": summary(preempting_times),
        "preempting_changed": summary(changed_times),
    }
    row["ratio"] = row["preempting"]["median_ms"] / row["normal"]["median_ms"]
    row["ratio_changed"] = row["preempting_changed"]["median_ms"] / row["normal"]["median_ms"]
    # The first reads the pool of what may be evicted (then reused for
    # scheduler.engine.preemption.POOL_AGE seconds).
    row["first_preempting_ms"] = preempting_times[0] * 1000
    row["preemptible_instances"] = len(spot)
    return row


def _after(
    change: Callable[[int], None], step: Callable[[int], None], count: int, budget: float
) -> list[float]:
    """Each ``step(i)``'s seconds, ``change(i)`` made before it (not timed):
    as :func:`bench.stats.timed_loop`, up to ``count`` times or ``budget`` seconds."""
    timings: list[float] = []
    started = time.perf_counter()
    for i in range(count):
        change(i)
        t0 = time.perf_counter()
        step(i)
        timings.append(time.perf_counter() - t0)
        if i + 1 >= 5 and time.perf_counter() - started > budget:
            break
    return timings


def main(argv: list[str]) -> None:
    for hosts in [int(a) for a in argv] or [1000, 10000]:
        plan = cloud.plan(hosts)
        store = MemoryStore()
        cloud.populate(store, plan)
        cloud.refresh_heartbeats(store, plan)
        started = time.perf_counter()
        row = measure(store, plan, 200, 5.0)
        print(
            f"{hosts} hosts: normal median {row['normal']['median_ms']:.3f} ms, "
            f"preempting median {row['preempting']['median_ms']:.3f} ms "
            f"(p99 {row['preempting']['p99_ms']:.3f} ms, "
            f"first {row['first_preempting_ms']:.1f} ms), "
            f"ratio {row['ratio']:.1f}x, "
            f"one host changed before each {row['ratio_changed']:.1f}x, "
            f"{row['preemptible_instances']} preemptible instances "
            f"({time.perf_counter() - started:.0f} s)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
