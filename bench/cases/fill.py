"""Placement quality: a cloud filled to full, one request at a time, per weigher set.

The cloud (:func:`build`): 60 hosts, 20 of each of three shapes (32 vCPU /
128 GiB / 1,000 GB, 64 / 256 GiB / 2,000 GB, 16 / 64 GiB / 500 GB), in an
order the seed shuffles; allocation ratios CPU 4.0, RAM and disk 1.0; 512
MB of RAM reserved per host. The trace (:func:`trace`): flavors drawn from
:data:`MIX` with the seed. Each request (one instance, no alternates) goes
through the real engine and its claim on the in-memory store; a request
that meets NoValidHost is skipped and the run goes on until
:data:`FAILURES_IN_A_ROW` requests in a row have failed (or the trace ends).

Per run, against the **upper bound** (the longest prefix of the trace whose
summed demand fits the cloud's summed capacity in every resource class):

* ``before_pct``: the instances placed before the first NoValidHost, in % of
  the upper bound (every one before it was placed, so this is the prefix
  the cloud held);
* ``total_pct``: every instance placed by the end, in % of the upper bound
  (above 100 when small flavors fill in after the larger ones failed);
* ``free_at_failure``: % of the cloud's RAM, vCPU and disk still free at the
  first NoValidHost;
* per-host RAM fill (used / capacity) at 25, 50 and 75% of the way to the
  first NoValidHost: its spread (max - min) and standard deviation;
* ``series``: the mean RAM fill of each host shape every
  :data:`SERIES_EVERY` requests (the plot of fill over time).

Each weigher set of :data:`SETS` runs on the same seeds in the same run:
``nova`` (``weigher_profile = nova``, Nova-identical: RAM, CPU and disk
weighed by absolute free amounts, spreading) and ``nova pack`` (the same
weighers at -1) are the baseline, beside the other profiles of
``[filter_scheduler] weigher_profile`` (``spread``, the default, and ``pack``).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import cloud
from bench.cases import engine as engine_case
from bench.runner import Bench
from bench.targets import Target
from scheduler.engine import Engine, EngineSettings
from scheduler.exceptions import NoValidHost
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU, Flavor, RequestSpec
from scheduler.store import Inventory, MemoryStore, Service

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("fill_pack", "fill: pack, % of the upper bound before first NoValidHost", 98.0, "min"),
    Target(
        "fill_spread", "fill: spread, % of the upper bound before first NoValidHost", 90.0, "min"
    ),
    Target("fill_spread_even", "fill: spread, per-host RAM fill std-dev half-way", 0.10, "max"),
    Target(
        "profile_time", "decision time of the default profile / nova's, 10k hosts", 1.10, "max"
    ),
)


GIB = 1024
CPU_RATIO = 4.0
RESERVED_MEMORY_MB = 512
CLASSES = (MEMORY_MB, VCPU, DISK_GB)


@dataclass(frozen=True)
class Shape:
    name: str
    vcpus: int
    memory_mb: int
    disk_gb: int

    def inventories(self) -> dict[str, Inventory]:
        return {
            VCPU: Inventory(total=self.vcpus, allocation_ratio=CPU_RATIO),
            MEMORY_MB: Inventory(total=self.memory_mb, reserved=RESERVED_MEMORY_MB),
            DISK_GB: Inventory(total=self.disk_gb),
        }

    def capacity(self) -> np.ndarray:
        """What a host of this shape can give, in :data:`CLASSES` order."""
        inv = self.inventories()
        return np.array([inv[rc].capacity for rc in CLASSES], dtype=np.float64)


SHAPES = (
    Shape("32 vCPU / 128 GiB", 32, 128 * GIB, 1000),
    Shape("64 vCPU / 256 GiB", 64, 256 * GIB, 2000),
    Shape("16 vCPU / 64 GiB", 16, 64 * GIB, 500),
)
#: The flavor mix of the trace: (flavor, share).
MIX: tuple[tuple[Flavor, float], ...] = (
    (Flavor("m1.small", 1, 2 * GIB, 20), 0.30),
    (Flavor("m1.medium", 2, 4 * GIB, 40), 0.30),
    (Flavor("m1.large", 4, 8 * GIB, 80), 0.20),
    (Flavor("m1.xlarge", 8, 16 * GIB, 160), 0.15),
    (Flavor("big", 16, 64 * GIB, 320), 0.05),
)
#: The run stops after this many NoValidHost in a row.
FAILURES_IN_A_ROW = 200
#: The trace is this many times the upper bound long (the run stops earlier).
TRACE_LENGTH = 2.0
#: Where the per-host RAM fill spread is read, as fractions of the way to the
#: first NoValidHost.
SPREAD_AT = (0.25, 0.5, 0.75)
SERIES_EVERY = 10
#: The hosts heartbeat every this many requests.
HEARTBEAT_EVERY = 500
#: Rounds of the decision-time measurement, each profile once per round (the
#: best round of each counts: two rounds left the ratio moving by 0.15 between
#: runs on a shared machine).
DECISION_ROUNDS = 6

#: The weigher sets compared, by label: (weigher_profile, plugin options).
SETS: dict[str, tuple[str, Mapping[str, float]]] = {
    "nova": ("nova", {}),
    "nova pack": (
        "nova",
        {
            "ram_weight_multiplier": -1.0,
            "cpu_weight_multiplier": -1.0,
            "disk_weight_multiplier": -1.0,
        },
    ),
    "pack": ("pack", {}),
    "spread": ("spread", {}),
}


def demand(flavor: Flavor) -> np.ndarray:
    return np.array([flavor.memory_mb, flavor.vcpus, flavor.root_gb], dtype=np.float64)


def hosts_of(seed: int, per_shape: int) -> list[Shape]:
    """The hosts' shapes in the order the seed shuffles them."""
    shapes = [shape for shape in SHAPES for _ in range(per_shape)]
    order = np.random.default_rng(seed).permutation(len(shapes))
    return [shapes[k] for k in order]


