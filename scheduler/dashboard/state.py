"""What the dashboard shows, as one JSON document (``/api/state``).

The hosts are ``scheduler-admin hosts``' own rows (:class:`scheduler.usage.HostTable`
over the store's paged reads, each row as ``hosts --json`` prints it), so the
page and ``hosts --json`` cannot disagree;
the totals, the groups for the heat map and how many of each catalog flavor
still fit are worked out from those rows. The rates (decisions per second,
recent NoValidHost reasons, reschedules, re-drives) come from the workers' and
the conductor's Prometheus ``/metrics``, scraped on each refresh; a window of
samples turns their counters into rates. The reconciler's findings of its
last pass (a gauge) and its repairs are shown by kind.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from scheduler import render
from scheduler.log import mask_secrets
from scheduler.objects import Flavor, RequestSpec
from scheduler.store import Store
from scheduler.usage import HostTable

#: One host as ``hosts --json`` prints it (:meth:`HostTable.rows`).
HostRow = Mapping[str, Any]

#: The aggregate metadata key naming an availability zone (as Nova has it).
ZONE_KEY = "availability_zone"
#: Where hosts in no aggregate are grouped.
NO_AGGREGATE = "(no aggregate)"

#: The counters the page reads, by the key it reads them under: (metric
#: family name, the label that splits it, or None).
COUNTERS: dict[str, tuple[str, str | None]] = {
    "decisions": ("scheduler_decisions", "outcome"),
    "claim_conflicts": ("scheduler_claim_conflicts", None),
    "no_valid_host_reasons": ("scheduler_no_valid_host_reasons", "reason"),
    "reschedules": ("conductor_reschedules", "kind"),
    "retries_exhausted": ("conductor_retries_exhausted", "kind"),
    "redrives": ("conductor_redrives", "kind"),
    "timed_out": ("conductor_requests_timed_out", "kind"),
    "reconcile_actions": ("conductor_reconcile_actions", "kind"),
    "preemptions": ("scheduler_preemptions", None),
    "preemption_victims": ("scheduler_preemption_victims", "priority_class"),
}
#: The gauges the page reads, by key: (metric family name, the label that
#: splits it). Several endpoints reporting one are merged by their largest
#: value, not summed: two conductors' reconcilers find the same findings.
GAUGES: dict[str, tuple[str, str]] = {
    "reconcile_findings": ("conductor_reconcile_findings", "kind"),
}
#: The histograms the page reads (their sums and counts), by key.
HISTOGRAMS = {
    "decision_seconds": "scheduler_decision_seconds",
    "engine_wait_seconds": "scheduler_engine_wait_seconds",
    "pending_wait_seconds": "conductor_pending_wait_seconds",
}


# --- the cloud, from the store --------------------------------------------------------


def flavor_fits(resources: Mapping[str, int], rows: Iterable[HostRow]) -> tuple[int, int]:
    """How many instances of a flavor taking ``resources`` still fit, and on how
    many hosts at least one does: per host that is up and enabled, the fewest
    free / needed over the flavor's resource classes (free as ``hosts`` shows
    it, the host's providers summed). An estimate of fragmentation: traits,
    aggregates and unit rules are not asked, nor whether one child provider
    alone has the room."""
    total = hosts = 0
    for row in rows:
        if not row["up"] or row["disabled"]:
            continue
        usage = row["usage"]
        fit = min(
            (
                (u["capacity"] - u["used"]) // amount if (u := usage.get(rc)) is not None else 0
                for rc, amount in resources.items()
                if amount > 0
            ),
            default=0,
        )
        if fit > 0:
            total += fit
            hosts += 1
    return total, hosts


def flavor_resources(flavor: Flavor) -> dict[str, int]:
    """What one instance of ``flavor`` takes, per resource class (its extra
    specs' overrides applied), as the scheduler reads it."""
    return RequestSpec(flavor=flavor, project_id="", user_id="").resource_request.resources


def groups(rows: Sequence[HostRow], zones: Mapping[str, str]) -> list[dict[str, Any]]:
    """The heat map's groups: one per aggregate (by name; its availability zone
    when its metadata names one), its hosts by name; a host in several is in
    each, one in none under :data:`NO_AGGREGATE`."""
    members: dict[str, list[str]] = {}
    for row in rows:
        for name in row["aggregates"] or (NO_AGGREGATE,):
            members.setdefault(name, []).append(row["host"])
    return [
        {"name": name, "zone": zones.get(name), "hosts": hosts}
        for name, hosts in sorted(members.items(), key=lambda kv: (kv[0] == NO_AGGREGATE, kv[0]))
    ]


def summary(table: HostTable) -> dict[str, Any]:
    """Hosts per state and usage against capacity per class, over every host."""
    up = int(table.up.sum())
    return {
        "hosts": len(table),
        "up": up,
        "down": len(table) - up,
        "disabled": int(table.disabled.sum()),
        "usage": table.totals(np.arange(len(table))),
    }


#: How many of the last NoValidHosts the page lists.
REFUSALS_SHOWN = 10
#: How many of the last preemptions the page lists.
PREEMPTIONS_SHOWN = 10


def cloud(
    store: Store, service_down_time: float, catalog: Mapping[str, Flavor], now: float
) -> dict[str, Any]:
    """The hosts (as ``hosts --json`` lists them), their groups, the totals,
    the catalog's flavors with how many still fit, the last NoValidHosts
    (as ``scheduler-admin refusals`` prints them), how many requests wait for
    capacity and the last preemptions (as ``scheduler-admin pending`` and
    ``preemptions`` count and print them)."""
    table = HostTable.from_snapshot(store.compact_snapshot(), now, service_down_time)
    rows = list(table.rows(np.arange(len(table))))
    aggregates = store.list_aggregates()
    zones = {a.name: a.metadata[ZONE_KEY] for a in aggregates if a.metadata.get(ZONE_KEY)}
    flavors = []
    for name, flavor in sorted(catalog.items(), key=lambda kv: (kv[1].memory_mb, kv[0])):
        resources = flavor_resources(flavor)
        fits, hosts = flavor_fits(resources, rows)
        flavors.append({"name": name, "resources": resources, "fits": fits, "hosts": hosts})
    return {
        "hosts": rows,
        "groups": groups(rows, zones),
        "summary": summary(table),
        "flavors": flavors,
        "refusals": [
            {
                "time": render.when(r.at),
                "request_id": r.request_id,
                "action": r.action,
                "instance_uuids": list(r.instance_uuids),
                "reasons": render.reasons_line(r.reasons),
            }
            for r in store.recent_refusals(REFUSALS_SHOWN)
        ],
        "pending": store.count_pending(),
        "preemptions": [
            {
                "time": render.when(e.at),
                "instance_uuid": e.instance_uuid,
                "host": e.host,
                "priority_class": e.priority_class,
                "priority": e.priority,
                "victims": [
                    {"uuid": v.uuid, "priority_class": v.priority_class, "priority": v.priority}
                    for v in e.victims
                ],
            }
            for e in store.recent_preemptions(PREEMPTIONS_SHOWN)
        ],
    }


# --- the rates, from /metrics ----------------------------------------------------------


def read_counters(text: str) -> dict[str, Any]:
    """The :data:`COUNTERS` (per label value, or one number) and :data:`HISTOGRAMS`
    (``sum`` and ``count``) of one Prometheus text exposition."""
    by_family = {family.name: family for family in text_string_to_metric_families(text)}
    out: dict[str, Any] = {}
    for key, (name, label) in COUNTERS.items():
        family = by_family.get(name)
        samples = [s for s in family.samples if s.name == f"{name}_total"] if family else []
        if label is None:
            out[key] = sum(s.value for s in samples)
        else:
            out[key] = {s.labels[label]: s.value for s in samples if label in s.labels}
    for key, (name, label) in GAUGES.items():
        family = by_family.get(name)
        samples = [s for s in family.samples if s.name == name] if family else []
        out[key] = {s.labels[label]: s.value for s in samples if label in s.labels}
    for key, name in HISTOGRAMS.items():
        family = by_family.get(name)
        values: dict[str, float] = {}
        for s in family.samples if family else ():  # summed over its labels
            values[s.name] = values.get(s.name, 0.0) + s.value
        out[key] = {
            "sum": values.get(f"{name}_sum", 0.0),
            "count": values.get(f"{name}_count", 0.0),
        }
    return out


def add_counters(a: dict[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """``a`` with ``b``'s counts added, key by key (nested one level); a
    gauge's (:data:`GAUGES`) largest value kept instead."""
    for key, value in b.items():
        if isinstance(value, Mapping):
            into = a.setdefault(key, {})
            for k, v in value.items():
                into[k] = max(into.get(k, v), v) if key in GAUGES else into.get(k, 0.0) + v
        else:
            a[key] = a.get(key, 0.0) + value
    return a


def _total(value: Any) -> float:
    return sum(value.values()) if isinstance(value, Mapping) else float(value)


def _delta(new: Any, old: Any) -> Any:
    """What a counter (or a map of them) grew by; a counter that went back (its
    process restarted) counts from 0."""
    if isinstance(new, Mapping):
        old = old if isinstance(old, Mapping) else {}
        deltas = {k: _delta(v, old.get(k, 0.0)) for k, v in new.items()}
        return {k: d for k, d in deltas.items() if d}
    return new - old if new >= old else new


#: How the page says its figures of decisions, NoValidHosts and reschedules
#: are not measured: no /metrics endpoint is configured, or none answers.
NO_ENDPOINT = (
    "no metrics endpoint is configured, so decisions, NoValidHosts and reschedules "
    "are not shown: set [scheduler] health_port and [conductor] health_port (each "
    "daemon then serves /metrics there), or pass --metrics-url"
)
NONE_ANSWERS = (
    "no metrics endpoint answers ({count} configured), so decisions, NoValidHosts and "
    "reschedules are not shown: are the workers and the conductor running?"
)


def unmeasured(endpoints: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the counters are not measured (None: at least one endpoint answered)."""
    if not endpoints:
        return NO_ENDPOINT
    if not any(e["up"] for e in endpoints):
        return NONE_ANSWERS.format(count=len(endpoints))
    return None


@dataclass
class Scraper:
    """Scrapes the ``/metrics`` of ``urls``, keeping ``history`` seconds of
    samples of the summed counters, so that their growth over a window is a rate."""

    urls: Sequence[str]
    history: float = 120.0
    timeout: float = 2.0
    clock: Callable[[], float] = time.monotonic
    fetch: Callable[[str, float], str] | None = None
    _samples: deque[tuple[float, dict[str, Any]]] = field(default_factory=deque)

    def _get(self, url: str) -> str:
        if self.fetch is not None:
            return self.fetch(url, self.timeout)
        with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310
            return str(response.read().decode())

    def scrape(self) -> dict[str, Any]:
        """Every endpoint once: which answered, the counters summed over those
        that did, and their rates over the last 10 s and growth over the last
        60 s (or as long as samples go back)."""
        endpoints = []
        totals: dict[str, Any] = {}
        for url in self.urls:
            shown = mask_secrets(url)  # what the page shows of it
            try:
                add_counters(totals, read_counters(self._get(url)))
                endpoints.append({"url": shown, "up": True})
            except (OSError, ValueError) as exc:
                error = mask_secrets(str(exc))[:200]
                endpoints.append({"url": shown, "up": False, "error": error})
        now = self.clock()
        self._samples.append((now, totals))
        while self._samples and self._samples[0][0] < now - self.history:
            self._samples.popleft()
        return {
            "endpoints": endpoints,
            "unmeasured": unmeasured(endpoints),
            "totals": totals,
            "rates": self._rates(now, totals, window=10.0),
            "recent": self._growth(now, totals, window=60.0),
        }

    def _oldest(self, now: float, window: float) -> tuple[float, dict[str, Any]] | None:
        within = [s for s in self._samples if s[0] >= now - window]
        return within[0] if len(within) > 1 else None

    def _growth(self, now: float, totals: Mapping[str, Any], window: float) -> dict[str, Any]:
        """How much each counter grew over (at most) the last ``window`` seconds."""
        oldest = self._oldest(now, window)
        seconds = now - oldest[0] if oldest else 0.0
        growth = {
            key: _delta(value, oldest[1].get(key, 0.0)) if oldest else {}
            for key, value in totals.items()
            if key in COUNTERS
        }
        return {"seconds": round(seconds, 3), **growth}

    def _rates(self, now: float, totals: Mapping[str, Any], window: float) -> dict[str, float]:
        """Decisions per second over the last ``window`` seconds, and the mean
        deciding and waiting time of those decisions (ms)."""
        oldest = self._oldest(now, window)
        if oldest is None:
            return {"decisions_per_second": 0.0, "decision_ms": 0.0, "engine_wait_ms": 0.0}
        seconds = now - oldest[0]
        then = oldest[1]
        decided = _delta(_total(totals.get("decisions", {})), _total(then.get("decisions", {})))

        def mean_ms(key: str) -> float:
            new, old = totals.get(key, {}), then.get(key, {})
            count = _delta(new.get("count", 0.0), old.get("count", 0.0))
            spent = _delta(new.get("sum", 0.0), old.get("sum", 0.0))
            return round(1000 * spent / count, 3) if count else 0.0

        return {
            "decisions_per_second": round(decided / seconds, 3) if seconds > 0 else 0.0,
            "decision_ms": mean_ms("decision_seconds"),
            "engine_wait_ms": mean_ms("engine_wait_seconds"),
        }


@dataclass
class StateSource:
    """The whole ``/api/state`` document, built at most once per ``min_interval``
    seconds whatever the number of pages polling (each build reads every host
    from the store, in pages)."""

    read_cloud: Callable[[], dict[str, Any]]
    scraper: Scraper
    min_interval: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _built: tuple[float, dict[str, Any]] | None = None

    def get(self) -> dict[str, Any]:
        with self._lock:
            now = self.clock()
            if self._built is None or now - self._built[0] >= self.min_interval:
                state = self.read_cloud()
                state["metrics"] = self.scraper.scrape()
                state["generated_at"] = time.time()
                self._built = (now, state)
            return self._built[1]
