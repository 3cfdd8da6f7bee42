"""The stats a compute reports of its hosts, as operations start and end.

Each host reports its stats whenever a build, an evacuation's rebuild, a
resize's prep or a live migration's check on it starts or ends: operations
in progress (``num_io_ops``, as Nova counts a resize's prep), the operations
started since the process started (:data:`OPS_STARTED_STAT`) and, per image
property value, how many of its instances run such an image (counted when a
build succeeds; a resize does not move the count). Reports go to the store
only when they change, never with heartbeats; the count of operations
started makes every report after one a change, so it reaches the workers
even when the operation began and ended within one ``stats_interval``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from compute_sim.runner import DelayedRunner
from scheduler.engine.capabilities import IO_OPS_STAT, image_property_stat
from scheduler.exceptions import StoreError
from scheduler.log import get_logger
from scheduler.store import ServiceReport, ServiceStore

LOG = get_logger(__name__)

#: The stat counting the operations this process started on a host (builds,
#: resizes' preps, live migrations' checks): it only grows, so a host's report
#: after an operation started always differs from the one before it.
OPS_STARTED_STAT = "num_io_ops_started"


class HostStats:
    """The counters of ``hosts`` and their reports to ``store`` (none unless
    ``report``): each change at once, or every host's changes of the next
    ``interval`` seconds in one store write."""

    def __init__(
        self, store: ServiceStore, hosts: Sequence[str], report: bool, interval: float
    ) -> None:
        self.store = store
        self.report = report
        self.interval = interval
        self._lock = threading.Lock()  # reports leave in the order they were made
        self._due: set[str] = set()
        self._io_ops: dict[str, int] = dict.fromkeys(hosts, 0)
        self._ops_started: dict[str, int] = dict.fromkeys(hosts, 0)
        self._image_counts: dict[str, dict[str, int]] = {h: {} for h in hosts}
        self._runner = DelayedRunner("compute-sim-stats")

    def of(self, host: str) -> dict[str, int]:
        """What ``host`` reports now."""
        return {
            IO_OPS_STAT: self._io_ops[host],
            OPS_STARTED_STAT: self._ops_started[host],
            **self._image_counts[host],
        }

    def count(self, host: str, io_ops: int, image: Mapping[str, str] | None = None) -> None:
        """Change a host's counters and report them (in order, and only if
        enabled): at once, or with every host's changes of the next
        ``interval`` seconds in one store write (a build's start and end
        inside it cost one write, not two).

        A worker counts an operation it placed on a host as in progress
        until the host's next report reaches it, and the store feeds only a
        report that changed: an operation that starts and ends within one
        interval leaves ``num_io_ops`` as it was, so it is the count of
        operations started (:data:`OPS_STARTED_STAT`) that makes the report
        a change, and every worker's count the host's own again."""
        with self._lock:
            self._io_ops[host] = max(self._io_ops[host] + io_ops, 0)
            self._ops_started[host] += max(io_ops, 0)
            for prop, value in (image or {}).items():
                stat = image_property_stat(prop, str(value))
                self._image_counts[host][stat] = self._image_counts[host].get(stat, 0) + 1
            if not self.report:
                return
            if self.interval <= 0:
                self._write([host])
                return
            if not self._due:
                self._runner.later(self.interval, self._write_due)
            self._due.add(host)

    def stop(self) -> None:
        self._runner.stop()

    def _write_due(self) -> None:
        with self._lock:
            hosts, self._due = sorted(self._due), set()
            self._write(hosts)

    def _write(self, hosts: list[str]) -> None:
        """One store write of ``hosts``' stats; the caller holds the lock."""
        try:
            self.store.report_services([ServiceReport(h, stats=self.of(h)) for h in hosts])
        except StoreError as exc:  # a later report carries the counts again
            LOG.warning("stats_report_failed", hosts=hosts, error=exc.message)
