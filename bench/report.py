"""results.json, results.md (one table per case, targets met or missed) and PNG plots."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.cases import (
    bootstorm,
    cell,
    e2e,
    fill,
    hostview,
    lifetimes,
    memory,
    nova,
    preempt,
    rabbit,
)
from bench.cases import engine as engine_case
from bench.stats import ratio
from bench.targets import Target

#: The cases that declare targets (their ``TARGETS``, beside each case).
TARGET_CASES = (
    engine_case,
    rabbit,
    bootstorm,
    memory,
    hostview,
    fill,
    lifetimes,
    cell,
    nova,
    preempt,
)
#: Every target, by id (how each is measured is in :func:`targets` and
#: :func:`quality_targets`).
TARGETS: dict[str, Target] = {t.id: t for case in TARGET_CASES for t in case.TARGETS}


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.{digits}f}" if abs(value) >= 0.01 else f"{value:.{digits + 2}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def _met(value: float | None, limit: float, kind: str) -> str:
    if value is None:
        return "not measured"
    ok = value <= limit if kind == "max" else value >= limit
    return "met" if ok else "**missed**"


#: The status of a target that the run could not judge: the two-worker storm
#: where the one-worker storm left no core free for the second.
NO_FREE_CORE = "no free core"


def _measured(
    target: Target, measured: str, value: float | None, note: str, status: str | None = None
) -> dict[str, Any]:
    """A target's entry of the results: what was measured against it, and whether
    it was met (or ``status``, where the run says it cannot be judged)."""
    return {
        "id": target.id,
        "target": target.text,
        "measured_on": measured,
        "value": value,
        "limit": target.limit,
        "status": status or _met(value, target.limit, target.kind),
        "note": note,
    }


#: How the engine case names a request kind measured with the shape cache on.
CACHED = engine_case.CACHED


def _find(rows: Sequence[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


# --- targets ------------------------------------------------------------------------


def targets(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with what was measured against it and whether it was met."""
    out: list[dict[str, Any]] = []

    def add(
        tid: str, measured: str, value: float | None, note: str = "", status: str | None = None
    ) -> None:
        out.append(_measured(TARGETS[tid], measured, value, note, status))

    engine = cases.get("engine", {}).get("rows", [])
    for store in ("memory", "redis"):
        label = "in-memory store" if store == "memory" else "Redis store, claim included"
        for tid, hosts in (("engine_10k", 10000), ("engine_100k", 100000)):
            row = _find(engine, store=store, hosts=hosts, request="1 instance")
            add(tid, f"{label}, 1 instance", row and row["median_ms"])
        row = _find(engine, store=store, hosts=10000, request="1 instance")
        add(
            "engine_rate_10k",
            f"{label}, 1 instance, back to back",
            row and row["requests_per_s"],
        )
    _engine_targets(cases, add)
    _preempt_targets(cases, add)
    _rabbit_targets(cases, add)
    _storm_targets(cases, add)
    mem = _find(cases.get("memory", {}).get("rows", []), hosts=100000)
    add("rss_100k", "VmRSS after the view loaded", mem and mem["rss_mb"])
    load = _find(cases.get("hostview", {}).get("cold_load", []), hosts=100000)
    add(
        "load_100k",
        "first decision less a warm one, Redis",
        load and load["load_ms"] / 1000,
    )
    out += quality_targets(cases)
    cell = cases.get("cell", {})
    if cell.get("hosts", 0) < 300000:  # a --quick cell measures no target
        cell = {}
    add("load_300k", "cell: first select_destinations, Redis", cell.get("cold_load_s"))
    add("rss_300k", "cell: VmRSS after the view loaded", cell.get("worker_rss_mb"))
    add(
        "command_300k",
        "cell: slowest command (SLOWLOG, ms), every phase but the populate",
        cell.get("slowest_ms"),
        f"{cell['slowest_command']} in the {cell['slowest_phase']} phase" if cell else "",
    )
    wire = cases.get("nova", {})
    native = _find(wire.get("rows", []), endpoint="native")
    add(
        "nova_extra",
        f"{wire.get('hosts', 0):,} hosts, in-memory store: Nova's median less the native's (ms)"
        + (f", native {_fmt(native['median_ms'])}" if native else ""),
        wire.get("extra_ms"),
    )
    return out


def _rabbit_targets(cases: dict[str, Any], add: Callable[..., None]) -> None:
    """select_destinations against the echo call, each count of callers, the
    echo's own rate beside it."""
    rows = cases.get("rabbit", {}).get("rows", [])
    for row in rows:
        if row["call"] == "select_destinations":
            echo = _find(rows, callers=row["callers"], call="echo")
            add(
                "rabbit_ratio",
                f"{row['callers']} caller(s), calls/s",
                row["ratio_to_echo"],
                f"{_fmt(row.get('calls_per_s'))} calls/s against the echo's "
                f"{_fmt(echo and echo.get('calls_per_s'))}",
            )


def _storm_targets(cases: dict[str, Any], add: Callable[..., None]) -> None:
    """The boot storm's: CPU per boot at 1 and at 10 instances a request, AMQP
    messages per instance at 10, each with the floor of the end-to-end case's
    baselines beside it where it ran; two workers over one, judged only where
    the one-worker storm left a core free."""
    rows = cases.get("bootstorm", {}).get("rows", [])
    ends = cases.get("e2e", {})
    for mode in ("streamed", "backlog"):
        storm = _find(
            rows,
            workers=1,
            mode=mode,
            build_results="store",
            notifications="both",
            per_request=1,
        )
        messages = storm and storm.get("amqp_messages_per_boot")
        add(
            "storm_cpu",
            f"{mode}, 1 worker: CPU ms per boot, every process but the client"
            + (f" ({messages} AMQP messages per boot)" if messages else ""),
            storm and storm.get("cpu_ms_per_boot"),
            _floor_note(ends, storm),
        )
    ten = _find(
        rows,
        workers=1,
        build_results="store",
        notifications="both",
        per_request=bootstorm.PER_REQUEST,
    )
    where = f"{ten['mode']}, 1 worker, " if ten else ""
    add(
        "storm_cpu_10",
        f"{where}{bootstorm.PER_REQUEST} a request: CPU ms per instance, every process but "
        "the client",
        ten and ten.get("cpu_ms_per_boot"),
        _floor_note(ends, ten),
    )
    add(
        "storm_messages_10",
        f"{where}{bootstorm.PER_REQUEST} a request: AMQP messages per instance (the "
        "broker's count: anything else publishing to it counts too)",
        ten and ten.get("amqp_messages_per_boot"),
    )
    cores = cases.get("bootstorm", {}).get("cores")
    for mode in ("streamed", "backlog"):
        two = _find(rows, workers=2, mode=mode)
        one = _find(rows, workers=1, mode=mode)
        note = f"{cores} cores shared by every process of the run" if cores else ""
        if one and "free_cores" in one:
            note = _ratio_note(rows, one, two, cores)
        add(
            "storm_ratio",
            f"{mode}: ACTIVE/s, 2 workers over 1",
            two and two["ratio_to_one_worker"],
            note,
            _ratio_status(two),
        )


def _ratio_status(two: dict[str, Any] | None) -> str | None:
    """The two-worker storm's status: the flat target's (None) where the
    one-worker storm left a core free or the run predates the judgement; else
    "no free core", and, where the idle CPU allowed a gain, whether it gave
    the share of it it is held to (``ratio_limit``)."""
    if not two or two.get("free_core_for_second") is not False:
        return None
    limit = two.get("ratio_limit")
    if limit is None:
        return NO_FREE_CORE
    met = _met(two.get("ratio_to_one_worker"), limit, "min")
    return f"{NO_FREE_CORE}: {met} against ≥ {_fmt(limit)}x"


