"""The shape cache, A/B: the five-flavor stream decided by two engines on one
in-memory cloud, one with the shape cache and one without, a decision of
each in turn (so the machine's load falls on both alike); each claims what
it decides, and sees the other's claims through the change feed, as two
workers would. Prints median and p99 per engine, and with ``--profile`` the
top of a cProfile of the cached engine's decisions.

    python -m bench.shapes --hosts 10000 --decisions 2000 [--uncapped] [--profile]

``--uncapped`` gives both engines a ``max_placement_results`` of the whole
cloud (every host that fits is a candidate). ``--fresh`` makes every request
a shape never seen before (the catalog's flavor with one more MB each time):
what the cache costs when it cannot help.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
import uuid as uuidlib
from dataclasses import replace

import numpy as np

from bench import cloud
from bench.cases.engine import STREAM_SEED
from scheduler.engine import Engine, EngineSettings
from scheduler.flavors import load_catalog
from scheduler.objects import RequestSpec
from scheduler.store.memory import MemoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--uncapped", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    store = MemoryStore()
    plan = cloud.plan(args.hosts)
    cloud.populate(store, plan)
    cloud.refresh_heartbeats(store, plan)
    limit = args.hosts if args.uncapped else 1000
    engines = {
        "cache off": Engine(store, EngineSettings(max_placement_results=limit, shape_cache=False)),
        "cache on": Engine(store, EngineSettings(max_placement_results=limit, shape_cache=True)),
    }
    specs = [
        RequestSpec(flavor=flavor, project_id="bench", user_id="bench")
        for flavor in load_catalog().values()
    ]
    draws = np.random.default_rng(STREAM_SEED).integers(len(specs), size=args.decisions)
    claimed: list[str] = []

    def decide(engine: Engine, i: int) -> None:
        instance = str(uuidlib.uuid4())
        spec = specs[draws[i]]
        if args.fresh:  # the same for both engines: decision i of each
            flavor = spec.flavor
            spec = spec.replace(flavor=replace(flavor, memory_mb=flavor.memory_mb + i + 1))
        engine.select(f"req-{uuidlib.uuid4()}", spec, [instance])
        claimed.append(instance)

    for engine in engines.values():  # load the views, fill the caches: not timed
        for i in range(len(specs)):
            decide(engine, i)
    timings: dict[str, list[float]] = {name: [] for name in engines}
    for i in range(args.decisions):
        for name, engine in engines.items():
            started = time.perf_counter()
            decide(engine, i)
            timings[name].append(time.perf_counter() - started)
    print(
        f"{args.hosts} hosts, cut {limit}, {args.decisions} decisions each, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for name, times in timings.items():
        ms = np.array(times) * 1000
        print(f"  {name}: median {np.median(ms):.3f} ms, p99 {np.percentile(ms, 99):.3f} ms")
    if args.profile:
        profiler = cProfile.Profile()
        engine = engines["cache on"]
        profiler.enable()
        for i in range(args.decisions):
            decide(engine, i)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(20)
        stats.sort_stats("cumulative").print_stats(40)
    for consumer in claimed:
        store.release(consumer)


if __name__ == "__main__":
    main()
