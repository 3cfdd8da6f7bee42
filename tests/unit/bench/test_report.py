"""The benchmark report: each target is met, missed or not measured, from the figures."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report


def _engine(median_ms: float, per_s: float, hosts: int = 10000) -> dict[str, Any]:
    return {
        "rows": [
            {
                "store": "memory",
                "hosts": hosts,
                "request": "1 instance",
                "median_ms": median_ms,
                "requests_per_s": per_s,
            }
        ]
    }


ALT = "1 instance, alternated"


def _storm(workers: int, ratio: float | None, **fields: Any) -> dict[str, Any]:
    """A backlog storm's row (one a request, both formats, results in the store)."""
    return {
        "mode": "backlog",
        "workers": workers,
        "build_results": "store",
        "notifications": "both",
        "per_request": 1,
        "ratio_to_one_worker": ratio,
        **fields,
    }


def _rows(*rows: tuple[str, int, str, float]) -> dict[str, Any]:
    """An engine case of (store, hosts, request, median ms) rows, p99 twice the median."""
    return {
        "rows": [
            {
                "store": store,
                "hosts": hosts,
                "request": request,
                "median_ms": ms,
                "p99_ms": 2 * ms,
                "requests_per_s": 1000 / ms,
            }
            for store, hosts, request, ms in rows
        ],
        "flat_hosts": [10000, 300000],
    }


def _cell(**figures: Any) -> dict[str, Any]:
    cell = {
        "hosts": 300000,
        "cold_load_s": 9.0,
        "worker_rss_mb": 600.0,
        "slowest_ms": 4.0,
        "slowest_command": "EVALSHA snapshot",
        "slowest_phase": "cold load",
    }
    return {**cell, **figures}