def _ratio_note(
    rows: Sequence[dict[str, Any]],
    one: dict[str, Any],
    two: dict[str, Any] | None,
    cores: int | None,
) -> str:
    """Beside the two-worker target: the CPU of each process of the one-worker
    storm (% of a core), what was idle, the most that allowed, and what the
    two workers were held to."""
    procs = one.get("cpu_by_process") or {}
    used = ", ".join(
        f"{name} {_fmt(procs[name]['core_pct'])} %"
        for name in sorted(procs, key=_process_order)
        if procs[name].get("core_pct") and name not in ("idle", "others")
    )
    others = (procs.get("others") or {}).get("core_pct")
    note = f"1 worker left {one['free_cores']:.2f} of {cores} cores idle"
    if used:
        note += f" (its run's processes: {used}; the machine's others {_fmt(others)} %)"
    note += f": the idle CPU allowed at most {_fmt(two and two.get('cpu_allowed_ratio'))}x"
    cpu = _cpu_ratio(rows, two)
    if two and cpu is not None:
        # Contention would show as more CPU per boot (work redone) or as CPU
        # left idle while boots waited; neither: the CPU the run got set it.
        note += (
            f"; the 2-worker run's processes got {_fmt(cpu)}x the CPU of the 1-worker "
            f"run's at {_fmt(two.get('cpu_ms_per_boot'))} ms a boot "
            f"({_fmt(one.get('cpu_ms_per_boot'))} with 1), "
            f"{two.get('free_cores') or 0:.2f} cores idle"
        )
    limit = two and two.get("ratio_limit")
    if two and two.get("free_core_for_second") is False and limit is not None:
        note += (
            f"; held to {_fmt(limit)}x ({bootstorm.GAIN_SHARE:.0%} of that gain, as "
            f"{bootstorm.RATIO_TARGET}x is of the 2x a free core allows)"
        )
    return note


def _floor_note(case: dict[str, Any], row: dict[str, Any] | None) -> str:
    """The end-to-end case's baselines beside a storm's CPU per boot: the
    floor of the messages that storm ``row`` sent (:func:`e2e.message_floor`)."""
    echo = _find(case.get("baselines", []), baseline=e2e.ECHO, callers=1)
    cast = _find(case.get("baselines", []), baseline=e2e.CAST)
    if not (echo and cast and row):
        return ""
    floor = e2e.message_floor(
        row.get("per_request", 1),
        row.get("amqp_messages_per_boot"),
        echo["cpu_ms_each"],
        cast["cpu_ms_each"],
    )
    return (
        f"same run: an echo call {_fmt(echo['cpu_ms_each'])} ms, a kombu cast "
        f"{_fmt(cast['cpu_ms_each'])} ms of CPU; these messages' floor "
        f"{_fmt(floor and floor[1])} ms a boot"
    )


def _engine_targets(cases: dict[str, Any], add: Callable[..., None]) -> None:
    """The engine's round-two targets (issue 15): cost flat in hosts, no cut, the
    five-flavor stream. Each says the medians and p99s it was read from."""
    case = cases.get("engine", {})
    engine = case.get("rows", [])
    small, large = case.get("flat_hosts", (10000, 300000))

    def said(row: dict[str, Any]) -> str:
        return (
            f"{row['hosts']:,} hosts: median {_fmt(row['median_ms'])}, p99 {_fmt(row['p99_ms'])}"
        )

    for store in ("memory", "redis"):
        label = "in-memory store" if store == "memory" else "Redis store, claim included"
        low = _find(engine, store=store, hosts=small, request="1 instance, alternated")
        high = _find(engine, store=store, hosts=large, request="1 instance, alternated")
        ratio = high["median_ms"] / low["median_ms"] if low and high else None
        detail = f" ({said(high)} ms; {said(low)} ms)" if low and high else ""
        measured = f"{label}, 1 instance, decisions alternated, ratio{detail}"
        add("engine_flat", measured, ratio)
    for tid, request, hosts in (
        ("engine_uncapped_100k", "1 instance, uncapped", 100000),
        ("engine_stream_10k", "five-flavor stream", 10000),
        ("engine_stream_100k", "five-flavor stream", 100000),
    ):
        for cached, setting in (("", "off, the default"), (CACHED, "on")):
            row = _find(engine, store="memory", hosts=hosts, request=request + cached)
            if row is None and cached:
                continue  # a run from before the shape cache
            detail = f", p99 {_fmt(row['p99_ms'])} ms" if row else ""
            measured = (
                f"in-memory store, claim included, median ms (shape_cache {setting}{detail})"
            )
            add(tid, measured, row and row["median_ms"])


def _preempt_targets(cases: dict[str, Any], add: Callable[..., None]) -> None:
    """Issue 33's benchmark targets, read from the preempt case."""
    case = cases.get("preempt", {})
    churn = case.get("churn", [])
    on = [r for r in churn if r["preemption"]]
    add(
        "preempt_room_refusals",
        "churn, preemption on: on-demand requests that found no host while evicting spot "
        "instances would have made room, every offered load"
        + (f" ({on[0]['hosts']} hosts)" if on else ""),
        sum(r["refused_with_room"] for r in on) if on else None,
    )
    ratios = case.get("utilisation_ratios", {})
    plain = case.get("plain_utilisation_ratios", {})
    baselines = case.get("headroom_baseline", [])
    add(
        "preempt_utilisation",
        (
            "churn: memory utilisation with preemption / the headroom baseline (preemption "
            "off, spot refused past 1 - H of the memory, H the smallest tried that accepts "
            "as many on-demand requests), lowest over the offered loads ("
            + ", ".join(
                f"load {r['offered_load']}: {_fmt(ratios.get(str(r['offered_load'])), 3)}, "
                f"H {r['spot_headroom']:.0%}"
                for r in baselines
            )
            + ")"
            if baselines
            else "churn: memory utilisation with preemption / without, lowest over the "
            "offered loads ("
            + ", ".join(f"load {k}: {_fmt(v, 3)}" for k, v in ratios.items())
            + ")"
        ),
        min(ratios.values()) if ratios else None,
        "with preemption / plain preemption off (spot admitted freely, fewer on-demand "
        "accepted): " + ", ".join(f"load {k}: {_fmt(v, 3)}" for k, v in plain.items())
        if plain
        else "",
    )
    row = _find(case.get("decision", []), hosts=10000)
    add(
        "engine_preempt_10k",
        "in-memory store, 1 instance, dry run, ratio of medians in one run"
        + (
            f" ({_fmt(row['preempting']['median_ms'])} ms against "
            f"{_fmt(row['normal']['median_ms'])} ms)"
            if row
            else ""
        ),
        row and row["ratio"],
    )


# --- markdown -----------------------------------------------------------------------


def markdown(results: dict[str, Any], plots: Sequence[str]) -> str:
    m = results["machine"]
    cases = results["cases"]
    parts = [
        "# Benchmark results",
        "",
        f"Run {results['started_at']} with `{results['command']}` "
        f"({'quick: tiny sizes, figures not comparable' if results['quick'] else 'full'}), "
        f"{results['seconds']:.0f} s. Times are milliseconds unless marked.",
        "",
        "## Machine",
        "",
        _table(
            [
                "CPU",
                "cores",
                "memory",
                "Python",
                "numpy",
                "oslo.messaging",
                "kombu",
                "redis-py",
                "hiredis",
                "Redis",
                "RabbitMQ",
                "load avg (1/5/15 min) start → end",
            ],
            [
                [
                    m["cpu"],
                    m["cores"],
                    f"{m['memory_gb']} GB",
                    m["python"],
                    m["packages"].get("numpy"),
                    m["packages"].get("oslo.messaging"),
                    m["packages"].get("kombu"),
                    m["packages"].get("redis"),
                    m["packages"].get("hiredis"),
                    m.get("redis_server"),
                    m.get("rabbitmq_server"),
                    f"{_load(m['load_average_at_start'])} → {_load(m.get('load_average_at_end'))}",
                ]
            ],
        ),
        "",
        "## Targets",
        "",
        _table(
            ["target", "measured on", "value", "status", "note"],
            [
                [t["target"], t["measured_on"], t["value"], t["status"], t["note"]]
                for t in results["targets"]
            ],
        ),
    ]
    for title, render in (
        ("engine", _engine_md),
        ("hostview", _hostview_md),
        ("rabbit", _rabbit_md),
        ("bootstorm", _storm_md),
        ("memory", _memory_md),
        ("churn", _churn_md),
        ("sweep", _sweep_md),
        ("fill", _fill_md),
        ("lifetimes", _lifetimes_md),
        ("preempt", _preempt_md),
        ("cell", _cell_md),
        ("replicas", _replicas_md),
        ("nova", _nova_md),
        ("e2e", _e2e_md),
        ("workers", _workers_md),
    ):
        if title in cases:
            parts += ["", render(cases[title])]
    if plots:
        parts += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    profiles = [p for c in cases.values() for p in c.get("profiles", []) if p]
    if profiles:
        parts += ["", "## Profiles", ""] + [f"- [{p}]({p})" for p in profiles]
    return "\n".join(parts) + "\n"


def _engine_md(case: dict[str, Any]) -> str:
    limits = {
        ("1 instance", 10000): 1.0,
        ("1 instance", 100000): 10.0,
        ("1 instance, uncapped", 100000): 5.0,
        ("five-flavor stream", 10000): 0.1,
        ("five-flavor stream", 100000): 0.15,
    }

    def target(row: dict[str, Any]) -> str:
        limit = limits.get((row["request"], row["hosts"]))
        if limit is None:
            return ""
        return f"≤ {limit:g} ms: {_met(row['median_ms'], limit, 'max')}"

    rows = [
        [
            r["store"],
            r["hosts"],
            r["request"],
            r["median_ms"],
            r["p99_ms"],
            r["requests_per_s"],
            r["instances_per_s"],
            r.get("first_decision_ms"),
            r["n"],
            target(r),
        ]
        for r in case["rows"]
    ]
    naive = [
        [
            r["hosts"],
            r["median_ms"],
            r["p99_ms"],
            r["engine_median_ms"],
            f"{r['speedup']:.0f}x",
            r["n"],
        ]
        for r in case.get("naive", [])
    ]
    return "\n".join(
        [
            "## 1. Engine, in-process",
            "",
            "One request per decision, back to back, each with alternates and the atomic "
            "claim; the first decision of a fresh engine (it loads the host view) is apart. "
            "`1 instance, alternated`: decisions on the 10k and the 300k cloud in turn, "
            "one on each (what the cost-flat-in-hosts target reads); "
            "`1 instance, uncapped`: an engine whose max_placement_results is the whole "
            "cloud; `five-flavor stream`: each request of a flavor of the built-in catalog, "
            "drawn with a seed (in-memory store); `…, shape cache`: the same on an engine "
            "with `[scheduler] shape_cache` on (off by default).",
            *_runs(case),
            "",
            _table(
                [
                    "store",
                    "hosts",
                    "request",
                    "median",
                    "p99",
                    "requests/s",
                    "instances/s",
                    "first decision",
                    "n",
                    "target",
                ],
                rows,
            ),
            "",
            "Baseline in the same run: the naive Nova-style loop (`bench/naive.py`, one Python "
            "object per host, a loop per filter and weigher, no store), 1 instance, against the "
            "engine on the in-memory store. (Nova 34 itself, measured separately: ~400 ms at "
            "1,000 hosts, ~3,900 ms at 10,000.)",
            "",
            _table(
                [
                    "hosts",
                    "naive median",
                    "naive p99",
                    "engine median",
                    "engine is faster by",
                    "n",
                ],
                naive,
            ),
        ]
    )


def _hostview_md(case: dict[str, Any]) -> str:
    loads = [
        [
            r["hosts"],
            r["load_ms"] / 1000,
            r["first_decision_ms"],
            r["warm_decision_ms"],
            r["loads"],
            f"≤ 5 s: {_met(r['load_ms'] / 1000, 5.0, 'max')}" if r["hosts"] == 100000 else "",
        ]
        for r in case["cold_load"]
    ]
    catch = [
        [
            r["hosts"],
            r["services"],
            r["writer_claims_per_s"],
            r["decisions_per_s"],
            r["changes_per_decision"],
            r["idle_median_ms"],
            r["idle_p99_ms"],
            r["median_ms"],
            r["p99_ms"],
            r["cost_per_decision_ms"],
            r["cost_per_change_us"],
        ]
        for r in case["catchup"]
    ]
    return "\n".join(
        [
            "## 2. Host view (Redis)",
            "",
            "Cold load: a fresh engine's first decision less a warm decision (dry runs).",
            "",
            _table(
                ["hosts", "cold load (s)", "first decision", "warm decision", "loads", "target"],
                loads,
            ),
            "",
            "Catching up with the change stream: paced dry-run decisions, idle and while "
            "another process claims at the given rate; with the default periodic re-read of "
            "heartbeats (not in the change feed; only hosts whose liveness is in doubt), and "
            "with it deferred to isolate the change stream.",
            "",
            _table(
                [
                    "hosts",
                    "services",
                    "writer claims/s",
                    "decisions/s",
                    "changes per decision",
                    "idle median",
                    "idle p99",
                    "median",
                    "p99",
                    "catch-up per decision",
                    "per change (µs)",
                ],
                catch,
            ),
        ]
    )


def _rabbit_md(case: dict[str, Any]) -> str:
    rows = [
        [
            r["callers"],
            r["call"],
            r["calls_per_s"],
            r["median_ms"],
            r["p99_ms"],
            r["n"],
            (
                f"{r['ratio_to_echo']:.2f}"
                + (
                    f" (≥ 0.6: {_met(r['ratio_to_echo'], 0.6, 'min')})"
                    if r["call"] == "select_destinations"
                    else ""
                )
                if r.get("ratio_to_echo") is not None
                else ""
            ),
            r.get("server_cpu_ms_per_call"),
            r.get("callers_cpu_ms_per_call"),
            r.get("broker_cpu_ms_per_call"),
            r.get("redis_cpu_ms_per_call"),
            r.get("machine_busy_cores"),
        ]
        for r in case["rows"]
    ]
    return "\n".join(
        [
            "## 3. Over RabbitMQ",
            "",
            f"One worker process on {case['hosts']:,} hosts (Redis store) and a bare "
            "oslo.messaging echo server answering the same call with a same-sized canned "
            "response; same client, alternating rounds. The worker publishes every call's two "
            "notifications in both formats (the default); a worker with notifications off "
            "shows what they cost, one with the legacy format only what the versioned one "
            "adds. CPU per call (ms) is read "
            "from /proc for the answering process, the calling process, the broker and Redis; "
            "busy cores is the whole machine's.",
            "",
            _table(
                [
                    "callers",
                    "call",
                    "calls/s",
                    "median",
                    "p99",
                    "n",
                    "throughput ratio",
                    "server CPU/call",
                    "caller CPU/call",
                    "broker CPU/call",
                    "Redis CPU/call",
                    "busy cores",
                ],
                rows,
            ),
        ]
    )


def _storm_md(case: dict[str, Any]) -> str:
    rows = [
        [
            r["mode"],
            r["workers"],
            f"{r.get('build_results', 'cast')}, stats "
            + (f"≤ {r['stats_interval']} s late" if r.get("stats_interval") else "at once")
            + f", notifications {r.get('notifications', 'both')}"
            + f", {r.get('per_request', 1)} a request",
            r["instances"],
            r["hosts"],
            ", ".join(f"{state} {n}" for state, n in sorted(r["states"].items())),
            r["rescheduled"],
            r["seconds"],
            r["instances_per_s"],
            r["median_ms"] / 1000,
            r["p99_ms"] / 1000,
            r.get("ratio_to_one_worker"),
            r.get("machine_busy_cores"),
            r.get("cpu_ms_per_boot"),
            r.get("amqp_messages_per_boot"),
            ", ".join(f"{k} {v:.1f}" for k, v in r.get("cpu_seconds", {}).items()),
            r.get("client_cpu_ms_per_boot"),
            r.get("cpu_free", ""),
            _second_worker(case["rows"], r),
        ]
        for r in case["rows"]
    ]
    procs = [r for r in case["rows"] if r.get("cpu_by_process") and _storm_main(r)]
    by_process: list[str] = []
    if procs:
        names = sorted({n for r in procs for n in r["cpu_by_process"]}, key=_process_order)
        by_process = [
            "",
            "CPU of each process of the storms above with 1 and 2 workers, over the span "
            "(/proc/<pid>/stat): ms per boot, and in brackets % of one core "
            f"({case['cores']} cores: {100 * case['cores']} %); *others*: every other "
            "process of the machine, *idle*: what nothing used (/proc/stat). A backlog's "
            "client ran before the span: its ms per boot only.",
            "",
            _table(
                ["mode", "workers", "ACTIVE/s", *names],
                [
                    [r["mode"], r["workers"], r["instances_per_s"]]
                    + [_cpu_cell(r["cpu_by_process"].get(n)) for n in names]
                    for r in procs
                ],
            ),
        ]
    return "\n".join(
        [
            "## 4. Boot storm",
            "",
            "conductor → worker(s) → compute simulator over RabbitMQ and Redis, "
            f"{case['cores']} cores for every process (booting client, conductor, simulator, "
            "workers, broker, Redis). Latency per instance: created_at to updated_at when ACTIVE. "
            "*streamed*: the boot client sends one run_instance per instance while the workers "
            "serve; the span runs from the first created_at. *backlog*: the workers are paused "
            "(SIGSTOP) while the client queues every request, then resumed; the span runs from "
            "the resume (latencies then include the queueing), and "
            f"`rabbit_qos_prefetch_count = {case.get('prefetch')}` lets the worker processes "
            "share the backlog (RabbitMQ's default, unlimited, hands it all to one).",
            *_runs(case),
            "",
            _table(
                [
                    "mode",
                    "workers",
                    "build results, stats, notifications, instances a request",
                    "instances",
                    "hosts",
                    "final states",
                    "rescheduled",
                    "span (s)",
                    "ACTIVE/s",
                    "p50 (s)",
                    "p99 (s)",
                    "ratio to 1 worker",
                    "busy cores",
                    "CPU ms per boot",
                    "AMQP messages per boot",
                    "CPU seconds over the span",
                    "client CPU ms per boot",
                    "CPU free over the span",
                    "the second worker",
                ],
                rows,
            ),
            *by_process,
        ]
    )