def trace(seed: int, capacity: np.ndarray) -> tuple[list[Flavor], int]:
    """The seed's trace and its upper bound (how many of its first requests fit
    the summed capacity)."""
    rng = np.random.default_rng(seed + 1_000_003)
    flavors = [f for f, _ in MIX]
    mean = sum(share * demand(f) for f, share in MIX)
    length = int(TRACE_LENGTH * float(np.min(capacity / mean)))
    drawn = [flavors[k] for k in rng.choice(len(MIX), size=length, p=[s for _, s in MIX])]
    summed = np.cumsum([demand(f) for f in drawn], axis=0)
    bound = int(np.argmax(~np.all(summed <= capacity, axis=1)))
    return drawn, bound


def build(hosts: Sequence[Shape]) -> tuple[MemoryStore, list[str]]:
    """An in-memory store holding ``hosts``, their services up and heartbeating."""
    store = MemoryStore()
    names = [f"fill-{k:03d}" for k in range(len(hosts))]
    for name, shape in zip(names, hosts, strict=True):
        uuid = cloud.uuid_for("provider", name)
        store.create_provider(uuid, name)
        store.set_inventory(uuid, 0, shape.inventories())
    store.register_services(Service(host=name, rpc_server=cloud.RPC_SERVER) for name in names)
    store.heartbeat(names, time.time())
    return store, names


def fill(seed: int, profile: str, options: Mapping[str, float], per_shape: int) -> dict[str, Any]:
    """One run of the seed's trace with one weigher set (see the module docstring)."""
    hosts = hosts_of(seed, per_shape)
    store, names = build(hosts)
    index = {name: k for k, name in enumerate(names)}
    cap = np.array([shape.capacity() for shape in hosts])  # hosts x CLASSES
    total = cap.sum(axis=0)
    flavors, bound = trace(seed, total)
    settings = EngineSettings(weigher_profile=profile, plugin_options=dict(options))
    engine = Engine(store, settings)
    used = np.zeros_like(cap)
    shape_of = np.array([SHAPES.index(shape) for shape in hosts])
    first_failure: int | None = None
    placed = failures = 0
    fills: list[np.ndarray] = []  # per-host RAM fill after each request, to the first failure
    series: list[list[float]] = []
    seconds = 0.0
    for k, flavor in enumerate(flavors):
        if k % HEARTBEAT_EVERY == 0:  # a slow machine could outlast service_down_time
            store.heartbeat(names, time.time())
        spec = RequestSpec(flavor=flavor, project_id="bench", user_id="bench")
        instance = str(uuidlib.uuid5(cloud.NAMESPACE, f"fill/{seed}/{k}"))
        started = time.perf_counter()
        try:
            [[selection]] = engine.select(
                f"req-fill-{seed}-{k}", spec, [instance], return_alternates=False
            )
        except NoValidHost:
            seconds += time.perf_counter() - started
            failures += 1
            if first_failure is None:
                first_failure = k
                free_at_failure = 100 * (1 - used.sum(axis=0) / total)
            if failures >= FAILURES_IN_A_ROW:
                break
        else:
            seconds += time.perf_counter() - started
            failures = 0
            placed += 1
            used[index[selection.host]] += demand(flavor)
        ram_fill = used[:, 0] / cap[:, 0]
        if first_failure is None:
            fills.append(ram_fill)
        if k % SERIES_EVERY == 0:
            series.append([float(ram_fill[shape_of == s].mean()) for s in range(len(SHAPES))])
    if first_failure is None:  # the trace ended first (not with these sizes)
        first_failure, free_at_failure = len(flavors), 100 * (1 - used.sum(axis=0) / total)
    spread = {}
    for q in SPREAD_AT:
        at = fills[max(0, round(q * first_failure) - 1)]
        spread[f"{q:.0%}"] = {"range": float(at.max() - at.min()), "std": float(at.std())}
    return {
        "seed": seed,
        "upper_bound": bound,
        "before_first_failure": first_failure,
        "before_pct": 100 * first_failure / bound,
        "placed": placed,
        "total_pct": 100 * placed / bound,
        "requests": k + 1,
        "free_at_failure": dict(zip(CLASSES, map(float, free_at_failure), strict=True)),
        "ram_fill_spread": spread,
        "decision_ms": 1000 * seconds / (k + 1),
        "series": series,
    }