@pytest.mark.parametrize(
    ("cases", "target", "measured_on", "status"),
    [
        pytest.param(
            {"engine": _engine(0.5, 2000.0)},
            "engine_10k",
            "in-memory",
            "met",
            id="engine-fast-enough",
        ),
        pytest.param(
            {"engine": _engine(1.5, 2000.0)},
            "engine_10k",
            "in-memory",
            "**missed**",
            id="engine-too-slow",
        ),
        pytest.param(
            {"engine": _engine(0.5, 900.0)},
            "engine_rate_10k",
            "in-memory",
            "**missed**",
            id="engine-rate-too-low",
        ),
        pytest.param(
            {"engine": _engine(0.5, 2000.0, hosts=1000)},
            "engine_10k",
            "in-memory",
            "not measured",
            id="engine-not-at-10k",
        ),
        pytest.param(
            {"engine": _engine(0.5, 2000.0)},
            "engine_10k",
            "Redis",
            "not measured",
            id="engine-redis-not-run",
        ),
        pytest.param(
            {"engine": _rows(("memory", 10000, ALT, 0.4), ("memory", 300000, ALT, 0.5))},
            "engine_flat",
            "in-memory",
            "met",
            id="engine-flat-met",
        ),
        pytest.param(
            {"engine": _rows(("redis", 10000, ALT, 0.5), ("redis", 300000, ALT, 0.8))},
            "engine_flat",
            "Redis store, claim included, 1 instance, decisions alternated, ratio (300,000 hosts: "
            "median 0.80, p99 1.60",
            "**missed**",
            id="engine-flat-missed-says-both-medians",
        ),
        pytest.param(
            {"engine": _rows(("memory", 10000, ALT, 0.4), ("memory", 300000, "1 instance", 0.5))},
            "engine_flat",
            "in-memory",
            "not measured",
            id="engine-flat-without-300k",
        ),
        pytest.param(
            {"engine": _rows(("memory", 100000, "1 instance, uncapped", 4.0))},
            "engine_uncapped_100k",
            "p99 8.00 ms",
            "met",
            id="engine-uncapped-met",
        ),
        pytest.param(
            {"engine": _rows(("memory", 10000, "five-flavor stream", 0.12))},
            "engine_stream_10k",
            "in-memory",
            "**missed**",
            id="engine-stream-missed",
        ),
        pytest.param(
            {
                "engine": _rows(
                    ("memory", 100000, "1 instance, uncapped", 9.0),
                    ("memory", 100000, "1 instance, uncapped, shape cache", 2.5),
                )
            },
            "engine_uncapped_100k",
            "shape_cache on, p99 5.00 ms",
            "met",
            id="engine-uncapped-cached-its-own-row",
        ),
        pytest.param(
            {
                "engine": _rows(
                    ("memory", 100000, "1 instance, uncapped", 9.0),
                    ("memory", 100000, "1 instance, uncapped, shape cache", 2.5),
                )
            },
            "engine_uncapped_100k",
            "shape_cache off, the default, p99 18.0 ms",
            "**missed**",
            id="engine-uncapped-default-its-own-row",
        ),
        pytest.param(
            {
                "rabbit": {
                    "rows": [{"call": "select_destinations", "callers": 16, "ratio_to_echo": 0.85}]
                }
            },
            "rabbit_ratio",
            "16 caller",
            "met",
            id="rabbit-ratio-met",
        ),
        pytest.param(
            {
                "bootstorm": {
                    "cores": 2,
                    "rows": [{"mode": "backlog", "workers": 2, "ratio_to_one_worker": 1.2}],
                }
            },
            "storm_ratio",
            "backlog",
            "**missed**",
            id="storm-ratio-missed",
        ),
        pytest.param(
            {
                "bootstorm": {
                    "cores": 2,
                    "rows": [{"mode": "backlog", "workers": 2, "ratio_to_one_worker": 1.7}],
                }
            },
            "storm_ratio",
            "streamed",
            "not measured",
            id="storm-streamed-not-run",
        ),
        pytest.param(
            {"bootstorm": {"cores": 2, "rows": [_storm(2, 1.2, free_core_for_second=False)]}},
            "storm_ratio",
            "backlog",
            report.NO_FREE_CORE,
            id="storm-ratio-not-judged-without-a-free-core",
        ),
        pytest.param(
            {
                "bootstorm": {
                    "cores": 2,
                    "rows": [_storm(2, 1.2, free_core_for_second=False, ratio_limit=1.15)],
                }
            },
            "storm_ratio",
            "backlog",
            f"{report.NO_FREE_CORE}: met against ≥ 1.15x",
            id="storm-ratio-without-a-free-core-judged-against-what-the-idle-cpu-allowed",
        ),
        pytest.param(
            {
                "bootstorm": {
                    "cores": 2,
                    "rows": [_storm(2, 1.1, free_core_for_second=False, ratio_limit=1.15)],
                }
            },
            "storm_ratio",
            "backlog",
            f"{report.NO_FREE_CORE}: **missed** against ≥ 1.15x",
            id="storm-ratio-without-a-free-core-below-what-the-idle-cpu-allowed",
        ),
        pytest.param(
            {"bootstorm": {"cores": 2, "rows": [_storm(2, 1.2, free_core_for_second=True)]}},
            "storm_ratio",
            "backlog",
            "**missed**",
            id="storm-ratio-judged-with-a-free-core",
        ),
        pytest.param(
            {"bootstorm": {"rows": [_storm(1, None, per_request=10, cpu_ms_per_boot=1.9)]}},
            "storm_cpu_10",
            "10 a request",
            "met",
            id="storm-cpu-at-10-a-request-read-from-its-row",
        ),
        pytest.param(
            {"bootstorm": {"rows": [_storm(1, None, per_request=1, cpu_ms_per_boot=1.9)]}},
            "storm_cpu_10",
            "10 a request",
            "not measured",
            id="storm-cpu-at-10-not-from-the-1-a-request-row",
        ),
        pytest.param(
            {"bootstorm": {"rows": [_storm(1, None, per_request=10, amqp_messages_per_boot=3.4)]}},
            "storm_messages_10",
            "10 a request",
            "**missed**",
            id="storm-messages-at-10-a-request-missed",
        ),
        pytest.param(
            {"memory": {"rows": [{"hosts": 100000, "rss_mb": 250.0}]}},
            "rss_100k",
            "VmRSS",
            "met",
            id="rss-met",
        ),
        pytest.param(
            {"hostview": {"cold_load": [{"hosts": 100000, "load_ms": 6000.0}]}},
            "load_100k",
            "first decision",
            "**missed**",
            id="cold-load-missed",
        ),
        pytest.param(
            {"cell": _cell(slowest_ms=12.0)},
            "command_300k",
            "slowest command",
            "**missed**",
            id="cell-slow-command-missed",
        ),
        pytest.param(
            {"cell": _cell()}, "command_300k", "slowest command", "met", id="cell-commands-met"
        ),
        pytest.param({"cell": _cell()}, "load_300k", "first", "met", id="cell-cold-load-met"),
        pytest.param(
            {"cell": _cell(worker_rss_mb=900.0)}, "rss_300k", "VmRSS", "**missed**", id="cell-rss"
        ),
        pytest.param(
            {"cell": _cell(hosts=300)},
            "command_300k",
            "slowest command",
            "not measured",
            id="cell-quick-measures-nothing",
        ),
    ],
)
def test_targets(cases: dict[str, Any], target: str, measured_on: str, status: str) -> None:
    found = [
        t for t in report.targets(cases) if t["id"] == target and measured_on in t["measured_on"]
    ]
    assert [t["status"] for t in found] == [status]