def _storm_main(row: dict[str, Any]) -> bool:
    """Whether a storm row is one of the 1- and 2-worker storms (results in
    the store, stats late, both formats, one a request)."""
    return (
        row.get("per_request") == 1
        and row.get("notifications") == "both"
        and row.get("build_results") == "store"
        and row.get("stats_interval") == bootstorm.STATS_INTERVAL
    )


#: The order of a storm's processes in its tables (the workers' first).
PROCESS_ORDER = (
    "conductor",
    "compute",
    "broker",
    "redis",
    "client",
    "callers",
    "others",
    "idle",
)


def _process_order(name: str) -> tuple[int, str]:
    if name.startswith("worker"):
        return (0, name.replace("worker supervisor", "worker 0"))
    return (1 + PROCESS_ORDER.index(name) if name in PROCESS_ORDER else 99, name)


def _cpu_cell(cpu: dict[str, Any] | None) -> str:
    """A process's CPU over a storm: ms per boot (% of a core)."""
    if not cpu:
        return ""
    ms, pct = cpu.get("ms_per_boot"), cpu.get("core_pct")
    return ("0" if ms == 0 else _fmt(ms)) + (
        "" if pct is None else f" ({'0' if pct == 0 else _fmt(pct)} %)"
    )


def _cpu_ratio(rows: Sequence[dict[str, Any]], two: dict[str, Any] | None) -> float | None:
    """The CPU the processes of a two-worker storm's run got (cores, over its
    span) over the one-worker storm's of the same mode: where throughput grew
    as much, CPU held the second worker back, not contention."""
    if not two:
        return None
    one = _find(rows, workers=1, mode=two.get("mode"))
    return ratio(two.get("ours_cores"), one and one.get("ours_cores"))


def _second_worker(rows: Sequence[dict[str, Any]], row: dict[str, Any]) -> str:
    """A two-worker storm's verdict: whether the one-worker storm left it a
    core, and the most the free CPU allowed against what it gave."""
    if row.get("workers", 1) < 2 or "free_core_for_second" not in row:
        return ""
    limit = row.get("ratio_limit")
    cpu = _cpu_ratio(rows, row)
    return (
        ("a free core" if row["free_core_for_second"] else "no free core")
        + f": the idle CPU allowed ≤ {_fmt(row.get('cpu_allowed_ratio'))}x, "
        f"it gave {_fmt(row.get('ratio_to_one_worker'))}x"
        + ("" if limit is None else f" (held to ≥ {_fmt(limit)}x)")
        + ("" if cpu is None else f" on {_fmt(cpu)}x the CPU")
    )


E2E_HEADERS = [
    "path",
    "instances",
    "final states",
    "boots/s",
    "× echo calls/s (16 callers)",
    "CPU ms per boot",
    "by process (ms)",
    "client CPU ms per boot",
    "AMQP messages per boot",
    "message floor (ms)",
    "× floor",
    "CPU free over the boot",
]
E2E_BASELINE_HEADERS = ["baseline", "callers", "count", "per second", "CPU ms each", "by process"]


def _e2e_rows(case: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            r["path"],
            r["instances"],
            ", ".join(f"{state} {n}" for state, n in sorted(r["states"].items())),
            r["boots_per_s"],
            r.get("ratio_to_echo_calls"),
            r["cpu_ms_per_boot"],
            ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_boot_by_process"].items()),
            r.get("client_cpu_ms_per_boot"),
            r.get("amqp_messages_per_boot"),
            r.get("floor_ms_per_boot"),
            r.get("ratio_to_floor"),
            r.get("cpu_free", ""),
        ]
        for r in case["rows"]
    ]


def _e2e_baseline_rows(case: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            b["baseline"],
            b["callers"],
            b["count"],
            b["per_s"],
            b["cpu_ms_each"],
            ", ".join(f"{k} {v:.3f}" for k, v in b["cpu_ms_each_by_process"].items()),
        ]
        for b in case["baselines"]
    ]


E2E_TEXT = (
    "The same boot storm (1 instance a request, notifications in both formats) through the "
    "separate daemons (*real services*, streamed by `conductor-stub boot`, whose CPU is given "
    "apart) and through `scheduler-demo` (*all-in-one*: worker, conductor, simulator and "
    "booting client in one process, the client's thread's CPU given too, within it; it "
    "publishes no notifications), on the same broker and "
    "Redis; CPU per boot is every "
    "process's of the path over the boot, the broker's and Redis's included. Beside them, in "
    "the same run, what their messages cost with nothing above the broker: a bare "
    "oslo.messaging echo call (the floor of a call) and a bare kombu publish/consume loop, "
    "each publish confirmed (the floor of a cast). A boot's message floor is a "
    "select_destinations call at the echo's CPU (1 caller) plus its other messages (the "
    "broker's count less the call's two) at the cast's; × floor is its CPU per boot over "
    "that. The broker's count includes anything else publishing to it. A full run also "
    "boots it through *all-in-one, in-process*: the demo with no URLs (oslo.messaging's "
    "in-process transport, the in-memory store), no broker and no Redis, so no floor: what "
    "the Python of the three services costs with no round trip."
)


def _e2e_md(case: dict[str, Any]) -> str:
    return "\n".join(
        [
            "## 11. End to end",
            "",
            E2E_TEXT,
            "",
            _table(E2E_HEADERS, _e2e_rows(case)),
            "",
            _table(E2E_BASELINE_HEADERS, _e2e_baseline_rows(case)),
        ]
    )


def _memory_md(case: dict[str, Any]) -> str:
    rows = [
        [
            r["hosts"],
            r["rss_mb"],
            r["peak_rss_mb"],
            r["rss_before_load_mb"],
            r["first_call_ms"],
            r["warm_call_ms"],
            f"≤ 300 MB: {_met(r['rss_mb'], 300.0, 'max')}" if r["hosts"] == 100000 else "",
        ]
        for r in case["rows"]
    ]
    return "\n".join(
        [
            "## 5. Worker memory",
            "",
            "A real worker process after its first select_destinations loaded the view.",
            "",
            _table(
                [
                    "hosts",
                    "RSS (MB)",
                    "peak RSS (MB)",
                    "RSS before load (MB)",
                    "first call (ms)",
                    "warm call (ms)",
                    "target",
                ],
                rows,
            ),
        ]
    )


def _churn_rows(case: dict[str, Any]) -> list[list[Any]]:
    """One line per (hosts, utilisation): the rates, latencies and growth."""
    return [
        [
            r["hosts"],
            f"{r['utilisation']:.0%}",
            r["target"],
            r["operations"],
            r["decisions_per_s"],
            r["median_ms"],
            r["p99_ms"],
            f"{r['no_valid_host_rate']:.2%}",
            _start_end(r, lambda c: c["rss_mb"]["worker"], ".1f"),
            _start_end(r, lambda c: c["store_mb"], ".2f"),
            _start_end(r, lambda c: c["stream_entries"], ","),
        ]
        for r in case["rows"]
    ]


CHURN_HEADERS = [
    "hosts",
    "utilisation",
    "live instances",
    "operations",
    "decisions/s",
    "p50",
    "p99",
    "NoValidHost",
    "worker RSS (MB) start → end",
    "store (MB) start → end",
    "change stream entries",
]


def _start_end(row: dict[str, Any], value: Callable[[dict[str, Any]], float], spec: str) -> str:
    """``value`` of the first and the last checkpoint of a churn row."""
    first, last = row["checkpoints"][0], row["checkpoints"][-1]
    return f"{value(first):{spec}} → {value(last):{spec}}"


def _rate_since(checkpoints: Sequence[dict[str, Any]], k: int) -> float | None:
    """Operations per second between checkpoint ``k - 1`` and ``k`` (pauses left out)."""
    if k == 0 or "seconds" not in checkpoints[k]:
        return None
    before, now = checkpoints[k - 1], checkpoints[k]
    spent = now["seconds"] - before["seconds"]
    return (now["step"] - before["step"]) / spent if spent > 0 else None


