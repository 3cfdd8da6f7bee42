"""Case 1: the engine in-process, against the in-memory store and Redis.

Three kinds of request, each a fresh request id and fresh instance uuids,
with alternates and the atomic claim (``Engine.select(..., claim=True)``):
one instance (two alternates), ten instances, and ten instances in a new
strict anti-affinity group. Decisions run back to back; the first decision
of a fresh engine (which loads the host view) is reported apart. Every claim
made is released afterwards. The baseline, the naive Nova-style loop of
:mod:`bench.naive`, runs on the same cloud in the same run.

The cost-flat-in-hosts target reads a third measurement: one-instance
decisions on the two clouds of ``flat_hosts`` (10k and 300k hosts) taken in
turn, one on each, so that a machine shared with other work weighs on both
alike (``1 instance, alternated``).

On the in-memory store two more rows: at ``uncapped_hosts`` one instance
with no ``max_placement_results`` cut (an engine whose cut is the whole
cloud: every host that fits is filtered, weighed and ranked), and at
``stream_hosts`` a stream of one-instance requests each drawn (seeded) from
the five flavors of the built-in catalog (``scheduler.flavors``), as a
real request stream repeats a handful of shapes.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sysconfig
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import numpy as np

from bench import cloud, naive
from bench.runner import Bench
from bench.stats import summary, timed_loop
from bench.targets import Target
from scheduler.engine import Engine, EngineSettings
from scheduler.flavors import load_catalog
from scheduler.objects import RequestSpec, ServerGroup
from scheduler.store import Store

SINGLE, MULTI, ANTI = "1 instance", "10 instances", "10 instances, anti-affinity"
UNCAPPED = "1 instance, uncapped"
#: One instance on the two clouds of ``flat_hosts``, a decision on each in turn.
ALTERNATED = "1 instance, alternated"
STREAM = "five-flavor stream"
#: Said after a request kind measured with ``[scheduler] shape_cache`` on.
CACHED = ", shape cache"
#: The seed of the stream's flavor draws.
STREAM_SEED = 15

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("engine_10k", "engine median decision <= 1 ms at 10k hosts", 1.0, "max"),
    Target("engine_100k", "engine median decision <= 10 ms at 100k hosts", 10.0, "max"),
    Target(
        "engine_rate_10k", "engine >= 1,000 decisions/s per process at 10k hosts", 1000.0, "min"
    ),
    Target(
        "engine_flat",
        "engine median decision at 300k hosts <= 1.5x the one at 10k (max_placement_results 1000)",
        1.5,
        "max",
    ),
    Target(
        "engine_uncapped_100k", "engine median decision <= 5 ms at 100k hosts, no cut", 5.0, "max"
    ),
    Target(
        "engine_stream_10k",
        "five-flavor stream: median decision <= 0.1 ms at 10k hosts",
        0.1,
        "max",
    ),
    Target(
        "engine_stream_100k",
        "five-flavor stream: median decision <= 0.15 ms at 100k hosts",
        0.15,
        "max",
    ),
)


def request(kind: str) -> RequestSpec:
    spec = RequestSpec(flavor=cloud.FLAVOR, project_id="bench", user_id="bench")
    if kind in (SINGLE, UNCAPPED):
        return spec
    if kind == MULTI:
        return spec.replace(num_instances=10)
    return spec.replace(
        num_instances=10, group=ServerGroup(uuid=str(uuidlib.uuid4()), policy="anti-affinity")
    )


class Decider:
    """Back-to-back decisions on one engine, remembering what they claimed."""

    def __init__(self, store: Store, settings: EngineSettings | None = None) -> None:
        self.store = store
        self.engine = Engine(store, settings or EngineSettings())
        self.claimed: list[str] = []

    def decide(self, kind: str, claim: bool = True) -> None:
        self.decide_spec(request(kind), claim)

    def decide_spec(self, spec: RequestSpec, claim: bool = True) -> None:
        uuids = [str(uuidlib.uuid4()) for _ in range(spec.num_instances)]
        self.engine.select(
            f"req-{uuidlib.uuid4()}", spec, uuids, return_alternates=True, claim=claim
        )
        if claim:
            self.claimed.extend(uuids)

    def release(self) -> None:
        for consumer in self.claimed:
            self.store.release(consumer)
        self.claimed.clear()


def measure(
    decider: Decider, kind: str, count: int, budget: float, claim: bool = True
) -> dict[str, Any]:
    timings, wall = timed_loop(lambda _i: decider.decide(kind, claim), count, budget)
    row = summary(timings)
    row["requests_per_s"] = len(timings) / wall
    row["instances_per_s"] = row["requests_per_s"] * request(kind).num_instances
    return row


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    rows: list[dict[str, Any]] = []
    naive_rows: list[dict[str, Any]] = []
    profiles: list[str] = []
    for store_kind in ("memory", "redis"):
        kept: Decider | None = None  # on the smaller cloud of flat_hosts
        for hosts in sizes.engine_hosts:
            bench.log(f"engine: {store_kind}, {hosts} hosts")
            if store_kind == "memory":
                store = bench.memory_cloud(hosts)
                if hosts in sizes.naive_hosts:
                    naive_rows.append(_naive(store, hosts, sizes.naive_decisions))
                # (Redis clouds have a heartbeating process of their own.)
                cloud.refresh_heartbeats(store, bench.plan(hosts))
            else:
                store = bench.redis_cloud(hosts).store
            decider = Decider(store)
            started = time.perf_counter()
            decider.decide(SINGLE)
            first = time.perf_counter() - started
            for kind, (count, budget) in (
                (SINGLE, sizes.engine_single),
                (MULTI, sizes.engine_multi),
                (ANTI, sizes.engine_multi),
            ):
                row = measure(decider, kind, count, budget)
                row.update(
                    store=store_kind,
                    hosts=hosts,
                    request=kind,
                    first_decision_ms=first * 1000 if kind == SINGLE else None,
                )
                rows.append(row)
                bench.log(_line(row))
            if store_kind == "memory" and hosts == sizes.uncapped_hosts:
                uncapped = Decider(store, EngineSettings(max_placement_results=hosts))
                uncapped.decide(UNCAPPED)  # loads its view: not timed
                rows.append(_row(measure(uncapped, UNCAPPED, *sizes.engine_single), hosts))
                bench.log(_line(rows[-1]))
                uncapped.release()
                # The same with [scheduler] shape_cache on (off by default): the
                # request repeats, so every decision after the first two is a
                # repeated shape's.
                cached = Decider(
                    store, EngineSettings(max_placement_results=hosts, shape_cache=True)
                )
                cached.decide(UNCAPPED)  # loads its view: not timed
                row = measure(cached, UNCAPPED, *sizes.engine_single)
                rows.append(_row(row | {"request": UNCAPPED + CACHED}, hosts))
                bench.log(_line(rows[-1]))
                cached.release()
            if store_kind == "memory" and hosts in sizes.stream_hosts:
                rows.append(_row(_stream(decider, *sizes.engine_single), hosts))
                bench.log(_line(rows[-1]))
                cached = Decider(store, EngineSettings(shape_cache=True))
                row = _stream(cached, *sizes.engine_single)
                rows.append(_row(row | {"request": STREAM + CACHED}, hosts))
                bench.log(_line(rows[-1]))
                cached.release()
            if bench.profile and (hosts >= 10000 or bench.quick):
                profiles.append(_profile(bench, decider, store_kind, hosts))
            if hosts == sizes.flat_hosts[0]:
                kept = decider  # its claims released after the larger cloud's
                continue
            if hosts == sizes.flat_hosts[1] and kept is not None:
                if store_kind == "memory":  # its heartbeats aged meanwhile
                    cloud.refresh_heartbeats(kept.store, bench.plan(sizes.flat_hosts[0]))
                count, budget = sizes.engine_single
                for row in _alternated([kept, decider], count, 2 * budget):
                    row.update(store=store_kind, request=ALTERNATED, first_decision_ms=None)
                    rows.append(row)
                    bench.log(f"  {row['hosts']} hosts," + _line(row)[1:])
                kept.release()
            decider.release()
    for row in naive_rows:
        engine = next(
            r
            for r in rows
            if r["store"] == "memory" and r["hosts"] == row["hosts"] and r["request"] == SINGLE
        )
        row["engine_median_ms"] = engine["median_ms"]
        row["speedup"] = row["median_ms"] / engine["median_ms"]
    return {
        "rows": rows,
        "naive": naive_rows,
        "profiles": profiles,
        "flat_hosts": list(sizes.flat_hosts),
    }


def _alternated(deciders: list[Decider], count: int, budget: float) -> list[dict[str, Any]]:
    """One-instance decisions on each decider's cloud in turn, so that the
    machine's load falls on both alike; a latency summary per cloud."""
    timings: list[list[float]] = [[] for _ in deciders]
    started = time.perf_counter()
    for i in range(count):
        for decider, times in zip(deciders, timings, strict=True):
            t0 = time.perf_counter()
            decider.decide(SINGLE)
            times.append(time.perf_counter() - t0)
        if i + 1 >= 5 and time.perf_counter() - started > budget:
            break
    wall = time.perf_counter() - started
    rows = []
    for decider, times in zip(deciders, timings, strict=True):
        row = summary(times)
        row.update(
            hosts=decider.engine.view.size,
            requests_per_s=len(times) / wall,  # of the alternation, both clouds
            instances_per_s=len(times) / wall,
        )
        rows.append(row)
    return rows