def test_storm_cpu_has_its_messages_floor_beside_it() -> None:
    # Beside the storm's CPU per boot, the floor of the messages it sent at the
    # e2e case's baselines: 8 messages = one call (2) + 6 casts.
    cases = {
        "bootstorm": {"rows": [_storm(1, None, cpu_ms_per_boot=8.0, amqp_messages_per_boot=8.0)]},
        "e2e": {
            "baselines": [
                {"baseline": "echo call", "callers": 1, "cpu_ms_each": 2.0},
                {"baseline": "echo call", "callers": 16, "cpu_ms_each": 1.5},
                {"baseline": "kombu cast", "callers": 1, "cpu_ms_each": 0.5},
            ]
        },
    }
    [found] = [
        t
        for t in report.targets(cases)
        if t["id"] == "storm_cpu" and t["measured_on"].startswith("backlog")
    ]
    assert found["status"] == "**missed**"
    assert "echo call 2.00 ms, a kombu cast 0.50 ms" in found["note"]
    assert "floor 5.00 ms a boot" in found["note"]


def test_each_target_is_declared_once_beside_its_case() -> None:
    import importlib
    import pkgutil

    import bench.cases

    # Every case that declares targets is one the report reads.
    declaring = {
        name
        for _, name, _ in pkgutil.iter_modules(bench.cases.__path__)
        if getattr(importlib.import_module(f"bench.cases.{name}"), "TARGETS", None)
    }
    assert declaring == {case.__name__.rsplit(".", 1)[1] for case in report.TARGET_CASES}
    declared = [t.id for case in report.TARGET_CASES for t in case.TARGETS]
    assert sorted(declared) == sorted(report.TARGETS)  # no id twice
    assert {t.kind for t in report.TARGETS.values()} <= {"max", "min"}


def test_storm_ratio_note_has_each_process_of_the_one_worker_storm() -> None:
    # The note beside the two-worker target: what each process of the
    # one-worker storm used, what was idle, and what the two were held to.
    one = _storm(
        1,
        1.0,
        free_cores=0.4,
        cpu_by_process={
            "worker 1": {"ms_per_boot": 3.5, "core_pct": 70.0},
            "compute": {"ms_per_boot": 3.0, "core_pct": 60.0},
            "others": {"ms_per_boot": 1.0, "core_pct": 10.0},
            "idle": {"ms_per_boot": 2.0, "core_pct": 40.0},
        },
    )
    two = _storm(2, 1.2, free_core_for_second=False, cpu_allowed_ratio=1.3, ratio_limit=1.18)
    [found] = [
        t
        for t in report.targets({"bootstorm": {"cores": 2, "rows": [one, two]}})
        if t["id"] == "storm_ratio" and t["measured_on"].startswith("backlog")
    ]
    assert "worker 1 70.0 %, compute 60.0 %" in found["note"]
    assert "others 10.0 %" in found["note"]
    assert "0.40 of 2 cores idle" in found["note"]
    assert "held to 1.18x" in found["note"]
    assert found["status"] == f"{report.NO_FREE_CORE}: met against ≥ 1.18x"


def test_storm_table_gives_each_process_per_boot_and_per_core() -> None:
    row = _storm(
        2,
        1.2,
        stats_interval=report.bootstorm.STATS_INTERVAL,
        instances=10,
        hosts=5,
        states={"ACTIVE": 10},
        rescheduled=0,
        seconds=1.0,
        instances_per_s=10.0,
        median_ms=1.0,
        p99_ms=1.0,
        cpu_by_process={
            "compute": {"ms_per_boot": 3.0, "core_pct": 60.0},
            "worker 2": {"ms_per_boot": 1.5, "core_pct": 30.0},
            "worker 1": {"ms_per_boot": 2.0, "core_pct": 40.0},
            "client": {"ms_per_boot": 4.0, "core_pct": None},
        },
    )
    table = report._storm_md({"cores": 2, "prefetch": 20, "rows": [row]})
    lines = table.splitlines()
    header = next(x for x in lines if x.startswith("| mode | workers | ACTIVE"))
    assert header == "| mode | workers | ACTIVE/s | worker 1 | worker 2 | compute | client |"
    assert "| 2.00 (40.0 %) | 1.50 (30.0 %) | 3.00 (60.0 %) | 4.00 |" in table


def test_the_docs_name_the_cases_recorded_since_the_full_run() -> None:
    run = {"started_at": "2026-12-08 00:19 UTC"}
    older = {"started_at": "2026-12-01 10:00 UTC"}
    cases = {
        "rabbit": {"rows": [{"run": older}, {"run": run}]},
        "engine": {"rows": [{"median_ms": 1.0}]},  # from the full run
        "memory": {"rows": "not a list"},
    }
    assert report._merged_since(cases) == (
        " Recorded since by runs of their own (``--merge``): rabbit (2026-12-08 00:19 UTC)."
    )
    assert report._merged_since({"engine": {"rows": [{}]}}) == ""