def _merged_since(cases: dict[str, Any]) -> str:
    """A sentence naming the cases whose rows a later run of their own
    recorded (``--merge``), with that run's date; empty if none."""
    latest: dict[str, str] = {}
    for name, case in cases.items():
        rows = case.get("rows") if isinstance(case, dict) else None
        for row in rows if isinstance(rows, list) else []:
            run = row.get("run") if isinstance(row, dict) else None
            if run and run["started_at"] > latest.get(name, ""):
                latest[name] = run["started_at"]
    if not latest:
        return ""
    named = ", ".join(f"{name} ({at})" for name, at in sorted(latest.items()))
    return f" Recorded since by runs of their own (``--merge``): {named}."


def _runs(case: dict[str, Any]) -> list[str]:
    """The runs a merged case's rows came from (``--merge``), one line each."""
    runs = {r["run"]["started_at"]: r["run"] for r in case["rows"] if r.get("run")}
    return [
        f"\n- {run['started_at']}: `{run['command']}`, {run['seconds']:.0f} s, load average "
        f"{_load(run['machine'].get('load_average_at_start'))} at the start, "
        f"{_load(run['machine'].get('load_average_at_end'))} at the end"
        for run in runs.values()
    ]


def _churn_md(case: dict[str, Any]) -> str:
    detail = [
        [
            r["hosts"],
            f"{r['utilisation']:.0%}",
            r["capacity"],
            r["boots"],
            r["deletes"],
            r["error_deletes"],
            ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items())),
            f"{r['live_min']}–{r['live_max']}",
            r["seconds"],
            r["operations_per_s"],
            r["fill_seconds"],
        ]
        for r in case["rows"]
    ]
    samples = [
        [
            r["hosts"],
            f"{r['utilisation']:.0%}",
            f"{c['step']:,} ({c['step'] / r['operations']:.0%})",
            c["live"],
            c["rss_mb"]["worker"],
            c["rss_mb"]["conductor"],
            c["rss_mb"]["compute"],
            c["store_keys"],
            c["store_mb"],
            c["instance_records"],
            c["consumers"],
            c["deleted_records"],
            c["stream_entries"],
            c["stream_mb"],
            _rate_since(r["checkpoints"], k),
            c.get("load_average"),
        ]
        for r in case["rows"]
        for k, c in enumerate(r["checkpoints"])
    ]
    return "\n".join(
        [
            "## 6. Churn",
            "",
            "The cloud held at a steady utilisation by deletes matching boots (kube-scheduler's "
            "MixedChurn is the model), conductor → worker → compute simulator over RabbitMQ and "
            f"Redis, {case['cores']} cores for every process. Hosts fit "
            f"{case['slots_per_host']} × {case['flavor']} each; for each utilisation, in "
            "ascending order on one cloud, the cloud is filled to the target, then each step "
            "boots one instance and, with the live count (ACTIVE + building) at the target, "
            f"first deletes a random ACTIVE one; at most {case['window']} boots are in flight, "
            "and a boot that ends in ERROR is deleted too (the next step then boots without a "
            "delete). Decisions/s: boots ended over the churn's seconds (checkpoint pauses "
            "left out); latency: created_at to updated_at when first seen ACTIVE. "
            f"`[conductor] deleted_retention = {case['retention_s']:g}` s, so the store holds "
            "the live instances plus the last few seconds of DELETED records. Store size: "
            "`MEMORY USAGE … SAMPLES 0` of every key under the run's prefix, the change stream "
            "apart (it is bounded by the store's `stream_maxlen`, 100,000 entries, not by "
            "what is alive).",
            *_runs(case),
            "",
            _table(CHURN_HEADERS, _churn_rows(case)),
            "",
            _table(
                [
                    "hosts",
                    "utilisation",
                    "capacity",
                    "boots",
                    "deletes",
                    "ERROR deletes",
                    "boot outcomes",
                    "live min–max",
                    "churn (s)",
                    "operations/s",
                    "fill (s)",
                ],
                detail,
            ),
            "",
            "Resident sizes and store at the start of the churn and after 25, 50, 75 and 100% "
            "of its operations (boots in flight drained first):",
            "",
            _table(
                [
                    "hosts",
                    "utilisation",
                    "after operations",
                    "live",
                    "worker RSS (MB)",
                    "conductor RSS (MB)",
                    "compute RSS (MB)",
                    "store keys",
                    "store (MB)",
                    "instance records",
                    "consumers",
                    "DELETED kept",
                    "stream entries",
                    "stream (MB)",
                    "operations/s since the last",
                    "load avg (1 min)",
                ],
                samples,
            ),
        ]
    )


# --- the documentation's performance page ------------------------------------------

#: The first line of the file --update-docs writes (doc/source/performance.rst
#: includes it).
DOCS_HEADER = ".. This file is written by python -m bench --update-docs: do not edit it."


def _sweep_md(case: dict[str, Any]) -> str:
    rows = [
        [
            r["records"],
            r["due"],
            r["index"]["median_ms"],
            r["index_redis"]["median_ms"],
            r["full_scan"]["median_ms"],
            r["full_scan_redis"]["median_ms"],
            r["reindex_s"],
            r["reindex_commands"]["p99_ms"],
            r["reindex_commands"]["max_ms"],
        ]
        for r in case["rows"]
    ]
    return "\n".join(
        [
            "## 7. Sweep",
            "",
            "The conductor's sweep (its pending set, at most "
            f"{case['limit']} records) beside finished records: through the deadline "
            "index, and by the full scan it replaced (the baseline), medians; "
            "re-index: what an upgraded store runs once.",
            "",
            _table(
                [
                    "finished records",
                    "due",
                    "index sweep (ms)",
                    "its Redis time (ms)",
                    "full scan (ms)",
                    "its Redis time (ms)",
                    "re-index (s)",
                    "its commands p99 (ms)",
                    "longest (ms)",
                ],
                rows,
            ),
        ]
    )


def _cell_md(case: dict[str, Any]) -> str:
    rows = [
        [
            p["phase"],
            p["seconds"],
            p["slowest_ms"],
            p["slowest_command"],
            p["over_10ms"],
            p["commands_logged"],
            f"> {p['logged_above_us']} µs" if p["logged_above_us"] else "all",
        ]
        for p in case["phases"]
    ]
    return "\n".join(
        [
            "## 8. Cell",
            "",
            f"A private Redis holding {case['hosts']:,} hosts and {case['instances']:,} "
            f"instance records with their allocations: used_memory "
            f"{_fmt(case['redis_used_memory_mb'])} MB after the populate "
            f"(peak {_fmt(case.get('redis_used_memory_peak_mb'))} MB). Cold load "
            f"{_fmt(case['cold_load_s'])} s; worker VmRSS {_fmt(case['worker_rss_mb'])} MB "
            f"(VmHWM {_fmt(case['worker_peak_rss_mb'])} MB). Each phase's slowest command "
            "from SLOWLOG (Redis's own time; the populate is the bench's bulk writes, "
            "not held to the 10 ms target):",
            "",
            _table(
                [
                    "phase",
                    "seconds",
                    "slowest (ms)",
                    "command",
                    "> 10 ms",
                    "logged",
                    "SLOWLOG kept",
                ],
                rows,
            ),
        ]
    )


#: The min_replicas table's columns.
REPLICAS_HEADERS = ["min_replicas", "claims", "claims/s", "median (ms)", "p99 (ms)"]


def _replicas_rows(case: dict[str, Any]) -> list[list[Any]]:
    return [
        [r["min_replicas"], r["claims"], r["claims_per_s"], r["median_ms"], r["p99_ms"]]
        for r in case["rows"]
    ]


def _replicas_text(case: dict[str, Any]) -> str:
    return (
        f"Claims back to back on a private master with one replica "
        f"({case['hosts']:,} hosts), {case['rounds']} alternating rounds per setting: "
        f"min_replicas = 1 makes {case['rate_ratio']:.2f}x the claims/s of 0 "
        f"(median latency {case['median_ratio']:.2f}x)."
    )


def _section_md(heading: str, text: str, headers: Sequence[str], rows: list[list[Any]]) -> str:
    """A case's section of results.md: its heading, a sentence, its table."""
    return "\n".join([f"## {heading}", "", text, "", _table(headers, rows)])


def _replicas_md(case: dict[str, Any]) -> str:
    return _section_md(
        "9. min_replicas", _replicas_text(case), REPLICAS_HEADERS, _replicas_rows(case)
    )


def _zero(value: Any) -> Any:
    """0 as "0" (not 0.0000, as :func:`_fmt` writes a small figure)."""
    return "0" if value == 0 else value