def _mean_row(label: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def stat(values: Sequence[float]) -> dict[str, float]:
        return {
            "mean": float(np.mean(values)),
            "min": float(min(values)),
            "max": float(max(values)),
        }

    return {
        "set": label,
        "seeds": len(runs),
        "before_pct": stat([r["before_pct"] for r in runs]),
        "total_pct": stat([r["total_pct"] for r in runs]),
        "free_at_failure": {
            rc: float(np.mean([r["free_at_failure"][rc] for r in runs])) for rc in CLASSES
        },
        "ram_fill_spread": {
            at: {
                key: float(np.mean([r["ram_fill_spread"][at][key] for r in runs]))
                for key in ("range", "std")
            }
            for at in runs[0]["ram_fill_spread"]
        },
        "decision_ms": float(np.mean([r["decision_ms"] for r in runs])),
    }


def decision_times(bench: Bench, profiles: Sequence[str]) -> list[dict[str, Any]]:
    """Single-instance decisions per profile on the engine case's cloud (in memory),
    in alternating rounds (the machine is shared: each profile's best round)."""
    hosts = bench.sizes.fill_decision_hosts
    store = bench.memory_cloud(hosts)
    cloud.refresh_heartbeats(store, bench.plan(hosts))
    best: dict[str, dict[str, Any]] = {}
    for _ in range(DECISION_ROUNDS):
        for profile in profiles:
            decider = engine_case.Decider(store, EngineSettings(weigher_profile=profile))
            decider.decide(engine_case.SINGLE)
            count, budget = bench.sizes.engine_single
            row = engine_case.measure(decider, engine_case.SINGLE, count, budget)
            decider.release()
            if profile not in best or row["median_ms"] < best[profile]["median_ms"]:
                best[profile] = {**row, "profile": profile, "hosts": hosts}
    for row in best.values():
        row["ratio_to_nova"] = row["median_ms"] / best["nova"]["median_ms"]
    bench.log(
        "  decision time, median: "
        + ", ".join(f"{p} {r['median_ms']:.3f} ms" for p, r in best.items())
    )
    return list(best.values())


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    rows, runs = [], {}
    for label, (profile, options) in SETS.items():
        bench.log(f"fill: {label}")
        runs[label] = [
            fill(seed, profile, options, sizes.fill_hosts_per_shape)
            for seed in range(sizes.fill_seeds)
        ]
        rows.append(_mean_row(label, runs[label]))
        row = rows[-1]
        bench.log(
            f"  before the first NoValidHost {row['before_pct']['mean']:.1f}% "
            f"({row['before_pct']['min']:.1f}-{row['before_pct']['max']:.1f}), in total "
            f"{row['total_pct']['mean']:.1f}%, RAM fill std-dev half-way "
            f"{row['ram_fill_spread']['50%']['std']:.3f}"
        )
    profiles = list(dict.fromkeys(profile for profile, _ in SETS.values()))
    return {
        "rows": rows,
        "decision": decision_times(bench, profiles),
        "default_profile": EngineSettings().weigher_profile,
        "runs": {
            label: [{k: v for k, v in r.items() if k != "series"} for r in rs]
            for label, rs in runs.items()
        },
        # Fill over time of the first seed, per weigher set: [step][shape].
        "series": {label: rs[0]["series"] for label, rs in runs.items()},
        "series_every": SERIES_EVERY,
        "shapes": [shape.name for shape in SHAPES],
        "hosts": len(SHAPES) * sizes.fill_hosts_per_shape,
        "failures_in_a_row": FAILURES_IN_A_ROW,
    }
