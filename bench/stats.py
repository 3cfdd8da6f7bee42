"""Latency summaries: every case reports median and p99 the same way."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def summary(seconds: Sequence[float]) -> dict[str, Any]:
    """n, median, p99, mean, min and max of ``seconds``, in milliseconds."""
    if not len(seconds):
        return {
            "n": 0,
            "median_ms": None,
            "p99_ms": None,
            "mean_ms": None,
            "min_ms": None,
            "max_ms": None,
        }
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    return {
        "n": int(ms.size),
        "median_ms": float(np.median(ms)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
    }


def timed_loop(
    step: Callable[[int], Any], count: int, budget: float, minimum: int = 5
) -> tuple[list[float], float]:
    """Run ``step(i)`` up to ``count`` times (at least ``minimum``, at most
    ``budget`` seconds past that); return each call's seconds and the wall time."""
    timings: list[float] = []
    started = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        step(i)
        timings.append(time.perf_counter() - t0)
        if i + 1 >= minimum and time.perf_counter() - started > budget:
            break
    return timings, time.perf_counter() - started


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator
