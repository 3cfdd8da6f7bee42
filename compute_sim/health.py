"""Whether a compute's reports are getting through, for its health endpoint and
its metrics.

The reconciler trusts a host's report of what it runs only while the report
is younger than ``[conductor] report_max_age``; past that it can no longer
judge the host. A compute whose reports fail for that long says so itself:
``/healthz`` (``[compute] health_port``) answers 503 with ``reports: down``,
and ``/metrics`` carries (names part of the operator interface; keep them
stable):

* ``compute_reports_failed_total``: report writes that failed (the store
  could not be reached, or took no write).
* ``compute_report_age_seconds``: seconds since this process last wrote its
  report (since it started, if it never has).
* ``compute_reports_stale``: 1 while that age is past ``report_max_age``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge

from scheduler.log import RepeatLimiter, get_logger

LOG = get_logger(__name__)
#: A failing report is retried every interval: a few lines a minute at most.
REPEATS = RepeatLimiter()

REPORTS_FAILED = Counter(
    "compute_reports_failed", "Reports of the VMs this compute's hosts run that failed."
)
REPORT_AGE = Gauge(
    "compute_report_age_seconds", "Seconds since this compute last wrote its report."
)
REPORTS_STALE = Gauge(
    "compute_reports_stale",
    "1 while this compute's last report is older than [conductor] report_max_age "
    "(the reconciler cannot judge its hosts).",
)


class ReportFreshness:
    """When the last report went through, and whether that is too long ago.

    ``max_age``: the age past which a report is stale to the reconciler.
    """

    def __init__(self, max_age: float, clock: Callable[[], float] = time.time) -> None:
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ok = clock()  # a process that never reported is as old as itself
        self.failures = 0

    def reported(self) -> None:
        with self._lock:
            self._last_ok = self._clock()

    def failed(self, exc: BaseException) -> None:
        """A report that did not go through (logged: ``instances_report_failed``)."""
        with self._lock:
            self.failures += 1
        REPORTS_FAILED.inc()
        REPEATS.log(
            LOG,
            "warning",
            "instances_report_failed",
            key=type(exc).__name__,
            error=repr(exc),
            stale=not self.fresh(),
        )

    def age(self) -> float:
        with self._lock:
            return max(0.0, self._clock() - self._last_ok)

    def fresh(self) -> bool:
        """Whether the last report is young enough for the reconciler."""
        return self.age() <= self.max_age

    def export(self) -> None:
        """Read this one's age at every scrape of ``/metrics``."""
        REPORT_AGE.set_function(self.age)
        REPORTS_STALE.set_function(lambda: 0.0 if self.fresh() else 1.0)