#: The processes of a call besides the workers, as the workers case names them.
CALL_PARTIES = ("callers", "broker", "redis")


def _workers_md(case: dict[str, Any]) -> str:
    """The worker-processes case: each round's CPU by process, then two
    workers over one, round by round."""
    rows = case["rows"]
    names = sorted({n for r in rows for n in r["core_pct"] if n != "workers"}, key=_process_order)
    return "\n".join(
        [
            "## 12. Worker processes, select_destinations only",
            "",
            f"A worker daemon of 1, then 2, worker processes on {case['hosts']:,} hosts (a "
            f"Redis of the case's own), called by {case['callers']} threads of the bench's "
            f"process for {case['seconds_per_round']:g} s a round, rounds alternating; no "
            "compute, no conductor: what the workers do is most of a call's CPU. CPU from "
            "/proc around each round, ms per call, and % of one core "
            f"({case['cores']} cores: {100 * case['cores']} %; *others*: every other process "
            "of the machine, *idle*: what nothing used); Redis commands per call from that "
            "Redis's INFO commandstats; reloads: the "
            "workers' host_view_loaded, host_view_stream_truncated and host_view_write_lost "
            "lines over the round.",
            *_runs(case),
            "",
            _table(
                [
                    "request",
                    "round",
                    "workers",
                    "calls/s",
                    "median",
                    "p99",
                    "worker CPU ms per call",
                    "callers / broker / Redis CPU ms per call",
                    *(f"{n} %" for n in names),
                    "Redis commands per call",
                    "reloads",
                ],
                [
                    [
                        r["request"],
                        r["round"],
                        r["workers"],
                        r["calls_per_s"],
                        r["median_ms"],
                        r["p99_ms"],
                        r["cpu_ms_per_call"]["workers"],
                        " / ".join(_fmt(r["cpu_ms_per_call"].get(n)) for n in CALL_PARTIES),
                        *(_zero(r["core_pct"].get(n)) for n in names),
                        r["redis_commands_per_call_total"],
                        sum(r["view_reloads"].values()),
                    ]
                    for r in rows
                ],
            ),
            "",
            "Two workers over one, each pair of rounds: throughput, the CPU the run's processes "
            "got, the workers' CPU per call and Redis commands per call (about 1: no work "
            "redone for the second worker), the CPU the one-worker round left idle and the "
            "most that allowed ((the run's cores + idle) / the run's cores).",
            "",
            _table(
                [
                    "request",
                    "round",
                    "calls/s, 2 over 1",
                    "CPU of the run, 2 over 1",
                    "worker CPU per call, 2 over 1",
                    "Redis commands per call, 2 over 1",
                    "idle cores, 1 worker",
                    "idle cores, 2 workers",
                    "the idle CPU allowed",
                    "reloads, 2 workers",
                ],
                [
                    [
                        p["request"],
                        p["round"],
                        p["ratio"],
                        p["cpu_ratio"],
                        p["worker_cpu_ratio"],
                        p["commands_ratio"],
                        _zero(p["one_worker_idle_cores"]),
                        _zero(p["two_workers_idle_cores"]),
                        p["cpu_allowed_ratio"],
                        p["reloads"],
                    ]
                    for p in case["scaling"]
                ],
            ),
        ]
    )


#: The Nova wire table's columns.
NOVA_HEADERS = ["endpoint", "calls", "median (ms)", "p99 (ms)", "mean (ms)"]


def _nova_rows(case: dict[str, Any]) -> list[list[Any]]:
    return [
        [r["endpoint"], r["n"], r["median_ms"], r["p99_ms"], r["mean_ms"]] for r in case["rows"]
    ]


def _nova_text(case: dict[str, Any]) -> str:
    codec = case["codec"]
    return (
        f"Worker CPU of one select_destinations (1 instance, 2 alternates, in-memory store of "
        f"{case['hosts']:,} hosts), the native endpoint and [nova_compat]'s in turn: Nova's "
        f"costs {case['extra_ms']:+.3f} ms. Of that, reading Nova's RequestSpec into the "
        f"project's request takes {_fmt(codec['decode_total_ms'])} ms (of which "
        f"{_fmt(codec['decode_ovo_ms'])} ms in oslo.versionedobjects), writing three "
        f"Selections {_fmt(codec['encode_ms'])} ms."
    )


def _nova_md(case: dict[str, Any]) -> str:
    return _section_md("10. Nova's wire format", _nova_text(case), NOVA_HEADERS, _nova_rows(case))