def _stream(decider: Decider, count: int, budget: float) -> dict[str, Any]:
    """One-instance requests, each of a flavor of the catalog drawn with a seed."""
    flavors = list(load_catalog().values())
    specs = [RequestSpec(flavor=flavor, project_id="bench", user_id="bench") for flavor in flavors]
    draws = np.random.default_rng(STREAM_SEED).integers(len(specs), size=count)
    timings, wall = timed_loop(lambda i: decider.decide_spec(specs[draws[i]]), count, budget)
    row = summary(timings)
    row.update(request=STREAM, requests_per_s=len(timings) / wall, flavors=len(specs))
    row["instances_per_s"] = row["requests_per_s"]
    return row


def _row(row: dict[str, Any], hosts: int) -> dict[str, Any]:
    row.update(store="memory", hosts=hosts, first_decision_ms=None)
    row.setdefault("request", UNCAPPED)
    return row


def _line(row: dict[str, Any]) -> str:
    return (
        f"  {row['request']}: median {row['median_ms']:.3f} ms, "
        f"p99 {row['p99_ms']:.3f} ms, {row['requests_per_s']:.0f}/s"
    )


def _naive(store: Store, hosts: int, budget: tuple[int, float]) -> dict[str, Any]:
    scheduler = naive.NaiveScheduler(
        naive.host_states(store.list_providers(), store.list_aggregates(), store.list_services())
    )
    spec = request(SINGLE)
    timings, wall = timed_loop(
        lambda _i: scheduler.select(spec, [str(uuidlib.uuid4())], time.time()), *budget
    )
    row = summary(timings)
    row.update(hosts=hosts, request=SINGLE, requests_per_s=len(timings) / wall)
    return row


def _profile(bench: Bench, decider: Decider, store_kind: str, hosts: int) -> str:
    """cProfile of single-instance decisions; the top of it, by own time, to a file."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(bench.sizes.profile_decisions):
        decider.decide(SINGLE)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    name = f"profile-engine-{store_kind}-{hosts}.txt"
    path = bench.out / "profiles" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"cProfile of {bench.sizes.profile_decisions} single-instance decisions "
        f"(claim on), {store_kind} store, {hosts} hosts\n\n"
    )
    path.write_text(header + _relative(text.getvalue()))
    return f"profiles/{name}"


def _relative(text: str) -> str:
    """Profiles name files by absolute path; keep them readable from any checkout."""
    paths = sysconfig.get_paths()
    for prefix in (paths["purelib"], paths["stdlib"], str(Path(__file__).parents[2])):
        text = text.replace(prefix + "/", "")
    return text
