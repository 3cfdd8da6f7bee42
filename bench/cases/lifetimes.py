"""Placement quality under churn: instances come and go, the arrival rate raised step by step.

The cloud and the flavor mix of :mod:`bench.cases.fill` (60 hosts, the
in-memory store, the real engine and claims). Instances arrive as a seeded
Poisson process and live a seeded heavy-tailed time (Pareto, shape
:data:`PARETO_SHAPE`, mean 1 time unit); at each arrival the instances whose
time is up are deleted first (their claims released through the store, so
the engine's view learns of it from the change feed, as a worker does).

The arrival rate is set by the **offered load**: arrivals per time unit x
mean lifetime x the mix's mean disk (the class the mix exhausts first) over
the cloud's disk. It is raised through :data:`LOADS` on the same cloud,
without a reset; each step runs ``lifetimes_arrivals`` arrivals, of which the
first third settle and the rest are measured: the share of requests that
met NoValidHost, the utilisation (the used share of the scarcest class,
averaged over the measured arrivals) and the fragmentation (how many of the
largest flavor, ``big``, would still fit, summed over the hosts, averaged).

Per weigher set: the highest utilisation among the steps before the first
with :data:`FAILURE_LIMIT` or more failures, and the fragmentation there.
"""

from __future__ import annotations

import heapq
import itertools
import time
import uuid as uuidlib
from typing import Any

import numpy as np

from bench import cloud
from bench.cases import fill
from bench.runner import Bench
from bench.targets import Target
from scheduler.engine import Engine, EngineSettings
from scheduler.exceptions import NoValidHost
from scheduler.objects import RequestSpec

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("churn_gain", "lifetimes: utilisation at < 1% failures, points above nova", 5.0, "min"),
)


PARETO_SHAPE = 1.8
#: Offered loads, in the order they are run.
LOADS = (0.70, 0.75, 0.80, 0.84, 0.88, 0.91, 0.94, 0.97, 1.00)
FAILURE_LIMIT = 0.01
SETTLE = 1 / 3
#: The hosts heartbeat every this many arrivals.
HEARTBEAT_EVERY = 500


def simulate(seed: int, profile: str, options: Any, bench: Bench) -> list[dict[str, Any]]:
    """One weigher set through every load of :data:`LOADS`: a row per load."""
    sizes = bench.sizes
    hosts = fill.hosts_of(seed, sizes.fill_hosts_per_shape)
    store, names = fill.build(hosts)
    index = {name: k for k, name in enumerate(names)}
    cap = np.array([shape.capacity() for shape in hosts])
    total = cap.sum(axis=0)
    engine = Engine(store, EngineSettings(weigher_profile=profile, plugin_options=dict(options)))
    rng = np.random.default_rng(seed + 7_000_001)
    flavors = [f for f, _ in fill.MIX]
    shares = [s for _, s in fill.MIX]
    mean = sum(s * fill.demand(f) for f, s in fill.MIX)
    scarce = int(np.argmax(mean / total))
    largest = fill.demand(flavors[-1])
    mean_life = PARETO_SHAPE / (PARETO_SHAPE - 1)
    used = np.zeros_like(cap)
    leaving: list[tuple[float, str, int, int]] = []  # (time, instance, host, flavor)
    now, serial = 0.0, 0
    rows = []
    for load in LOADS:
        rate = load * total[scarce] / mean[scarce]  # arrivals per unit of lifetime
        measured = failures = 0
        utilisation, fits = [], []
        arrivals = sizes.lifetimes_arrivals
        for k in range(arrivals):
            if serial % HEARTBEAT_EVERY == 0:  # a long run outlasts service_down_time
                store.heartbeat(names, time.time())
            now += rng.exponential(1 / rate)
            while leaving and leaving[0][0] <= now:
                _, instance, h, f = heapq.heappop(leaving)
                store.release(instance)
                used[h] -= fill.demand(flavors[f])
            f = int(rng.choice(len(flavors), p=shares))
            life = (rng.pareto(PARETO_SHAPE) + 1) / mean_life
            instance = str(uuidlib.uuid5(cloud.NAMESPACE, f"life/{seed}/{serial}"))
            serial += 1
            spec = RequestSpec(flavor=flavors[f], project_id="bench", user_id="bench")
            counted = k >= arrivals * SETTLE
            measured += counted
            try:
                [[selection]] = engine.select(
                    f"req-{instance}", spec, [instance], return_alternates=False
                )
            except NoValidHost:
                failures += counted
            else:
                h = index[selection.host]
                used[h] += fill.demand(flavors[f])
                heapq.heappush(leaving, (now + life, instance, h, f))
            if counted:
                utilisation.append(float(used[:, scarce].sum() / total[scarce]))
                room = np.floor((cap - used) / largest).min(axis=1)
                fits.append(float(np.maximum(room, 0).sum()))
        rows.append(
            {
                "load": load,
                "failure_pct": 100 * failures / measured,
                "utilisation_pct": 100 * float(np.mean(utilisation)),
                "largest_fit": float(np.mean(fits)),
            }
        )
    return rows


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    rows, steps = [], {}
    for label, (profile, options) in fill.SETS.items():
        per_seed = [
            simulate(seed, profile, options, bench) for seed in range(sizes.lifetimes_seeds)
        ]
        # Mean over the seeds, load by load.
        steps[label] = [
            {
                key: float(np.mean([seed_rows[k][key] for seed_rows in per_seed]))
                for key in per_seed[0][k]
            }
            for k in range(len(LOADS))
        ]
        # Steady: the steps before the first that failed too often.
        ok = list(
            itertools.takewhile(lambda s: s["failure_pct"] < 100 * FAILURE_LIMIT, steps[label])
        )
        best = max(ok, key=lambda s: s["utilisation_pct"], default=None)
        rows.append(
            {
                "set": label,
                "utilisation_pct": best["utilisation_pct"] if best else None,
                "load": best["load"] if best else None,
                "largest_fit": best["largest_fit"] if best else None,
            }
        )
        bench.log(
            f"lifetimes: {label}: "
            + ", ".join(f"{s['load']:.2f}: {s['failure_pct']:.1f}% failed" for s in steps[label])
        )
    return {
        "rows": rows,
        "steps": steps,
        "hosts": len(fill.SHAPES) * sizes.fill_hosts_per_shape,
        "arrivals_per_step": sizes.lifetimes_arrivals,
        "seeds": sizes.lifetimes_seeds,
        "pareto_shape": PARETO_SHAPE,
        "failure_limit_pct": 100 * FAILURE_LIMIT,
    }
