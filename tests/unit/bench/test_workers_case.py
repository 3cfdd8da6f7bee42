"""The worker-processes case: two workers over one, from each pair of rounds."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.cases import workers


def _row(n: int, request: str, round_: int, per_s: float, **fields: Any) -> dict[str, Any]:
    row = {
        "workers": n,
        "request": request,
        "round": round_,
        "calls_per_s": per_s,
        "median_ms": 10.0,
        "p99_ms": 20.0,
        "ours_cores": 1.0,
        "free_cores": 0.0,
        "cpu_ms_per_call": {"worker 1": 3.0, "workers": 3.0, "callers": 1.0},
        "core_pct": {"worker 1": 80.0, "callers": 20.0, "idle": 0.0},
        "redis_commands_per_call_total": 12.0,
        "view_reloads": {"host_view_loaded": 0},
    }
    return row | fields


def test_each_two_worker_round_is_set_against_the_one_worker_round_before_it() -> None:
    rows = [
        _row(1, "1 instance", 0, 100.0, free_cores=1.2, ours_cores=0.8),
        _row(2, "1 instance", 0, 180.0, ours_cores=1.6, cpu_ms_per_call={"workers": 3.3}),
        _row(1, "1 instance", 1, 200.0),
        _row(2, "1 instance", 1, 220.0, view_reloads={"host_view_loaded": 2}),
    ]
    first, second = workers.scaling(rows, 2)
    assert (first["ratio"], first["cpu_ratio"]) == (1.8, 2.0)
    assert round(first["worker_cpu_ratio"], 2) == 1.1
    assert first["free_core_for_second"] and first["cpu_allowed_ratio"] == 2.5
    assert first["commands_ratio"] == 1.0 and first["reloads"] == 0
    assert second["ratio"] == 1.1 and not second["free_core_for_second"]
    assert second["reloads"] == 2


def test_the_report_has_the_rounds_and_the_ratios() -> None:
    rows = [_row(1, "1 instance", 0, 100.0), _row(2, "1 instance", 0, 150.0)]
    case = {
        "rows": rows,
        "scaling": workers.scaling(rows, 2),
        "hosts": 1000,
        "callers": 16,
        "seconds_per_round": 8.0,
        "cores": 2,
    }
    text = report._workers_md(case)
    assert text.startswith("## 12. Worker processes")
    assert "| 1 instance | 0 | 1.50 | 1.00 | 1.00 | 1.00 | 0 | 0 | 1.00 | 0 |" in text