def _rst_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A reStructuredText list-table (each cell as :func:`_fmt` writes it)."""
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [list(headers), *([_fmt(v) for v in row] for row in rows)]:
        out += [("   * - " if i == 0 else "     - ") + _rst_cell(v) for i, v in enumerate(row)]
    return "\n".join(out)


def _rst_cell(value: str) -> str:
    """A cell's text in reStructuredText: a ``**missed**`` stays bold, and a
    ``|`` or ``*`` elsewhere is literal."""
    if value == "**missed**":
        return value
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*") or "—"


def docs_block(results: dict[str, Any], plots: Sequence[str], results_dir: str) -> str:
    """The documentation's summary of a full run: machine, targets, headline rows,
    plots; ``results_dir`` is the results' directory as the including page
    names it."""
    m = results["machine"]
    cases = results["cases"]
    parts = [
        DOCS_HEADER,
        "",
        f"Latest full run: {results['started_at']}, {m['cpu']}, {m['cores']} cores, "
        f"{m['memory_gb']} GB, Python {m['python']}, oslo.messaging "
        f"{m['packages'].get('oslo.messaging')}, Redis {m.get('redis_server')}, RabbitMQ "
        f"{m.get('rabbitmq_server')}; load average {_load(m['load_average_at_start'])} at the "
        f"start and {_load(m.get('load_average_at_end'))} at the end (the machine was shared "
        f"with other work).{_merged_since(cases)} Every table, the profiles and the "
        f"method: ``bench/results/results.md``.",
        "",
        _rst_table(
            ["target", "measured on", "value", "status", "note"],
            [
                [t["target"], t["measured_on"], t["value"], t["status"], t["note"]]
                for t in results["targets"]
            ],
        ),
    ]
    engine = cases.get("engine", {})
    if engine:
        rows = [
            [
                r["store"],
                r["hosts"],
                r["request"],
                r["median_ms"],
                r["p99_ms"],
                r["requests_per_s"],
            ]
            for r in engine["rows"]
            if r["request"]
            in (
                "1 instance",
                "1 instance, alternated",
                "1 instance, uncapped",
                "1 instance, uncapped" + CACHED,
                "five-flavor stream",
                "five-flavor stream" + CACHED,
            )
        ]
        parts += [
            "",
            "Engine in-process, 1 instance with 2 alternates, claim included (ms); with no "
            "max_placement_results cut, and each request of a flavor drawn from the catalog, "
            "with ``[scheduler] shape_cache`` off (the default) and on:",
            "",
            _rst_table(["store", "hosts", "request", "median", "p99", "decisions/s"], rows),
        ]
        naive = [
            [r["hosts"], r["median_ms"], r["engine_median_ms"], f"{r['speedup']:.0f}x"]
            for r in engine.get("naive", [])
        ]
        if naive:
            parts += [
                "",
                "Against the naive Nova-style loop in the same run (ms):",
                "",
                _rst_table(["hosts", "naive", "engine", "ratio"], naive),
            ]
    churn = cases.get("churn", {})
    if churn.get("rows"):
        parts += [
            "",
            f"Churn: the cloud held at a utilisation by deletes matching boots, "
            f"{churn['window']} boots in flight, through the three daemons; latency "
            "request → ACTIVE (ms), RSS and store (without the change stream) at the start "
            "and after the operations:",
            "",
            _rst_table(CHURN_HEADERS, _churn_rows(churn)),
        ]
    if "replicas" in cases:
        replicas = cases["replicas"]
        parts += [
            "",
            _replicas_text(replicas),
            "",
            _rst_table(REPLICAS_HEADERS, _replicas_rows(replicas)),
        ]
    if "e2e" in cases:
        parts += [
            "",
            E2E_TEXT.replace("`", "``"),
            "",
            _rst_table(E2E_HEADERS, _e2e_rows(cases["e2e"])),
            "",
            _rst_table(E2E_BASELINE_HEADERS, _e2e_baseline_rows(cases["e2e"])),
        ]
    storm = cases.get("bootstorm", {})
    if any(r.get("cpu_free") for r in storm.get("rows", [])):
        parts += [
            "",
            "Boot storm, one worker and two, the CPU each process used over the span and the "
            "CPU that was free (a second worker can only add throughput on a core the first "
            "left free):",
            "",
            _rst_table(
                [
                    "mode",
                    "workers",
                    "ACTIVE/s",
                    "CPU by process: ms per boot (% of a core)",
                    "CPU free",
                    "second worker",
                ],
                [
                    [
                        r["mode"],
                        r["workers"],
                        r["instances_per_s"],
                        ", ".join(
                            f"{k} {_cpu_cell(r['cpu_by_process'][k])}"
                            for k in sorted(r["cpu_by_process"], key=_process_order)
                        )
                        if r.get("cpu_by_process")
                        else ", ".join(f"{k} {v:.1f} s" for k, v in r["cpu_seconds"].items()),
                        r["cpu_free"],
                        _second_worker(storm["rows"], r),
                    ]
                    for r in storm["rows"]
                    if _storm_main(r)
                ],
            ),
        ]
    if "nova" in cases:
        parts += [
            "",
            _nova_text(cases["nova"]),
            "",
            _rst_table(NOVA_HEADERS, _nova_rows(cases["nova"])),
        ]
    for plot in plots:
        parts += ["", f".. image:: {results_dir}/{plot}", f"   :alt: {plot}"]
    return "\n".join(parts) + "\n"


def _load(averages: Sequence[float] | None) -> str:
    return " / ".join(f"{a:g}" for a in averages) if averages else "?"


def update_docs(page: Path, block: str) -> None:
    """Write ``block`` to ``page``, the file the performance page includes."""
    page.write_text(block)


# --- plots --------------------------------------------------------------------------


def plots(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    cases = results["cases"]

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        made.append(name)

    if "engine" in cases:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        rows = cases["engine"]["rows"]
        for store, colour in (("memory", "tab:blue"), ("redis", "tab:red")):
            pts = sorted(
                (r["hosts"], r["median_ms"], r["p99_ms"])
                for r in rows
                if r["store"] == store and r["request"] == "1 instance"
            )
            if pts:
                xs, med, p99 = zip(*pts, strict=True)
                ax.plot(xs, med, "o-", color=colour, label=f"engine, {store}: median")
                ax.plot(xs, p99, "o--", color=colour, alpha=0.5, label=f"engine, {store}: p99")
        naive = sorted((r["hosts"], r["median_ms"]) for r in cases["engine"].get("naive", []))
        if naive:
            xs, med = zip(*naive, strict=True)
            ax.plot(xs, med, "s-", color="tab:gray", label="naive Nova-style loop: median")
        ax.plot([10000, 100000], [1.0, 10.0], "k_", markersize=20, mew=2, label="target")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("hosts")
        ax.set_ylabel("decision latency (ms)")
        ax.set_title("One instance with 2 alternates, claim included")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "engine_latency.png")
    if "rabbit" in cases:
        rows = cases["rabbit"]["rows"]
        callers = sorted({r["callers"] for r in rows})
        fig, ax = plt.subplots(figsize=(6, 4))
        calls = [
            c
            for c in (
                "echo",
                "select_destinations",
                "select_destinations, legacy notifications only",
                "select_destinations, notifications off",
            )
            if any(r["call"] == c for r in rows)
        ]
        width = 0.8 / len(calls)
        for k, (call, colour) in enumerate(
            zip(calls, ("tab:gray", "tab:blue", "tab:purple", "tab:cyan"), strict=False)
        ):
            vals = [_find(rows, callers=c, call=call)["calls_per_s"] for c in callers]
            bars = ax.bar(
                [i + (k - (len(calls) - 1) / 2) * width for i in range(len(callers))],
                vals,
                width,
                color=colour,
                label=call,
            )
            if call != "echo":
                for bar, c in zip(bars, callers, strict=True):
                    r = _find(rows, callers=c, call=call)["ratio_to_echo"]
                    ax.annotate(
                        f"{r:.2f}x echo",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center",
                        va="bottom",
                        fontsize=8,
                    )
        ax.set_xticks(range(len(callers)), [f"{c} caller(s)" for c in callers])
        ax.set_ylabel("calls per second")
        ax.set_title("select_destinations vs bare echo over RabbitMQ (target 0.6x)")
        ax.legend(fontsize=8)
        save(fig, "rabbit.png")
    if "bootstorm" in cases:
        rows = cases["bootstorm"]["rows"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.8))
        labels = [
            f"{r['mode']}\n{r['workers']} worker"
            + ("s" if r["workers"] > 1 else "")
            + (f"\n{r['build_results']}" if r.get("build_results") else "")
            + (", stats at once" if r.get("stats_interval") == 0 else "")
            + (
                f"\nnotifications {r['notifications']}"
                if r.get("notifications", "both") != "both"
                else ""
            )
            for r in rows
        ]
        a1.bar(labels, [r["instances_per_s"] or 0 for r in rows], color="tab:blue")
        a1.set_ylabel("ACTIVE instances per second")
        a1.set_title(f"{rows[0]['instances']} instances, {rows[0]['hosts']} hosts")
        xs = range(len(rows))
        a2.bar([x - 0.2 for x in xs], [r["median_ms"] / 1000 for r in rows], 0.4, label="p50")
        a2.bar([x + 0.2 for x in xs], [r["p99_ms"] / 1000 for r in rows], 0.4, label="p99")
        a2.set_xticks(list(xs), labels, fontsize=8)
        a1.tick_params(axis="x", labelsize=8)
        a2.set_ylabel("request to ACTIVE (s)")
        a2.legend(fontsize=8)
        save(fig, "bootstorm.png")
    if "memory" in cases or "hostview" in cases:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.8))
        mem = sorted((r["hosts"], r["rss_mb"]) for r in cases.get("memory", {}).get("rows", []))
        if mem:
            xs, ys = zip(*mem, strict=True)
            a1.plot(xs, ys, "o-")
        a1.axhline(300, color="k", ls=":", label="target at 100k")
        a1.set_xscale("log")
        a1.set_xlabel("hosts")
        a1.set_ylabel("worker RSS (MB)")
        a1.legend(fontsize=8)
        loads = sorted(
            (r["hosts"], r["load_ms"] / 1000)
            for r in cases.get("hostview", {}).get("cold_load", [])
        )
        if loads:
            xs, ys = zip(*loads, strict=True)
            a2.plot(xs, ys, "o-", color="tab:red")
        a2.axhline(5, color="k", ls=":", label="target at 100k")
        a2.set_xscale("log")
        a2.set_xlabel("hosts")
        a2.set_ylabel("cold load from Redis (s)")
        a2.legend(fontsize=8)
        save(fig, "memory_and_load.png")
    if cases.get("churn", {}).get("rows"):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.8))
        for r in cases["churn"]["rows"]:
            steps = [c["step"] for c in r["checkpoints"]]
            label = f"{r['hosts']:,} hosts, {r['utilisation']:.0%}"
            a1.plot(steps, [c["rss_mb"]["worker"] for c in r["checkpoints"]], "o-", label=label)
            a2.plot(steps, [c["store_mb"] for c in r["checkpoints"]], "o-", label=label)
        a1.set_xlabel("operations done")
        a1.set_ylabel("worker RSS (MB)")
        a2.set_xlabel("operations done")
        a2.set_ylabel("store without the change stream (MB)")
        a1.legend(fontsize=7)
        a1.set_ylim(bottom=0)
        a2.set_ylim(bottom=0)
        save(fig, "churn.png")
    if "fill" in cases:
        _fill_plot(cases["fill"], plt, save)
    return made


def write(
    results: dict[str, Any],
    out: Path,
    log: Callable[[str], None] = print,
    docs: Path | None = None,
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    results["targets"] = targets(results["cases"])
    made = plots(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (out / "results.md").write_text(markdown(results, made))
    paths = [out / "results.json", out / "results.md", *(out / p for p in made)]
    if docs is not None:
        where = os.path.relpath(out.resolve(), docs.resolve().parent)
        update_docs(docs, docs_block(results, made, Path(where).as_posix()))
        paths.append(docs)
    log("wrote " + ", ".join(str(p) for p in paths))
    return paths


# --- placement quality (the fill and lifetimes cases) ---------------------------------


def quality_targets(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """The placement-quality targets, measured on the fill and lifetimes cases."""
    fill = cases.get("fill", {})
    rows = fill.get("rows", [])
    pack, spread = _find(rows, set="pack"), _find(rows, set="spread")
    lifetimes = cases.get("lifetimes", {}).get("rows", [])
    nova = _find(lifetimes, set="nova")
    best = max((r["utilisation_pct"] for r in lifetimes if r["set"] != "nova"), default=None)
    default = fill.get("default_profile", "nova")
    timing = _find(fill.get("decision", []), profile=default)
    values = {
        "fill_pack": pack and pack["before_pct"]["mean"],
        "fill_spread": spread and spread["before_pct"]["mean"],
        "fill_spread_even": spread and spread["ram_fill_spread"]["50%"]["std"],
        "churn_gain": None if nova is None or best is None else best - nova["utilisation_pct"],
        "profile_time": timing and timing["ratio_to_nova"],
    }
    measured = {
        "fill_pack": "mean over the seeds",
        "fill_spread": "mean over the seeds",
        "fill_spread_even": "mean over the seeds",
        "churn_gain": "best profile less nova, same run",
        "profile_time": f"{default}, 1 instance, in-memory store, same run",
    }
    return [_measured(TARGETS[tid], measured[tid], value, "") for tid, value in values.items()]


def _fill_md(case: dict[str, Any]) -> str:
    def span(stat: dict[str, float]) -> str:
        return f"{stat['mean']:.1f} ({stat['min']:.1f}–{stat['max']:.1f})"

    rows = [
        [
            r["set"],
            r["seeds"],
            span(r["before_pct"]),
            span(r["total_pct"]),
            " / ".join(
                f"{r['free_at_failure'][rc]:.1f}" for rc in ("MEMORY_MB", "VCPU", "DISK_GB")
            ),
            *(
                f"{r['ram_fill_spread'][at]['range']:.2f} / {r['ram_fill_spread'][at]['std']:.3f}"
                for at in ("25%", "50%", "75%")
            ),
            r["decision_ms"],
        ]
        for r in case["rows"]
    ]
    parts = [
        "## Fill to full (placement quality)",
        "",
        f"{case['hosts']} hosts ({', '.join(case['shapes'])}, equal numbers), a seeded "
        "trace of m1.small / medium / large / xlarge / big (30 / 30 / 20 / 15 / 5%), one "
        "request at a time through the engine and its claim (in-memory store), on past "
        f"NoValidHost until {case['failures_in_a_row']} fail in a row. % of the upper "
        "bound (the longest prefix of the trace that fits the summed capacity), mean "
        "(min–max) over the seeds; `nova` and `nova pack` are the Nova-identical baseline "
        "(today's weighers, multipliers 1 and -1).",
        "",
        _table(
            [
                "weighers",
                "seeds",
                "% before first NoValidHost",
                "% in total",
                "free RAM / vCPU / disk at first failure (%)",
                "RAM fill max−min / std-dev at 25%",
                "at 50%",
                "at 75%",
                "ms per request",
            ],
            rows,
        ),
    ]
    if case.get("decision"):
        parts += [
            "",
            "Decision time per profile, 1 instance with 2 alternates, claim included, "
            f"in-memory store, {case['decision'][0]['hosts']:,} hosts (the engine case's cloud):",
            "",
            _table(
                ["profile", "median", "p99", "decisions/s", "median / nova's"],
                [
                    [
                        r["profile"],
                        r["median_ms"],
                        r["p99_ms"],
                        r["requests_per_s"],
                        r["ratio_to_nova"],
                    ]
                    for r in case["decision"]
                ],
            ),
        ]
    return "\n".join(parts)


def _fill_plot(case: dict[str, Any], plt: Any, save: Callable[[Any, str], None]) -> None:
    """Mean RAM fill per host shape over the requests, one panel per weigher set."""
    series = case["series"]
    fig, axes = plt.subplots(1, len(series), figsize=(3.2 * len(series), 3.4), sharey=True)
    for ax, (label, points) in zip(list(axes), series.items(), strict=True):
        steps = [k * case["series_every"] for k in range(len(points))]
        for s, shape in enumerate(case["shapes"]):
            ax.plot(steps, [p[s] for p in points], label=shape)
        ax.set_title(label)
        ax.set_xlabel("requests")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("mean RAM fill of the shape's hosts")
    axes[0].legend(fontsize=7)
    save(fig, "fill.png")


def _lifetimes_md(case: dict[str, Any]) -> str:
    loads = [s["load"] for s in next(iter(case["steps"].values()))]
    return "\n".join(
        [
            "## Churn with heavy-tailed lifetimes (placement quality)",
            "",
            f"The fill case's {case['hosts']} hosts and flavor mix; Poisson arrivals, Pareto "
            f"lifetimes (shape {case['pareto_shape']}), the offered load (of disk, the class "
            "the mix exhausts first) raised step by step on one cloud, "
            f"{case['arrivals_per_step']:,} arrivals per step (the first third settling), "
            f"mean of {case['seeds']} seed(s). "
            f"Highest utilisation of the scarcest class with < {case['failure_limit_pct']:g}% "
            "of requests failing, and how many `big` (16 vCPU / 64 GiB / 320 GB) still fit there:",
            "",
            _table(
                ["weighers", "utilisation (%)", "at offered load", "big that still fit"],
                [
                    [r["set"], r["utilisation_pct"], r["load"], r["largest_fit"]]
                    for r in case["rows"]
                ],
            ),
            "",
            "Failed requests (%) per offered load:",
            "",
            _table(
                ["weighers", *(f"{load:.2f}" for load in loads)],
                [
                    [label, *(s["failure_pct"] for s in steps)]
                    for label, steps in case["steps"].items()
                ],
            ),
        ]
    )


def _preempt_md(case: dict[str, Any]) -> str:
    churn = case["churn"]
    rows = [
        [
            r["offered_load"],
            ("on" if r["preemption"] else "off")
            + ("" if r.get("spot_headroom") is None else f", headroom {r['spot_headroom']:.0%}"),
            100 * r["on_demand_acceptance"],
            100 * r["on_demand_at_once_share"],
            100 * r["spot_acceptance"],
            100 * r["memory_utilisation"],
            100 * r["vcpu_utilisation"],
            r["preemptions"],
            r["victims_per_preemption"],
            r["max_victims"],
            r["refused_with_room"],
            r["waited"],
            r["wait_s"]["median_s"],
            r["wait_s"]["p90_s"],
            r["timed_out"],
        ]
        for r in sorted(
            [*churn, *case.get("headroom_baseline", [])],
            key=lambda r: (
                r["offered_load"],
                not r["preemption"],
                r.get("spot_headroom") is not None,
            ),
        )
    ]
    hosts = churn[0]["hosts"] if churn else 0
    return "\n".join(
        [
            "## Preemption under churn (priority classes)",
            "",
            f"{hosts} empty hosts, in process on the in-memory store, a simulated clock; "
            f"Poisson arrivals of one catalog flavor each, {case['spot_share']:.0%} of class "
            "spot (priority 10, preemptible), the rest on-demand (priority 100, may preempt), "
            f"exponential lifetimes (mean {case['lifetime_s']:,.0f} s); an on-demand request "
            f"that finds no host waits up to {case['max_wait_s']:,.0f} s (retried in the "
            "pending index's order after departures), a spot one is refused. The same stream "
            "with preemption on and off, after a warm-up. Offered load: of memory. "
            "`refused with room`: on-demand requests that found no host although evicting "
            "spot instances would have made room (0 wanted with preemption on). Rows "
            "`off, headroom H`: the headroom baseline, preemption off and a spot request "
            "refused when the memory in use, with it, would pass 1 - H of the cloud's, at "
            "the smallest H tried whose on-demand acceptance is at least that of "
            "preemption on; the utilisation target compares with it.",
            "",
            _table(
                [
                    "offered load",
                    "preemption",
                    "on-demand accepted (%)",
                    "at once (%)",
                    "spot accepted (%)",
                    "memory used (%)",
                    "vCPU used (%)",
                    "preemptions",
                    "victims each",
                    "most victims",
                    "refused with room",
                    "waited",
                    "wait median (s)",
                    "wait p90 (s)",
                    "timed out",
                ],
                rows,
            ),
            "",
            "A preempting decision (no host, then the preemption search) against a normal "
            "one, on a cloud full of spot instances, dry run:",
            "",
            _table(
                [
                    "hosts",
                    "normal median",
                    "preempting median",
                    "preempting p99",
                    "first",
                    "ratio",
                    "one host changed: median",
                    "ratio",
                ],
                [
                    [
                        r["hosts"],
                        r["normal"]["median_ms"],
                        r["preempting"]["median_ms"],
                        r["preempting"]["p99_ms"],
                        r["first_preempting_ms"],
                        r["ratio"],
                        r.get("preempting_changed", {}).get("median_ms"),
                        r.get("ratio_changed"),
                    ]
                    for r in case["decision"]
                ],
            ),
        ]
    )
